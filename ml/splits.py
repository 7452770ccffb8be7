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


def one_class_splits(
    splits: dict[str, pd.DataFrame], label: str, date_column: str
) -> dict[str, str]:
    """Each split whose labels hold a single value, with a line saying so: no model is fitted,
    selected or judged on one class (its AUC does not exist), so a dataset cut so is refused
    before training, naming the split, its days and its one value."""
    found = {}
    for name, frame in splits.items():
        values = frame[label].dropna().unique()
        if len(values) < 2:
            days = pd.to_datetime(frame[date_column]).dt.date
            span = f"{days.min()} to {days.max()}" if len(frame) else "no days"
            only = f"only {label}={_plain(values[0])!r}" if len(values) else f"no {label}"
            found[name] = f"the {name} split ({len(frame)} labels, {span}) holds {only}"
    return found


def _plain(value: object) -> object:
    """Python's value of a numpy scalar, whose repr names its type (`np.False_`)."""
    return value.item() if hasattr(value, "item") else value
