"""The daily partitions of a task: one per landing day."""

from __future__ import annotations

import dagster as dg

from pipelines.contracts import TaskSpec


def daily_partitions(task: TaskSpec) -> dg.DailyPartitionsDefinition:
    """Daily partitions over the task's landing days (end date exclusive)."""
    return dg.DailyPartitionsDefinition(start_date=task.start_date, end_date=task.end_date)
