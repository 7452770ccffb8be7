"""The served probability corrected for the moving prior, between retrainings.

A binary task's model keeps the positive rate of the labels it trained on until it is replaced;
production's moves. Each scored day, the champion's log-odds move by the one shift
(ml.calibration) after which its scores of the uniformly drawn examples (the audit and random
picks, `UNIFORM_REASONS`) whose labels came back in the `recalibration_days` before the day
average their labels. A day with fewer than `recalibration_min_labels` of them keeps the model's
probability.

The predictions table keeps the model's own `probability`, which label selection, the drift of
the scores and the performance sensor read (they judge the model), beside
`calibrated_probability`, what a consumer of the predictions reads as the chance of the event.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta

import numpy as np
import pandas as pd

from ml.calibration import prior_shift, shift
from pipelines.ingestion import RAW_SCHEMA
from pipelines.labeling.selection import UNIFORM_REASONS
from pipelines.lib.warehouse import WarehouseConnection
from pipelines.task import Task

CALIBRATED = "calibrated_probability"
OUTCOME, DELIVERED = "_outcome", "_delivered"


def uniform_labels(con: WarehouseConnection, task: Task, first: date, end: date) -> pd.DataFrame:
    """The features of the uniformly drawn examples whose first label came back from `first` up
    to `end` (excluded), one row per example: its outcome (`_outcome`, the mean of its labels'
    values, 0 or 1 for one label) and that day (`_delivered`)."""
    spec, key = task.model, task.model.example_id
    tables = (f"{RAW_SCHEMA}.{task.label_tasks_table}", f"{RAW_SCHEMA}.{task.labels_table}")
    if not all(con.has_relation(t) for t in tables):
        return pd.DataFrame(columns=[key, OUTCOME, DELIVERED])  # nothing was ever labelled
    reasons = ", ".join("?" * len(UNIFORM_REASONS))
    frame = con.df(
        f"select f.*, l.{spec.label} as {OUTCOME}, l._delivery_date as {DELIVERED} "
        f"from {tables[0]} t join {tables[1]} l using (task_id) "
        f"join {spec.features_table} f on f.{key} = t.{key} "
        f"where t.reason in ({reasons}) and l._delivery_date >= ? and l._delivery_date < ?",
        [*UNIFORM_REASONS, first.isoformat(), end.isoformat()],
    )
    frame[OUTCOME] = frame[OUTCOME].astype(np.float64)
    frame[DELIVERED] = pd.to_datetime(frame[DELIVERED]).dt.date
    frame = frame.dropna(subset=[OUTCOME]).sort_values([DELIVERED, key], kind="stable")
    outcome = frame.groupby(key)[OUTCOME].transform("mean")
    return frame.assign(**{OUTCOME: outcome}).drop_duplicates(key).reset_index(drop=True)


def recalibrate(
    days: pd.Series,
    probs: np.ndarray,
    labelled: pd.DataFrame,
    score: Callable[[pd.DataFrame], np.ndarray],
    window_days: int,
    min_labels: int,
) -> tuple[np.ndarray, dict[str, tuple[float, int]]]:
    """`probs` (each of the day in `days`) corrected day by day from the `labelled` uniform
    examples (`uniform_labels`) delivered in the `window_days` before it, scored with
    `score`; and each day's shift and how many labels gave it (a shift of 0 below
    `min_labels`)."""
    out = np.asarray(probs, dtype=np.float64).copy()
    day_of = pd.to_datetime(days).dt.date.to_numpy()
    if window_days <= 0:
        return out, {}
    delivered = labelled[DELIVERED].to_numpy() if len(labelled) else np.array([])
    scores = score(labelled) if len(labelled) else np.array([])
    outcomes = labelled[OUTCOME].to_numpy() if len(labelled) else np.array([])
    shifts: dict[str, tuple[float, int]] = {}
    for day in sorted(set(day_of)):
        known = (delivered < day) & (delivered >= day - timedelta(days=window_days))
        n = int(known.sum())
        delta = prior_shift(scores[known], outcomes[known]) if n >= min_labels else 0.0
        rows = day_of == day
        out[rows] = shift(out[rows], delta) if n >= min_labels else out[rows]
        shifts[day.isoformat()] = (float(delta), n)
    return out, shifts


def window_of(first: date, last: date, window_days: int) -> tuple[date, date]:
    """The delivery days whose labels can move the days `first`..`last`: from `window_days`
    before the first, up to the last (excluded)."""
    return first - timedelta(days=window_days), last
