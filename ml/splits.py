"""Time-based train / validation / test splits: the most recent labelled days are held out."""

from __future__ import annotations

import pandas as pd

SPLITS = ("train", "validation", "test")


def split_by_time(
    frame: pd.DataFrame, date_column: str, validation_days: int, test_days: int
) -> dict[str, pd.DataFrame]:
    """Split by day: the last `test_days` days are test, the `validation_days` before validation."""
    if validation_days < 1 or test_days < 1:
        raise ValueError("validation_days and test_days must be at least 1")
    days = sorted(pd.to_datetime(frame[date_column]).dt.date.unique())
    if len(days) <= validation_days + test_days:
        raise ValueError(
            f"{len(days)} labelled days cannot be split into train, {validation_days} validation "
            f"and {test_days} test days: label more days or shorten the held-out windows"
        )
    test_start = days[-test_days]
    validation_start = days[-(test_days + validation_days)]
    day = pd.to_datetime(frame[date_column]).dt.date
    masks = {
        "train": day < validation_start,
        "validation": (day >= validation_start) & (day < test_start),
        "test": day >= test_start,
    }
    return {name: frame[mask].reset_index(drop=True) for name, mask in masks.items()}
