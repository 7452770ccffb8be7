"""`flywheel-sim`: advance the simulated clock, landing each day's production files."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path

from tqdm import tqdm

from pipelines.contracts import load_task
from pipelines.resources import ENVIRONMENTS, flywheel_home, landing_zone
from sim.clock import read_clock, write_clock
from sim.console import log_path, output_to_log, say
from sim.drift import PlantedDrift, parse_drift
from sim.executor import RunFailedError
from sim.main_job import RunOptions, UsageError, days_to_play, run
from sim.replay import day_bounds, land_days


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _iso_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date as YYYY-MM-DD, got {text!r}") from None


def _drift(text: str) -> PlantedDrift:
    try:
        return parse_drift(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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
    run.add_argument(
        "--bootstrap-days", type=_positive_int, default=21, help="days before the first model"
    )
    run.add_argument("--trials", type=_positive_int, default=4, help="tuning trials per retraining")
    run.add_argument("--max-epochs", type=_positive_int, default=12, help="epochs per trial")
    run.add_argument(
        "--drift", type=_drift, help="plant a drift, e.g. celsius@2013-11-01 (weather in Celsius)"
    )
    run.add_argument(
        "--validation-days",
        type=_positive_int,
        default=7,
        help="latest labelled days each retraining holds out to validate on (before its test)",
    )
    run.add_argument(
        "--test-days",
        type=_positive_int,
        default=7,
        help="latest labelled days each retraining holds out to test on",
    )
    run.add_argument("--report-dir", type=Path, help="default: $FLYWHEEL_HOME/report")
    run.add_argument(
        "--pool-wait",
        type=_positive_int,
        default=600,
        help="seconds a run waits for a pool slot another live run holds before it fails",
    )
    status = commands.add_parser("status", help="show the clock and the landing zone")
    status.add_argument("--env", choices=ENVIRONMENTS, help="default: FLYWHEEL_ENV or local")
    return parser


def advance(days: int, start: date | None = None, env: str | None = None) -> int:
    """Land `days` days from `start` (default: the day after the clock) and move the clock."""
    span = days_to_play(days, start)
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


def run_logged(days: int, start: date | None, options: RunOptions) -> int:
    """The main job with one line a day on the terminal and every library's output in a log
    file; a failed run prints its failing steps' errors and the log's path, and exits 1."""
    log = log_path(flywheel_home())
    say(f"logs (Dagster, dbt, training): {log}")
    # The command ends the process: what libraries print while it shuts down goes to the log too.
    with output_to_log(log, restore=False):
        try:
            return run(days, start, options)
        except RunFailedError as e:
            say(f"error: {e}", error=True)
            return 1
        finally:
            say(f"logs: {log}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; argparse exits with status 2 on a bad command line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "advance":
            return advance(args.days, args.start, args.env)
        if args.command == "run":
            options = RunOptions(
                bootstrap_days=args.bootstrap_days,
                trials=args.trials,
                max_epochs=args.max_epochs,
                drift=args.drift,
                report_dir=args.report_dir,
                pool_wait_s=args.pool_wait,
                validation_days=args.validation_days,
                test_days=args.test_days,
            )
            return run_logged(args.days, args.start, options)
        return status(args.env)
    except UsageError as e:
        parser.error(str(e))
