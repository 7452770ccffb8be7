"""A task's own play: the `replay:` section of its YAML, the defaults of `flywheel-sim`'s flags.

    replay:
      start: "2013-04-01"    # the first partition a play lands on a fresh state folder
      days: 275              # partitions a play lands when --days is not given
      bootstrap_days: 21     # partitions labelled before the first model
      validation_days: 7     # held out by each retraining of the play (else the settings')
      test_days: 7
      source: {...}          # the file replayed, where no module plays the task (file_source)

`make flywheel TASK=<task>` plays exactly this: the Makefile passes only what its caller set
(START, DAYS, BOOTSTRAP_DAYS), and each flag given replaces its default here. The pipeline never
reads the section; the task loader only lets it through.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from datetime import date

from pipelines.task.contracts import TaskSpec
from sim.driver.simulation import RunOptions, UsageError
from sim.world.replay import day_bounds


@dataclass(frozen=True)
class PlayDefaults:
    """What a play of the task lands and holds out when the command line does not say."""

    start: date | None = None
    days: int | None = None
    bootstrap_days: int | None = None
    validation_days: int | None = None
    test_days: int | None = None


def play_defaults(task: TaskSpec) -> PlayDefaults:
    """The task's `replay:` section, checked: known keys, whole numbers of at least 1, a start
    inside the task that starts one of its partitions. A wrong one is a ValueError naming the
    file and the key."""
    section = task.sections.get("replay") or {}
    where = f"{task.path}: replay"
    if not isinstance(section, dict):
        raise ValueError(f"{where}: expected a mapping of {[f.name for f in fields(PlayDefaults)]}")
    known = [f.name for f in fields(PlayDefaults)] + ["source"]
    if unknown := sorted(set(section) - set(known)):
        raise ValueError(f"{where}: unknown keys {unknown}; known: {known}")
    values = {}
    for key, value in section.items():
        if key == "source":
            continue  # the file replayed: sim.world.file_source
        if key == "start":
            values[key] = _start(task, value, f"{where}.start")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}.{key}: expected a whole number >= 1, got {value!r}")
        else:
            values[key] = value
    return PlayDefaults(**values)


def _start(task: TaskSpec, value: object, where: str) -> date:
    try:
        start = value if isinstance(value, date) else date.fromisoformat(str(value))
    except ValueError:
        raise ValueError(f"{where}: expected a date as YYYY-MM-DD, got {value!r}") from None
    first, last = day_bounds(task)
    if not first <= start <= last:
        raise ValueError(f"{where}: {start} is outside the task ({first} to {last})")
    if task.partition_of(start) != start.isoformat():
        raise ValueError(f"{where}: {start} starts no {task.cadence} partition of the task")
    return start


def fill_budget_defaults(args: argparse.Namespace, defaults: PlayDefaults) -> None:
    """`--bootstrap-days`, `--validation-days` and `--test-days` not given: the task's (the
    bootstrap's last resort is RunOptions')."""
    if args.bootstrap_days is None:
        args.bootstrap_days = defaults.bootstrap_days or RunOptions.bootstrap_days
    for name in ("validation_days", "test_days"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(defaults, name))


def fill_span_defaults(args: argparse.Namespace, defaults: PlayDefaults, task: TaskSpec) -> None:
    """`run`'s span: from --start, else the task's replay.start (else the day after the clock,
    sim.driver.simulation.days_to_play); --days, else the task's replay.days. A fixed start
    makes the same command, run again after a kill, finish the same span. A task that declares
    no days needs --days, said with where to declare them."""
    if args.start is None:
        args.start = defaults.start
    if args.days is None:
        args.days = defaults.days
    if args.days is None:
        raise UsageError(
            f"task {task.name!r} declares no replay.days in {task.path}: pass --days N "
            "(make flywheel DAYS=N), or add `replay: {start: YYYY-MM-DD, days: N, "
            "bootstrap_days: N}` to the task's YAML"
        )
