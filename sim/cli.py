"""`flywheel-sim`: advance the simulated clock, landing each day's production files."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from datetime import date, timedelta

from tqdm import tqdm

from pipelines.contracts import load_task
from pipelines.resources import ENVIRONMENTS, flywheel_home, label_store, landing_zone
from sim.clock import read_clock, write_clock
from sim.replay import day_bounds, land_days


class UsageError(Exception):
    """A command line that names something impossible (reported argparse-style)."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of days >= 1, got {text!r}")
    return value


def _iso_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date as YYYY-MM-DD, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The command line: `advance` and `status` subcommands."""
    parser = argparse.ArgumentParser(prog="flywheel-sim", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    advance = commands.add_parser("advance", help="land the next days' production files")
    advance.add_argument("--days", type=_positive_int, required=True, help="how many days")
    advance.add_argument(
        "--start", type=_iso_day, help="first day to land (default: the day after the clock)"
    )
    advance.add_argument("--env", choices=ENVIRONMENTS, help="default: FLYWHEEL_ENV or local")
    run = commands.add_parser(
        "run", help="the main job: land day by day and run the pipeline as its sensors ask"
    )
    run.add_argument("--days", type=_positive_int, required=True, help="how many days")
    run.add_argument("--start", type=_iso_day, help="first day (default: the day after the clock)")
    status = commands.add_parser("status", help="show the clock and the landing zone")
    status.add_argument("--env", choices=ENVIRONMENTS, help="default: FLYWHEEL_ENV or local")
    return parser


def _span(days: int, start: date | None) -> list[date]:
    """The days to land: `days` from `start` (default: after the clock), clamped to the task."""
    task = load_task()
    first, last = day_bounds(task)
    clock = read_clock(flywheel_home())
    if start is not None and not first <= start <= last:
        raise UsageError(f"--start {start} is outside task {task.name!r} ({first} to {last})")
    if start is None:
        start = clock + timedelta(days=1) if clock else first
        if start > last:
            print(f"the simulation already reached the task's last day {last}: nothing to land")
            return []
    end = start + timedelta(days=days - 1)
    if end > last:
        end = last
        print(f"clamped to the task's last day {last}: landing {(end - start).days + 1} days")
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def advance(days: int, start: date | None = None, env: str | None = None) -> int:
    """Land `days` days from `start` (default: the day after the clock) and move the clock."""
    span = _span(days, start)
    if not span:
        return 0
    home = flywheel_home()
    zone = landing_zone(env)
    with tqdm(total=len(span), unit="day", desc="landing") as bar:
        report = land_days(zone, span, load_task(), on_day=lambda day: bar.update(1))
    clock = read_clock(home)
    clock = max(clock, span[-1]) if clock else span[-1]
    write_clock(home, clock)
    print(
        f"landed {len(report.days)} days ({span[0]}..{span[-1]}) into {zone.uri}: "
        f"{report.written} files written, {report.unchanged} unchanged, "
        f"{report.flights_rows:,} flights rows; clock at {clock}"
    )
    return 0


def run(days: int, start: date | None = None) -> int:
    """The main job: each day, land it, ingest it, label it; then cut a versioned dataset."""
    import dagster as dg

    from pipelines.definitions import defs
    from pipelines.defs.datasets.assets import DatasetConfig
    from sim.driver import FlywheelDriver, warehouse_summary
    from sim.labeling import LabelingService

    span = _span(days, start)
    if not span:
        return 0
    began, home, zone = time.monotonic(), flywheel_home(), landing_zone()
    annotators = LabelingService(label_store(), latency_days=1)

    def land(day: date) -> None:
        land_days(zone, [day])
        write_clock(home, max(read_clock(home) or day, day))

    with dg.DagsterInstance.get() as instance:
        driver = FlywheelDriver(defs, instance, home / "sim", land, annotators.deliver)
        for day in span:
            tick = driver.day(day)
            runs = ", ".join(f"{job}[{part or '-'}] {s:.0f}s" for job, part, s in tick.runs)
            print(f"{day}: {len(tick.runs)} runs ({runs})", flush=True)
        summary = ", ".join(f"{k} {v:,}" for k, v in warehouse_summary(defs).items())
        print(f"ran {len(span)} days in {time.monotonic() - began:.0f}s: {summary}")
        labelled_days = int(
            defs.resources["warehouse"]
            .query(
                "select count(distinct f.flight_date) n from fct_flight_features f "
                "join stg_labels__flight_labels l on l.flight_id = f.flight_id"
            )
            .n[0]
        )
        held_out = DatasetConfig().validation_days + DatasetConfig().test_days
        if labelled_days > held_out:
            print(f"training dataset: {driver.dataset()}", flush=True)
            challenger = driver.train()
            print("challenger model:")
            for key, value in challenger.items():
                print(f"  {key}: {value}")
        else:
            print(
                f"no training dataset yet: {labelled_days} labelled days, it needs more than "
                f"{held_out} (validation + test); run more days"
            )
    print("see the runs and assets: make dev (Dagster UI at http://127.0.0.1:3000)")
    return 0


def status(env: str | None = None) -> int:
    """Print the clock and where the landing zone is."""
    task = load_task()
    first, last = day_bounds(task)
    clock = read_clock(flywheel_home())
    upcoming = clock + timedelta(days=1) if clock else first
    following = f"next day {upcoming}" if upcoming <= last else f"finished ({last} landed)"
    print(f"clock: {clock or 'not started'} ({following}; task {task.name} {first}..{last})")
    print(f"landing zone: {landing_zone(env).uri}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; argparse exits with status 2 on a bad command line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "advance":
            return advance(args.days, args.start, args.env)
        if args.command == "run":
            return run(args.days, args.start)
        return status(args.env)
    except UsageError as e:
        parser.error(str(e))
