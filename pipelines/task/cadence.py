"""A task's partition cadence: how its production data is cut into landing partitions.

A partition is named by the date it starts on (`YYYY-MM-DD`), whatever the cadence: a day, a
week starting on the weekday of the task's first day, or a calendar month. Pure Python: the
contracts, validation, the Dagster partitions and the simulator share it.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Literal

Cadence = Literal["daily", "weekly", "monthly"]
CADENCES: tuple[Cadence, ...] = ("daily", "weekly", "monthly")
# When the retraining schedule ticks (UTC): every Monday for a daily or weekly task, the first of
# every month for a monthly one, at 04:00, after the night's landings.
RETRAINING_CRON: dict[Cadence, tuple[str, str]] = {
    "daily": ("0 4 * * 1", "every Monday"),
    "weekly": ("0 4 * * 1", "every Monday"),
    "monthly": ("0 4 1 * *", "on the first of every month"),
}


def check_cadence(cadence: object, first: date, where: str) -> Cadence:
    """`cadence` if it is known and `first` can start its partitions; else a ValueError."""
    if cadence not in CADENCES:
        raise ValueError(f"{where}: cadence {cadence!r} is not one of {list(CADENCES)}")
    if cadence == "monthly" and first.day != 1:
        raise ValueError(f"{where}: a monthly task starts on a month's first day, not {first}")
    return cadence  # type: ignore[return-value]


def partition_start(day: date, cadence: Cadence, first: date) -> date:
    """The first day of the partition holding `day` (weekly partitions start on `first`'s
    weekday)."""
    if cadence == "daily":
        return day
    if cadence == "weekly":
        return day - timedelta(days=(day - first).days % 7)
    return day.replace(day=1)


def next_start(start: date, cadence: Cadence) -> date:
    """The first day of the partition after the one starting on `start`."""
    if cadence == "daily":
        return start + timedelta(days=1)
    if cadence == "weekly":
        return start + timedelta(weeks=1)
    return (start.replace(day=28) + timedelta(days=4)).replace(day=1)


def partition_starts(first: date, end: date, cadence: Cadence) -> list[date]:
    """The first day of every partition from `first` up to `end` (exclusive)."""
    starts, day = [], partition_start(first, cadence, first)
    while day < end:
        starts.append(day)
        day = next_start(day, cadence)
    return starts


def comparable_before(day: date, count: int, cadence: Cadence, first: date) -> list[date]:
    """The `count` partitions before the one starting on `day` that are alike enough to compare
    its volume with, newest first: for a daily task the same weekday of each earlier week, else
    the partitions just before it."""
    if cadence == "daily":
        return [day - timedelta(weeks=k) for k in range(1, count + 1)]
    before = []
    for _ in range(count):
        day = partition_start(day - timedelta(days=1), cadence, first)
        before.append(day)
    return before
