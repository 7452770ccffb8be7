"""A task's Dagster partitions: one per landing partition (a day, a week or a month)."""

from __future__ import annotations

from datetime import date

import dagster as dg

from pipelines.task.contracts import TaskSpec


def landing_partitions(task: TaskSpec) -> dg.TimeWindowPartitionsDefinition:
    """The task's partitions at its cadence, from its start date (end date exclusive), each
    keyed by the date it starts on."""
    span = {"start_date": task.start_date, "end_date": task.end_date}
    if task.cadence == "weekly":
        # Dagster counts weekdays from Sunday (0); a week starts on the task's first weekday.
        first = date.fromisoformat(task.start_date)
        return dg.WeeklyPartitionsDefinition(**span, day_offset=(first.weekday() + 1) % 7)
    if task.cadence == "monthly":
        return dg.MonthlyPartitionsDefinition(**span, fmt="%Y-%m-%d")
    return dg.DailyPartitionsDefinition(**span)
