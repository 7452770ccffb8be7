"""The outside world's data behind each task: which real dataset a task's replay plays back.

Every source cuts its per-partition tables by the day a partition starts on (`day`) and serves
its dimension tables whole (`table`), with the contract's columns as text. A task with a module
of its own here (flights, movielens) plays it; any other plays the file its YAML declares
(`replay.source`, sim.world.file_source).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date
from typing import Protocol

import pandas as pd

from pipelines.settings import flywheel_home
from sim.world import file_source, movielens, nycflights
from sim.world.drift import PlantedDrift, planted


class Source(Protocol):
    """A replayed dataset: the rows of one partition of a table, and whole dimension tables."""

    def day(self, table: str, day: date | str) -> pd.DataFrame: ...

    def table(self, name: str) -> pd.DataFrame: ...


LOADERS: dict[str, Callable[[], Source]] = {
    "flights": nycflights.load,
    "movielens": movielens.load,
}


# The outcome the replay holds back for an example of each task, by its id: what a truthful
# annotator answers.
OUTCOMES: dict[str, Callable[[str], object]] = {
    "flights": nycflights.is_late,
    "movielens": movielens.true_rating,
}


def outcome_of(task_name: str, example_id: str) -> object:
    """The held-back outcome of one example of the task named `task_name`, as the world of
    FLYWHEEL_HOME has it (with the planted break it records, if any)."""
    return outcomes_of(task_name, [example_id])[0]


def outcomes_of(task_name: str, example_ids: Iterable[str]) -> list[object]:
    """`outcome_of` each example, the planted break read once."""
    return held_back(task_name, example_ids, planted(flywheel_home()))


def held_back(
    task_name: str, example_ids: Iterable[str], drift: PlantedDrift | None
) -> list[object]:
    """The outcome of each example of the task named `task_name` in a world with break `drift`
    (None: the source's own)."""
    outcome = OUTCOMES.get(task_name)
    if outcome is None and _declares_file(task_name):
        outcome = file_source.load(task_name).outcome
    if outcome is None:
        raise KeyError(
            f"the simulator has no outcomes for task {task_name!r}: declare the file it replays "
            f"(replay.source in its YAML; known modules: {list(OUTCOMES)})"
        )
    if drift is None:
        return [outcome(i) for i in example_ids]
    return [drift.outcome(task_name, i, outcome(i)) for i in example_ids]


def source_of(task_name: str) -> Source:
    """The loaded source of the task named `task_name` (read once per process)."""
    loader = LOADERS.get(task_name)
    if loader is None and _declares_file(task_name):
        return file_source.load(task_name)
    if loader is None:
        raise KeyError(
            f"the simulator has no source for task {task_name!r}: declare the file it replays "
            f"(replay.source in its YAML; known modules: {list(LOADERS)})"
        )
    return loader()


def _declares_file(task_name: str) -> bool:
    try:
        return file_source.file_spec(file_source.task_named(task_name)) is not None
    except FileNotFoundError:  # no task file of that name
        return False
