"""`flywheel-sim`: advance the simulated clock, landing each day's production files."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from datetime import date
from pathlib import Path

from tqdm import tqdm

from pipelines.resources import label_exchange, landing_zone
from pipelines.settings import (
    ENVIRONMENTS,
    LABEL_STUDIO_URL,
    REPO_ROOT,
    flywheel_home,
)
from pipelines.task import load_task
from sim.driver.arguments import (
    iso_day,
    non_negative_int,
    play_arguments,
    policy_names,
    positive_int,
    with_examples,
)
from sim.driver.budget import play_options
from sim.driver.console import log_path, output_to_log, say
from sim.driver.daemon import DaemonDriveError
from sim.driver.executor import RunFailedError
from sim.driver.play_defaults import fill_span_defaults, play_defaults
from sim.driver.policies import CADENCES, DEFAULT_COMPARED, POLICIES, apply, check_applied
from sim.driver.simulation import RunOptions, UsageError, days_to_play, run
from sim.world.annotator_service import AnnotatorServiceError, serve
from sim.world.annotators import annotators_for
from sim.world.clock import read_clock, write_clock
from sim.world.drift import planted
from sim.world.replay import day_bounds, land_days, producer_zone


def build_parser() -> argparse.ArgumentParser:
    """The command line: `advance`, `run`, `compare`, `label-studio`, `annotators`, `status`."""
    parser = argparse.ArgumentParser(
        prog="flywheel-sim", description=__doc__, **with_examples("flywheel-sim")
    )
    commands = parser.add_subparsers(dest="command", required=True)
    advance = commands.add_parser("advance", help="land the next days' production files")
    advance.add_argument("--days", type=positive_int, required=True, help="how many days")
    advance.add_argument(
        "--start", type=iso_day, help="first day to land (default: the day after the clock)"
    )
    advance.add_argument("--env", choices=ENVIRONMENTS, help="default: FLYWHEEL_ENV or local")
    run = commands.add_parser(
        "run",
        help="the simulation: land day by day and run the pipeline as its sensors ask",
        **with_examples("run"),
    )
    run.add_argument(
        "--start",
        type=iso_day,
        help="first day (default: the task's replay.start, else the day after the clock)",
    )
    play_arguments(run)
    run.add_argument(
        "--policy",
        choices=list(POLICIES),
        default="flywheel",
        help="the retraining triggers on after the first model: flywheel (default: the "
        "task's monitoring.retrain_on), static (none), weekly, excess-loss, drift or "
        f"performance; or a fixed cadence, a retraining every N days ({', '.join(CADENCES)})",
    )
    run.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        help="what the play draws: the tuning sampler, the networks' initialisations, the label "
        "export's audit and random samples (default 0)",
    )
    run.add_argument(
        "--model-cache",
        type=Path,
        help="a folder of trained challengers shared with other plays: a retraining on a "
        "dataset version one of them trained on, with the same seed and settings, reuses its "
        "model (default: none, every retraining trains)",
    )
    run.add_argument("--report-dir", type=Path, help="default: $FLYWHEEL_HOME/report")
    run.add_argument(
        "--no-baselines",
        dest="baselines",
        action="store_false",
        help="do not train the report's same-budget reference and all-labels ceiling",
    )
    run.add_argument(
        "--brief",
        action="store_true",
        help="print the report's path only, not its headline figures",
    )
    run.add_argument(
        "--pool-wait",
        type=positive_int,
        default=600,
        help="seconds a run waits for a pool slot another live run holds before it fails",
    )
    run.add_argument(
        "--daemon",
        action="store_true",
        help="drive the days through the running stack's Dagster daemon (make stack-up), a "
        "process per run, instead of in process",
    )
    run.add_argument(
        "--daemon-timeout",
        type=positive_int,
        default=1800,
        help="with --daemon: seconds to wait for the pipeline to be idle before failing",
    )
    run.add_argument(
        "--labeling",
        choices=("files", "label-studio"),
        help="where labeling tasks go: the outbox/inbox files (default), or Label Studio, "
        "FLYWHEEL_LABEL_STUDIO_URL's or else the local one (flywheel-sim label-studio start)",
    )
    compare = commands.add_parser(
        "compare",
        **with_examples("compare"),
        help="play the same days under several retraining policies, each in its own state "
        "folder, and write one report",
    )
    compare.add_argument("--start", type=iso_day, help="first day (required to play)")
    play_arguments(compare)
    next(a for a in compare._actions if a.dest == "days").required = False  # --report-only
    compare.add_argument(
        "--policies",
        type=policy_names,
        default=list(DEFAULT_COMPARED),
        help=f"comma-separated, of {', '.join(POLICIES)} (default: all but weekly, which "
        "every-7d plays without the schedule's cooldown)",
    )
    compare.add_argument(
        "--seeds",
        type=positive_int,
        default=3,
        help="plays of each policy, seeds 0 to N-1, each paired with the other policies' play "
        "of the same seed (default 3)",
    )
    compare.add_argument(
        "--jobs",
        type=positive_int,
        help="plays at a time, each on its share of the cores (default: one per core, at "
        "most four)",
    )
    compare.add_argument(
        "--out",
        type=Path,
        help="the policies' state folders and the report (default: $FLYWHEEL_HOME/compare)",
    )
    compare.add_argument(
        "--report-only", action="store_true", help="judge --out's finished plays again, no replay"
    )
    new = commands.add_parser(
        "new-task",
        help="a task from a sample file: its YAML, dbt models, tag block and workspace entry",
        **with_examples("new-task"),
    )
    new.add_argument("name", help="the task's name: lower-case letters and _ (e.g. emails)")
    new.add_argument("--from", dest="file", type=Path, required=True, help="a CSV or Parquet file")
    new.add_argument("--time", required=True, help="the column that dates each row (UTC)")
    new.add_argument("--label", required=True, help="the outcome column, held back for labels")
    new.add_argument("--id", help="a column unique per row and day (default: the row's number)")
    new.add_argument("--positive", help="a binary label's value that is true (default: the rarer)")
    new.add_argument(
        "--cadence", choices=("daily", "weekly", "monthly"), default="daily", help="default: daily"
    )
    new.add_argument(
        "--budget",
        default="30%",
        help="examples labelled per partition, a count or a share (default: 30%%)",
    )
    new.add_argument("--force", action="store_true", help="rewrite a task that exists")
    studio = commands.add_parser(
        "label-studio",
        help="a local Label Studio under $FLYWHEEL_HOME/label-studio: install, start, stop, env",
    )
    studio.add_argument("action", choices=("install", "start", "stop", "env"))
    studio.add_argument("--port", type=positive_int, default=8080, help="default: 8080")
    commands.add_parser(
        "annotators",
        help="the simulated annotators as a service: answer the days the simulation asks for",
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
    zone = producer_zone(env)
    with tqdm(total=len(span), unit="day", desc="landing") as bar:
        report = land_days(
            zone, span, load_task(), on_day=lambda day: bar.update(1), drift=planted(home)
        )
    clock = read_clock(home)
    clock = max(clock, span[-1]) if clock else span[-1]
    write_clock(home, clock)
    print(
        f"landed {len(report.days)} days ({span[0]}..{span[-1]}) into {zone.uri}: "
        f"{report.written} files written, {report.unchanged} unchanged, "
        + "".join(f"{n:,} {feed} rows, " for feed, n in report.rows.items())
        + f"clock at {clock}"
    )
    return 0


def status(env: str | None = None) -> int:
    """Print the clock and where the landing zone is."""
    task = load_task()
    first, last = day_bounds(task)
    clock = read_clock(flywheel_home())
    upcoming = date.fromisoformat(task.partition_end(task.partition_of(clock))) if clock else first
    following = f"next day {upcoming}" if upcoming <= last else f"finished ({last} landed)"
    print(f"clock: {clock or 'not started'} ({following}; task {task.name} {first}..{last})")
    print(f"landing zone: {landing_zone(env).uri}")
    return 0


def run_logged(days: int, start: date | None, options: RunOptions) -> int:
    """The simulation with one line a day on the terminal and every library's output in a log
    file; a failed run prints its failing steps' errors and the log's path, and exits 1."""
    log = log_path(flywheel_home())
    say(f"logs (Dagster, dbt, training): {log}")
    # The command ends the process: what libraries print while it shuts down goes to the log too.
    with output_to_log(log, restore=False):
        try:
            return run(days, start, options)
        except (RunFailedError, DaemonDriveError, AnnotatorServiceError) as e:
            say(f"error: {e}", error=True)
            return 1
        except Exception:
            # Anything else is a defect: its traceback in full, on the terminal as well.
            say(f"error: {traceback.format_exc()}", error=True)
            return 1
        finally:
            say(f"logs: {log}")


def label_studio(action: str, port: int) -> int:
    """`flywheel-sim label-studio install|start|stop|env`: what it does on standard error, the
    settings as `export` lines on standard output (eval "$(flywheel-sim label-studio start)")."""

    # Where the deployment's files are (deploy/, which the code location's image leaves out).
    from deploy.label_studio import VERSION, LabelStudioServerError, LocalLabelStudio

    def note(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    server = LocalLabelStudio(flywheel_home() / "label-studio", port)
    try:
        if action == "install":
            note(f"installing label-studio {VERSION} into {server.venv}")
            server.install()
            note(f"installed: {server.executable}")
        elif action == "stop":
            note("stopped" if server.stop() else "Label Studio was not running")
        else:
            if action == "start":
                note(f"starting Label Studio on {server.url} (log: {server.log})")
            creds = server.start() if action == "start" else server.credentials()
            note(
                f"Label Studio: {creds.url} (admin {creds.username}, password in "
                f"{server.credentials_file})"
            )
            for name, value in creds.environment().items():
                print(f"export {name}={value}")
    except LabelStudioServerError as e:
        note(f"error: {e}")
        return 1
    return 0


def use_label_studio(daemon: bool) -> None:
    """Point the pipeline at Label Studio: FLYWHEEL_LABEL_STUDIO_URL's, else the local one,
    started if it is not running."""
    os.environ["FLYWHEEL_LABELING"] = "label-studio"
    if LABEL_STUDIO_URL.get():
        return
    if daemon:
        raise UsageError(
            "--labeling label-studio with --daemon needs the stack started with its settings: "
            "eval $(flywheel-sim label-studio start), then make stack-up"
        )
    from deploy.label_studio import LabelStudioServerError, LocalLabelStudio

    server = LocalLabelStudio(flywheel_home() / "label-studio")
    say(f"starting the local Label Studio on {server.url} (log: {server.log})")
    try:
        os.environ.update(server.start().environment())
    except LabelStudioServerError as e:
        raise UsageError(str(e)) from None


def new_task(args: argparse.Namespace) -> int:
    """`flywheel-sim new-task`: write the task's files, parse the dbt project, check the wiring."""
    from sim.driver.new_task import NewTask, parse_and_check, write

    fields = ("name", "file", "time", "label", "id", "positive", "cadence", "budget", "force")
    request = NewTask(**{f: getattr(args, f) for f in fields})
    for path in write(request, REPO_ROOT):
        say(f"wrote {path.relative_to(REPO_ROOT)}")
    say("parsing the dbt project and checking the task's wiring")
    parse_and_check(request.name, REPO_ROOT)
    say(f"task {request.name} is wired: play it with `make flywheel TASK={request.name}`")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; argparse exits with status 2 on a bad command line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "advance":
            return advance(args.days, args.start, args.env)
        if args.command == "new-task":
            return new_task(args)
        if args.command == "label-studio":
            return label_studio(args.action, args.port)
        if args.command == "run":
            if args.labeling == "label-studio":
                use_label_studio(args.daemon)
            elif args.labeling == "files":
                os.environ["FLYWHEEL_LABELING"] = "files"
            # The policy's triggers request retrainings, whatever the task file says.
            apply(args.policy)
            try:
                check_applied(args.policy, args.daemon)
            except ValueError as e:
                raise UsageError(str(e)) from None
            task = load_task()
            try:
                defaults = play_defaults(task)
            except ValueError as e:
                raise UsageError(str(e)) from None
            fill_span_defaults(args, defaults, task)
            options = play_options(
                args,
                report_dir=args.report_dir,
                pool_wait_s=args.pool_wait,
                daemon=args.daemon,
                daemon_timeout_s=args.daemon_timeout,
                policy=args.policy,
                seed=args.seed,
                model_cache=args.model_cache,
                baselines=args.baselines,
                brief=args.brief,
            )
            return run_logged(args.days, args.start, options)
        if args.command == "compare":
            from sim.driver.rejudge import compare_or_rejudge

            return compare_or_rejudge(args)
        if args.command == "annotators":
            serve(flywheel_home(), annotators_for(label_exchange(), latency_days=1))
            return 0
        return status(args.env)
    except UsageError as e:
        parser.error(str(e))
