"""The simulation: the whole flywheel, day by day, on the embedded defaults; then its report."""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from pipelines.lib.asset_keys import task_run_config
from pipelines.settings import DAGSTER_URL, REPO_ROOT, flywheel_home, retraining_default
from pipelines.task import load_task
from pipelines.task.contracts import TaskSpec
from sim.driver.console import say
from sim.world.clock import read_clock, read_progress, write_clock, write_progress
from sim.world.drift import PlantedDrift, planted, record
from sim.world.replay import day_bounds, land_days, producer_zone

# Settings that name one state's files: a simulation given a state of its own must not inherit them.
STATE_PATHS = ("FLYWHEEL_WAREHOUSE_PATH", "FLYWHEEL_DATASET_CACHE")


def own_state(home: Path, code: Path = REPO_ROOT) -> dict[str, str]:
    """The settings of a simulation with a state of its own under `home`, on the embedded
    defaults: its FLYWHEEL_HOME, a Dagster instance with the deployed settings of the code under
    `code`, and a DVC repository (the project's `data/` is left alone); created where missing.
    Whatever else the environment names that state must lose: see STATE_PATHS. A shared service
    (a prod warehouse, Label Studio) would mix the states, so none is used."""
    from pipelines.lib.datasets import init_repository

    dagster_home, datasets = home / "dagster", home / "checkout" / "data"
    dagster_home.mkdir(parents=True, exist_ok=True)
    if not (dagster_home / "dagster.yaml").exists():
        shutil.copy(code / "deploy" / "dagster.yaml", dagster_home / "dagster.yaml")
    if not (datasets / ".dvc").exists():
        init_repository(datasets)
    return {
        "FLYWHEEL_HOME": str(home),
        "DAGSTER_HOME": str(dagster_home),
        "FLYWHEEL_DVC_REPO": str(datasets),
        "FLYWHEEL_ENV": "local",
        "FLYWHEEL_LABELING": "files",
    }


class UsageError(Exception):
    """A command line that names something impossible (reported argparse-style)."""


def days_to_play(days: int, start: date | None) -> list[date]:
    """The partitions to land (a day each for a daily task, else the day each starts on):
    `days` of them from `start` (default: after the clock), clamped to the task."""
    task = load_task()
    first, last = day_bounds(task)
    clock = read_clock(flywheel_home())
    if start is not None and not first <= start <= last:
        raise UsageError(f"--start {start} is outside task {task.name!r} ({first} to {last})")
    if start is not None and task.partition_of(start) != start.isoformat():
        raise UsageError(
            f"--start {start} does not start a partition of task {task.name!r} "
            f"({task.cadence}: {task.partition_of(start)} does)"
        )
    if start is None:
        start = _following(task, clock) if clock else first
        if start > last:
            say(f"the simulation already reached the task's last day {last}: nothing to land")
            return []
    span = [start]
    while len(span) < days and (following := _following(task, span[-1])) <= last:
        span.append(following)
    if len(span) < days:
        unit = "days" if task.cadence == "daily" else "partitions"
        say(f"clamped to the task's last day {last}: landing {len(span)} {unit}")
    return span


def planted_break(
    home: Path, drift: PlantedDrift | None, played: date | None
) -> PlantedDrift | None:
    """The break the world of `home` plays: the one it recorded, else `drift`, recorded now so
    that every process of that world (annotators, judge) finds it; a different one, or one that
    starts on a day already played, is a usage error."""
    recorded = planted(home)
    if drift is None or drift == recorded:
        return recorded
    if recorded is not None:
        raise UsageError(f"the state in {home} plays --drift {recorded}, not {drift}")
    if played is not None and drift.start <= played:
        raise UsageError(f"--drift {drift} starts on or before {played}, already played in {home}")
    if (name := load_task().name) != "flights":
        raise UsageError(f"--drift {drift} changes the flights task's world, not {name!r}'s")
    record(home, drift)
    return drift


def _following(task: TaskSpec, day: date) -> date:
    """The first day of the partition after the one holding `day`."""
    return date.fromisoformat(task.partition_end(task.partition_of(day)))


