"""What the flywheel's production AUC is measured against: a same-budget reference and a ceiling.

Both are a HistGradientBoosting classifier retrained every week (on its Monday, on the flights of
the days before it) on the features the dbt marts give every flight, the columns the model reads:

- the **reference** learns from as many uniformly random flights of each landing day as the
  flywheel got labels for that day: the same budget, spent without a model, a selection policy
  or a promotion gate;
- the **ceiling** learns from every flight's outcome.

Only the simulator knows every outcome, so both live here and not in the pipeline.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from datetime import date

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from ml.metrics import auroc

# HistGradientBoosting's native categorical support needs codes below its bin count; a larger
# vocabulary enters as ordinal codes (as in ml.baselines).
MAX_CATEGORIES = 255
# Fewer training rows than this, or a single class: no model that week.
MIN_TRAINING_ROWS = 50
COLUMNS = ["week", "reference", "ceiling", "reference_labels", "ceiling_labels"]


def reference_sample(
    flights: pd.DataFrame, spend: pd.Series, time_column: str, seed: int = 0
) -> pd.DataFrame:
    """Per landing day, `spend[day]` of its flights drawn uniformly at random (all of them when
    the day has fewer). A day's draw depends only on the day and `seed`: the labelled set grows
    day by day as an annotator's would."""
    picked = []
    for day, group in flights.groupby(time_column, sort=True):
        n = int(spend.get(day, 0))
        if n <= 0:
            continue
        digest = hashlib.sha256(f"{seed}/{day}".encode()).hexdigest()[:8]
        rng = np.random.default_rng(int(digest, 16))
        rows = rng.choice(len(group), size=min(n, len(group)), replace=False)
        picked.append(group.iloc[np.sort(rows)])
    return pd.concat(picked) if picked else flights.iloc[:0]


def encode(
    train: pd.DataFrame, other: pd.DataFrame, features: FeatureConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float matrices for HistGradientBoosting: categorical columns as codes of the training
    rows' vocabulary (unseen values missing), numeric columns as they are; and the mask of the
    columns it treats as categorical. Columns missing in every training row are left out."""
    x_train, x_other, categorical = [], [], []
    for column in features.categorical:
        vocabulary = pd.Index(train[column].dropna().unique())
        codes = [
            vocabulary.get_indexer(frame[column]).astype(np.float64) for frame in (train, other)
        ]
        for c in codes:
            c[c < 0] = np.nan
        x_train.append(codes[0])
        x_other.append(codes[1])
        categorical.append(len(vocabulary) <= MAX_CATEGORIES)
    for column in features.numeric:
        x_train.append(pd.to_numeric(train[column], errors="coerce").to_numpy(np.float64))
        x_other.append(pd.to_numeric(other[column], errors="coerce").to_numpy(np.float64))
        categorical.append(False)
    train_matrix, other_matrix = np.column_stack(x_train), np.column_stack(x_other)
    # A column with no value in the training rows says nothing (and HistGradientBoosting cannot
    # bin it): left out of both.
    known = ~np.isnan(train_matrix).all(axis=0)
    return train_matrix[:, known], other_matrix[:, known], np.array(categorical)[known]


def fit_predict(
    x_train: np.ndarray,
    y: np.ndarray,
    x_other: np.ndarray,
    categorical: np.ndarray,
    seed: int,
    sample_weight: np.ndarray | None = None,
) -> np.ndarray:
    """The reference model fitted on (`x_train`, `y`), optionally weighted: its probabilities
    for `x_other`."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(categorical_features=categorical, random_state=seed)
    return model.fit(x_train, y, sample_weight=sample_weight).predict_proba(x_other)[:, 1]


def _inputs(
    train: pd.DataFrame, other: pd.DataFrame, features: FeatureConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """What one fit needs (None when `train` is too small or has one class)."""
    y = train[features.label].to_numpy(dtype=np.int64)
    if len(y) < MIN_TRAINING_ROWS or y.min() == y.max():
        return None
    x_train, x_other, categorical = encode(train, other, features)
    return x_train, y, x_other, categorical


def weekly_reference(
    flights: pd.DataFrame,
    spend: pd.Series,
    weeks: Sequence[date],
    features: FeatureConfig,
    time_column: str = "flight_date",
    seed: int = 0,
    jobs: int | None = None,
) -> pd.DataFrame:
    """Production AUC per week (a Monday) of the reference and of the ceiling, each retrained on
    that Monday on the flights of the days before it; with how many labels each learned from.

    `flights` holds every flight played (its `time_column` a date, the features, the label);
    `spend` how many labels the flywheel got for each landing day's flights. The fits run in
    `jobs` processes (default: one per core).
    """
    from joblib import Parallel, delayed

    sample = reference_sample(flights, spend, time_column, seed)
    rows, fits = [], []
    for week in weeks:
        start, end = pd.Timestamp(week).date(), (pd.Timestamp(week) + pd.Timedelta(days=7)).date()
        scored = flights[(flights[time_column] >= start) & (flights[time_column] < end)]
        y = scored[features.label].to_numpy(dtype=np.int64)
        row: dict[str, object] = {"week": start}
        for name, pool in (("reference", sample), ("ceiling", flights)):
            train = pool[pool[time_column] < start]
            inputs = _inputs(train, scored, features) if 0 < y.sum() < len(y) else None
            row[name] = np.nan
            row[f"{name}_labels"] = len(train)
            if inputs is not None:
                fits.append((len(rows), name, y, inputs))
        rows.append(row)
    scores = Parallel(n_jobs=jobs or os.cpu_count() or 1)(
        delayed(fit_predict)(*inputs, seed) for _, _, _, inputs in fits
    )
    for (i, name, y, _), predicted in zip(fits, scores, strict=True):
        rows[i][name] = auroc(y, predicted)
    return pd.DataFrame(rows, columns=COLUMNS)
