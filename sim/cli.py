"""`flywheel-sim`: advance the simulated clock, landing each day's production files."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import date, timedelta

from tqdm import tqdm

from pipelines.contracts import load_task
from pipelines.resources import ENVIRONMENTS, flywheel_home, landing_zone
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
    status = commands.add_parser("status", help="show the clock and the landing zone")
    status.add_argument("--env", choices=ENVIRONMENTS, help="default: FLYWHEEL_ENV or local")
    return parser


def advance(days: int, start: date | None = None, env: str | None = None) -> int:
    """Land `days` days from `start` (default: the day after the clock) and move the clock."""
    task = load_task()
    first, last = day_bounds(task)
    home = flywheel_home()
    clock = read_clock(home)
    if start is not None and not first <= start <= last:
        raise UsageError(f"--start {start} is outside task {task.name!r} ({first} to {last})")
    if start is None:
        start = clock + timedelta(days=1) if clock else first
        if start > last:
            print(f"the simulation already reached the task's last day {last}: nothing to land")
            return 0
    end = start + timedelta(days=days - 1)
    if end > last:
        end = last
        print(f"clamped to the task's last day {last}: landing {(end - start).days + 1} days")
    span = [start + timedelta(days=i) for i in range((end - start).days + 1)]
    zone = landing_zone(env)
    with tqdm(total=len(span), unit="day", desc="landing") as bar:
        report = land_days(zone, span, task, on_day=lambda day: bar.update(1))
    clock = max(clock, end) if clock else end
    write_clock(home, clock)
    print(
        f"landed {len(report.days)} days ({start}..{end}) into {zone.uri}: "
        f"{report.written} files written, {report.unchanged} unchanged, "
        f"{report.flights_rows:,} flights rows; clock at {clock}"
    )
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
        return status(args.env)
    except UsageError as e:
        parser.error(str(e))