@dataclass(frozen=True)
class RunOptions:
    """How the simulation plays the flywheel: the first model's timing, tuning, planted drift."""

    bootstrap_days: int = 21
    trials: int = retraining_default("FLYWHEEL_TRIALS")
    max_epochs: int = retraining_default("FLYWHEEL_MAX_EPOCHS")
    members: int = retraining_default("FLYWHEEL_MEMBERS")
    drift: PlantedDrift | None = None
    report_dir: Path | None = None
    # How long a run waits for a pool slot held by another live run before it fails naming it.
    pool_wait_s: float = 600.0
    # The latest labelled days each retraining holds out: validation, then test.
    validation_days: int = retraining_default("FLYWHEEL_VALIDATION_DAYS")
    test_days: int = retraining_default("FLYWHEEL_TEST_DAYS")
    # Drive the days through a running stack's daemon instead of in process; how long the
    # world waits for the pipeline to be idle before it fails naming what is still busy.
    daemon: bool = False
    daemon_timeout_s: float = 1800.0
    # What retrains after the first model (sim.driver.policies.POLICIES).
    policy: str = "flywheel"
    # What a play draws: the tuning sampler's and the networks' seed, and the label export's
    # audit and random samples (0: the draws of every play so far).
    seed: int = 0
    # A folder of trained challengers shared with other plays (ml.model_cache): a play that
    # trains on a dataset version another already trained on, with the same seed and settings,
    # reuses its model.
    model_cache: Path | None = None
    # Examples sent to labeling per partition (None: the task's own `labels.budget`).
    label_budget: int | None = None
    # Whether the report trains the same-budget reference and the all-labels ceiling.
    baselines: bool = True
    # Print the report's path at the end, not the whole report.
    brief: bool = False

    def run_configs(self, task: TaskSpec) -> dict[str, dict]:
        """The operator's run config of `task`'s retraining job, and of its label export job
        where the seed is not 0 or the policy targets part of its labels."""
        training = {"n_trials": self.trials, "max_epochs": self.max_epochs, "members": self.members}
        if self.seed:
            training["seed"] = self.seed
        if self.model_cache is not None:
            training["model_cache"] = str(self.model_cache)
        windows = {"validation_days": self.validation_days, "test_days": self.test_days}
        ops = {
            "training_dataset": {"config": windows},
            "challenger_model": {"config": training},
        }
        configs = {"retraining_job": task_run_config(task, {"ops": ops})}
        from sim.driver.policies import POLICIES

        export: dict = {"seed": self.seed} if self.seed else {}
        if self.label_budget is not None:
            export["budget"] = self.label_budget
        if (share := POLICIES[self.policy].audit_share) is not None:
            export["audit_share"] = share
        if export and task.label_tasks_table:
            export_ops = {"ops": {task.label_tasks_table: {"config": export}}}
            configs["label_export_job"] = task_run_config(task, export_ops)
        return configs


def _describe(tick, driver) -> str:
    parts = []
    for job, _partition, seconds, run_id in tick.runs:
        if job == "retraining_job":
            decision = driver.decision(run_id)
            parts.append(
                f"retraining {seconds:.0f}s -> version {decision.get('challenger_version')} "
                f"{decision.get('decision')}: {decision.get('reason')}"
            )
        else:
            parts.append(f"{job.removesuffix('_job')} {seconds:.0f}s")
    return ", ".join(parts)


def _after_bootstrap(instance) -> date | None:
    """The day after the event day of the operator's successful bootstrap retraining, if any (a
    bootstrap run retried after a kill finishes before the simulation resumes)."""
    import dagster as dg

    from pipelines.lib.runs import RETRAINING_JOB, task_runs

    records = instance.get_run_records(
        task_runs(
            load_task().name,
            RETRAINING_JOB,
            tags={"flywheel/trigger": "bootstrap"},
            statuses=[dg.DagsterRunStatus.SUCCESS],
        ),
        limit=1,
    )
    if not records:
        return None
    event_day = date.fromisoformat(records[0].dagster_run.tags["flywheel/event_day"])
    return _following(load_task(), event_day)


