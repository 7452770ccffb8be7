"""A replay of any file, declared in the task's YAML: no module of the simulator's own.

    replay:
      source:
        file: data/samples/email.csv   # CSV or Parquet; relative to the repository's root
        time: time        # the column that places a row in its partition (a date or timestamp)
        outcome: spam     # held back from the landing files: what a truthful annotator answers
        id: rownames      # optional: unique per row (default: the row's number in the file)
        positive: 1       # for a binary label: the outcome's value that is `true`

Each row lands in the partition its time falls in (UTC), in the task's one daily feed, every
column as text under a plain SQL name (`column_name`: `From` becomes `from_value`); the feed's
contract decides which columns land, so the outcome never does.
The example id (the `labels.example_id` column) is the row's date and its id, `2012-01-05_17`:
the simulated annotators deliver an answer `latency_days` after the date an id starts with. The
flights and movielens tasks keep sources of their own (`sim.world.sources`): their replays join
weather and dimension tables a single file does not have.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd

from pipelines.labeling.outcomes import text_table
from pipelines.settings import REPO_ROOT
from pipelines.task import load_task

KEYS = ("file", "time", "outcome", "id", "positive")

# Words SQL reserves: a column named so gets a suffix.
SQL_WORDS = {
    *("from", "select", "where", "group", "order", "by", "to", "table", "user", "when"),
    *("case", "end", "as", "on", "and", "or", "not", "in", "is", "null", "limit", "date"),
    *("time", "timestamp", "year", "month", "day", "hour", "number", "default", "key"),
}


def column_name(raw: str) -> str:
    """A plain SQL identifier for a file's column: lower case, `_` for anything else, and a
    suffix for a word SQL reserves (`from` becomes `from_value`)."""
    name = re.sub(r"[^a-z0-9_]+", "_", str(raw).strip().lower()).strip("_") or "column"
    if name[0].isdigit():
        name = f"c_{name}"
    return f"{name}_value" if name in SQL_WORDS else name


@dataclass(frozen=True)
class FileSpec:
    """The `replay.source` section of a task."""

    file: Path
    time: str
    outcome: str
    id: str | None = None
    positive: Any = None


def file_spec(task) -> FileSpec | None:
    """The task's `replay.source`, checked; None when the task declares none."""
    source = (task.sections.get("replay") or {}).get("source")
    if source is None:
        return None
    where = f"{task.path}: replay.source"
    if not isinstance(source, dict):
        raise ValueError(f"{where}: expected a mapping of {list(KEYS)}")
    if unknown := sorted(set(source) - set(KEYS)):
        raise ValueError(f"{where}: unknown keys {unknown}; known: {list(KEYS)}")
    if missing := [k for k in ("file", "time", "outcome") if not source.get(k)]:
        raise ValueError(f"{where}: missing {missing}")
    path = Path(source["file"])
    return FileSpec(
        file=path if path.is_absolute() else REPO_ROOT / path,
        time=str(source["time"]),
        outcome=str(source["outcome"]),
        id=None if source.get("id") is None else str(source["id"]),
        positive=source.get("positive"),
    )


def read_table(path: Path) -> pd.DataFrame:
    """A CSV or Parquet file, every value as text (missing: empty), so the bytes replayed are
    the file's own on every run."""
    if not path.is_file():
        raise FileNotFoundError(f"the replayed file {path} does not exist")
    return text_table(path, parquet=path.suffix.lower() in (".parquet", ".pq"))


def times_of(values: pd.Series, where: str) -> pd.Series:
    """Each time value (a date, or a timestamp with or without a zone) in UTC; a value that is
    none is an error naming how many and the first."""
    times = pd.to_datetime(values, utc=True, errors="coerce", format="mixed")
    if bad := int(times.isna().sum()):
        first = values[times.isna()].iloc[0]
        raise ValueError(f"{where}: {bad} rows have no readable time, the first {first!r}")
    return times


def day_of(values: pd.Series, where: str) -> pd.Series:
    """The UTC date of each time value, as YYYY-MM-DD."""
    return times_of(values, where).dt.strftime("%Y-%m-%d")


@dataclass(frozen=True)
class FileSource:
    """One file cut into the task's partitions, its outcomes held back by example id."""

    feed: str
    partitions: dict[str, pd.DataFrame]
    empty: pd.DataFrame
    outcomes: dict[str, Any]

    def day(self, table: str, day: date | str) -> pd.DataFrame:
        if table != self.feed:
            raise KeyError(f"the replayed file has no table {table!r}; its feed is {self.feed!r}")
        start = day if isinstance(day, str) else day.isoformat()
        return self.partitions.get(start, self.empty)

    def table(self, name: str) -> pd.DataFrame:
        raise KeyError(f"a replayed file has no dimension table (asked for {name!r})")

    def outcome(self, example_id: str) -> Any:
        return self.outcomes[example_id]


def outcome_value(raw: str, spec: FileSpec, choices: dict[str, Any]) -> Any:
    """The label's value of an outcome as the file holds it: for a binary label, whether it is
    the positive value; for numeric classes, the number; else the text."""
    values = list(choices.values())
    if all(isinstance(v, bool) for v in values):
        return raw == str(spec.positive)
    if all(isinstance(v, int | float) for v in values):
        return float(raw)
    return raw


def task_named(task_name: str):
    """The task of that name: the one the settings name (FLYWHEEL_TASK may be a file's path),
    else `pipelines/tasks/<name>.yaml`."""
    current = load_task()
    return current if current.name == task_name else load_task(task_name)


def load(task_name: str) -> FileSource:
    """The replay of the file the task `task_name` declares (read once per process and file)."""
    return _load(task_named(task_name).path)


@functools.cache
def _load(path: Path) -> FileSource:
    task = load_task(path)
    task_name = task.name
    spec = file_spec(task)
    if spec is None:
        raise KeyError(f"task {task_name!r} declares no replay.source")
    daily = task.daily_feeds
    if len(daily) != 1 or task.dimension_feeds:
        raise ValueError(
            f"{task.path}: a replayed file feeds one daily feed and no dimension feed; the task "
            f"has {[f.name for f in task.feeds.values()]}"
        )
    frame = read_table(spec.file)
    where = f"{spec.file}"
    for column in (spec.time, spec.outcome, *([spec.id] if spec.id else [])):
        if column not in frame.columns:
            raise ValueError(f"{where}: no column {column!r}; it has {list(frame.columns)}")
    times = times_of(frame[spec.time], f"{where}, column {spec.time!r}")
    days = times.dt.strftime("%Y-%m-%d")
    ids = frame[spec.id] if spec.id else pd.Series(range(1, len(frame) + 1)).astype(str)
    example_id = task.labeling.example_id
    frame = frame.assign(**{example_id: days.values + "_" + ids.astype(str).values})
    if frame[example_id].duplicated().any():
        raise ValueError(f"{where}: the ids in {spec.id!r} are not unique within a day")
    partitions = days.map(lambda d: task.partition_of(date.fromisoformat(d)))
    order = times.argsort(kind="stable")
    frame, partitions = frame.iloc[order], partitions.iloc[order]
    choices = task.labeling.choices
    outcomes = {
        i: outcome_value(o, spec, choices)
        for i, o in zip(frame[example_id], frame[spec.outcome], strict=True)
    }
    landed = frame.drop(columns=[spec.outcome]).rename(columns=column_name)
    return FileSource(
        feed=daily[0].name,
        partitions={
            p: rows.reset_index(drop=True) for p, rows in landed.groupby(partitions.values)
        },
        empty=landed.iloc[:0],
        outcomes=outcomes,
    )
