"""Landing-feed contracts: the columns, types, ranges and keys a task's landing files must obey.

Pure Python (no Dagster): the ingestion assets, the simulator's tests and the benchmarks share it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from functools import cache
from pathlib import Path
from typing import Literal

import yaml

from pipelines.task.cadence import Cadence, check_cadence, next_start, partition_start

ColumnType = Literal["integer", "float", "string", "timestamp"]
FeedKind = Literal["daily", "dimension"]

TASKS_DIR = Path(__file__).parents[1] / "tasks"
DAILY_KEY = re.compile(r"^(?P<feed>[a-z_]+)/(?P<day>\d{4}-\d{2}-\d{2})\.csv$")
DIMENSION_KEY = re.compile(r"^dimension/(?P<feed>[a-z_]+)\.csv$")

# Warehouse column type of each contract type (portable SQL names).
SQL_TYPES: dict[str, str] = {
    "integer": "BIGINT",
    "float": "DOUBLE",
    "string": "VARCHAR",
    "timestamp": "TIMESTAMP",
}


@dataclass(frozen=True)
class ColumnSpec:
    """One column of a feed: its type and the values it may hold."""

    name: str
    type: ColumnType
    nullable: bool = False
    min: float | None = None
    max: float | None = None
    pattern: str | None = None
    format: Literal["hhmm"] | None = None


@dataclass(frozen=True)
class FeedSpec:
    """A landing feed: where its files land, what they hold, and what makes a row unique."""

    name: str
    kind: FeedKind
    columns: tuple[ColumnSpec, ...]
    key: tuple[str, ...]
    partition_date: tuple[str, ...] = ()
    description: str = ""

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def asset_name(self) -> str:
        """The ingestion asset's name; its table is `raw.<feed name>`."""
        return f"raw_{self.name}"

    def landing_key(self, day: date | str | None = None) -> str:
        """The landing-zone key of this feed's file (for `day`, if the feed is daily)."""
        if self.kind == "dimension":
            return f"dimension/{self.name}.csv"
        if day is None:
            raise ValueError(f"feed {self.name!r} is daily: a landing day is required")
        day = day if isinstance(day, str) else day.isoformat()
        return f"{self.name}/{day}.csv"


@dataclass(frozen=True)
class TaskSpec:
    """A task's landing contracts and the span and cadence of its partitions."""

    name: str
    start_date: str
    end_date: str
    feeds: dict[str, FeedSpec]
    cadence: Cadence = "daily"
    null_values: tuple[str, ...] = ("",)
    labels_table: str | None = None
    labels_columns: dict[str, str] = field(default_factory=dict)
    label_tasks_table: str | None = None
    label_tasks_columns: dict[str, str] = field(default_factory=dict)
    path: Path = field(default=Path(), compare=False)
    # The whole YAML, for the other sections' parsers (see pipelines.task).
    sections: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def daily_feeds(self) -> list[FeedSpec]:
        return [f for f in self.feeds.values() if f.kind == "daily"]

    @property
    def dimension_feeds(self) -> list[FeedSpec]:
        return [f for f in self.feeds.values() if f.kind == "dimension"]

    def partition_of(self, day: date) -> str:
        """The partition (the date it starts on) that holds `day`."""
        first = date.fromisoformat(self.start_date)
        return partition_start(day, self.cadence, first).isoformat()

    def partition_end(self, partition: str) -> str:
        """The first day after the partition starting on `partition`."""
        return next_start(date.fromisoformat(partition), self.cadence).isoformat()

    def match_key(self, key: str) -> tuple[FeedSpec, str | None] | None:
        """The feed (and partition) of a landing-zone key; None if it fits no pattern."""
        if m := DAILY_KEY.match(key):
            feed = self.feeds.get(m["feed"])
            if feed is None or feed.kind != "daily" or not _is_date(m["day"]):
                return None
            if not self.start_date <= m["day"] < self.end_date:
                return None
            if self.partition_of(date.fromisoformat(m["day"])) != m["day"]:
                return None
            return feed, m["day"]
        if m := DIMENSION_KEY.match(key):
            feed = self.feeds.get(m["feed"])
            if feed is None or feed.kind != "dimension":
                return None
            return feed, None
        return None


def _check_partition_date(columns: tuple[ColumnSpec, ...], named: tuple[str, ...], where: str):
    """`partition_date` names the year, month and day integer columns, or one timestamp."""
    types = [c.type for c in columns if c.name in named]
    if named and types not in (["integer"] * 3, ["timestamp"]):
        raise ValueError(
            f"{where}: partition_date names a row's date: three integer columns (year, month, "
            f"day) or one timestamp column, not {list(named)}"
        )


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


@cache
def default_task_name() -> str:
    """The one task file under `pipelines/tasks/` marked `default: true`."""
    marked = [
        path.stem
        for path in sorted(TASKS_DIR.glob("*.yaml"))
        if (yaml.safe_load(path.read_text()) or {}).get("default") is True
    ]
    if len(marked) != 1:
        raise ValueError(
            f"FLYWHEEL_TASK is not set and {len(marked)} task files under {TASKS_DIR} are marked "
            f"`default: true` ({marked}): set FLYWHEEL_TASK, or mark exactly one"
        )
    return marked[0]


def read_contracts(name_or_path: str | Path) -> TaskSpec:
    """A task's contracts from `pipelines/tasks/<name>.yaml` or an explicit YAML path, with the
    file's other sections for their parsers (`pipelines.task.load_task` calls them all)."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = TASKS_DIR / f"{name_or_path}.yaml"
    raw = yaml.safe_load(path.read_text())
    feeds = {}
    for feed_name, spec in raw["feeds"].items():
        columns = tuple(ColumnSpec(name=c, **opts) for c, opts in spec["columns"].items())
        names = {c.name for c in columns}
        missing = [k for k in (*spec["key"], *spec.get("partition_date", ())) if k not in names]
        if missing:
            raise ValueError(f"{path}: feed {feed_name!r} names unknown columns {missing}")
        _check_partition_date(
            columns, tuple(spec.get("partition_date", ())), f"{path}: {feed_name}"
        )
        feeds[feed_name] = FeedSpec(
            name=feed_name,
            kind=spec["kind"],
            columns=columns,
            key=tuple(spec["key"]),
            partition_date=tuple(spec.get("partition_date", ())),
            description=spec.get("description", ""),
        )
    partitions = raw["partitions"]
    if unknown := sorted(set(partitions) - {"start_date", "end_date", "cadence"}):
        raise ValueError(f"{path}: partitions: unknown settings {unknown}")
    cadence = partitions.get("cadence", "daily")
    start = date.fromisoformat(str(partitions["start_date"]))
    return TaskSpec(
        name=raw["task"],
        start_date=partitions["start_date"],
        end_date=partitions["end_date"],
        feeds=feeds,
        cadence=check_cadence(cadence, start, f"{path}: partitions"),
        null_values=tuple(raw.get("null_values", [""])),
        labels_table=raw.get("labels", {}).get("table"),
        labels_columns=raw.get("labels", {}).get("columns", {}),
        label_tasks_table=raw.get("labels", {}).get("tasks_table"),
        label_tasks_columns=raw.get("labels", {}).get("tasks_columns", {}),
        path=path,
        sections=raw,
    )