def run(days: int, start: date | None = None, options: RunOptions | None = None) -> int:
    """The simulation: day by day, land, ingest, score, monitor, label and retrain; then report."""
    import dagster as dg

    from pipelines.definitions import defs
    from pipelines.lib.registry import champion, registered_name, versions
    from pipelines.lib.runs import RETRAINING_JOB, task_runs
    from sim.driver.daemon import DaemonDriver, webserver_from_env
    from sim.driver.in_process import Driver, FlywheelDriver
    from sim.driver.policies import POLICIES, check_applied
    from sim.judge.report import BaselinesInBackground, resource, write_report
    from sim.world.annotator_service import AnnotatorProcess
    from sim.world.annotators import annotators_for

    options = options or RunOptions()
    # The policy reaches the pipeline as its monitoring.retrain_on, set before the code location
    # loaded (sim.driver.policies.apply): refused here if it was not.
    check_applied(options.policy, options.daemon)
    policy = POLICIES[options.policy]
    home = flywheel_home()
    played, production_start = read_progress(home)
    clock = read_clock(home)
    if start is None and played is not None and clock is not None and played < clock:
        start = _following(load_task(), played)  # killed after landing a day, before finishing it
    span = days_to_play(days, start)
    if not span:
        return 0
    drift = planted_break(home, options.drift, played)
    todo = [day for day in span if played is None or day > played]
    if len(todo) < len(span):
        say(f"resuming after {played}, the last day played: {len(todo)} of {len(span)} to play")
    began, zone, task = time.monotonic(), producer_zone(), load_task()
    annotators = annotators_for(defs.resources["label_exchange"])
    tracker = resource(defs, "tracker")
    name = registered_name(task.name)

    def land(day: date) -> None:
        land_days(zone, [day], task, drift=drift)
        write_clock(home, max(read_clock(home) or day, day))

    with contextlib.ExitStack() as stack:
        instance = stack.enter_context(dg.DagsterInstance.get())
        if options.daemon:
            webserver = webserver_from_env()
            service = stack.enter_context(
                AnnotatorProcess(home, home / "logs" / "annotators.log", options.daemon_timeout_s)
            )
            driver: Driver = DaemonDriver(
                defs,
                instance,
                webserver,
                land,
                service.deliver,
                options.run_configs(task),
                options.daemon_timeout_s,
                policy.cadence_days,
            )
        else:
            driver = FlywheelDriver(
                defs,
                instance,
                home / "sim",
                land,
                annotators.deliver,
                options.run_configs(task),
                options.pool_wait_s,
                policy.cadence_days,
            )
        # The baselines' fits while the days play, in process only: the daemon's runs, in their
        # own processes, may hold the warehouse whenever this process would read it.
        background = None
        baselines = options.baselines
        if baselines and not options.daemon:
            background = BaselinesInBackground.of_task(defs, task.name)
            stack.callback(background.fits.close)
        if versions(tracker, name):
            driver.retraining = True
        if driver.retraining and production_start is None:
            production_start = max(_after_bootstrap(instance) or span[0], span[0])
        driver.production_start = production_start
        # In process, every run of a day opens the warehouse in this process: it stays open
        # for the day (Warehouse.held). The daemon's runs open it in their own processes.
        warehouse = resource(defs, "warehouse")
        played_now = 0
        for i, day in enumerate(span):
            if day not in todo:
                continue
            with contextlib.nullcontext() if options.daemon else warehouse.held():
                tick = driver.day(day)
                if not driver.retraining and i + 1 >= options.bootstrap_days:
                    # The operator trains the first model, then turns the retraining triggers on.
                    tick.runs.append(driver.retrain("bootstrap", day))
                    driver.retraining, production_start = True, _following(task, day)
                    driver.production_start = production_start
                write_progress(home, day, production_start)
                if background is not None:
                    background.played(day, production_start)
            elapsed, played_now = time.monotonic() - began, played_now + 1
            left = remaining(elapsed, played_now, len(todo) - played_now)
            say(f"[{i + 1}/{len(span)} {elapsed:.0f}s{left}] {day}: {_describe(tick, driver)}")
        registered = versions(tracker, name)
        if not registered or production_start is None or production_start > span[-1]:
            say(
                f"no production period to report: the first model trains after "
                f"{options.bootstrap_days} days (--bootstrap-days); run more days"
            )
            return 0
        if champion(tracker, name) is None:
            say(
                f"no production period to report: none of the {len(registered)} models trained "
                "passed the promotion gate, so nothing was scored (raise --trials or "
                "--max-epochs, or run more days)"
            )
            return 0
        retrain_runs = instance.get_run_records(task_runs(task.name, RETRAINING_JOB))
        unit = "days" if task.cadence == "daily" else "partitions"
        header = [
            f"Simulated {span[0]}..{span[-1]} ({len(span)} {unit}) in "
            f"{time.monotonic() - began:.0f} s wall time; production from {production_start}.",
            f"Static model: version {registered[0].version}, trained once on the first "
            f"{options.bootstrap_days} {unit}. Retraining runs: {len(retrain_runs)}; tuning "
            f"budget {options.trials} trials x {options.max_epochs} epochs, challengers of "
            f"{options.members} networks.",
            "Driven by the Dagster daemon of the stack, a process per run."
            if options.daemon
            else "Driven in process.",
            f"Planted drift: {drift or 'none'}.",
            f"Retraining policy: {options.policy} (after the first model: "
            f"{policy.describe()}); seed {options.seed}.",
        ]
        fitted = None
        if background is not None:
            try:
                during = background.fits.made()
                fitted = background.fits.results()
                # In the log: how many of the report's baseline fits it need not make.
                print(
                    f"the baselines' fits: {during} made while the days played, "
                    f"{len(fitted) - during} after the last day",
                    flush=True,
                )
            except RuntimeError as error:
                say(f"{error}\nthe report fits the baselines of every week itself", error=True)
        report = write_report(
            defs,
            instance,
            task.name,
            (production_start, span[-1]),
            registered[0].version,
            options.report_dir or home / "report",
            header,
            baselines=baselines,
            fitted=fitted,
        )
    if options.brief:
        say(f"report: {report.markdown} and {report.plot}")
    else:
        say("\n".join(report.summary()))
    if options.daemon:
        say(f"see the runs and assets in the stack's Dagster UI: {DAGSTER_URL.get()}")
    elif not options.brief:
        state = "" if home == (REPO_ROOT / ".flywheel").resolve() else f" FLYWHEEL_HOME={home}"
        say(f"see the runs and assets: make dev{state} (Dagster UI at http://127.0.0.1:3000)")
    return 0


def remaining(elapsed_s: float, played: int, left: int) -> str:
    """`, ~N min left` at the pace of the days played so far in this process ('' at the end)."""
    if not left or not played:
        return ""
    minutes = elapsed_s / played * left / 60
    return f", ~{minutes:.0f} min left" if minutes >= 1 else ", <1 min left"
