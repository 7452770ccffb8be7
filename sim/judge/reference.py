"""What the flywheel's production AUC is measured against: a same-budget reference and a ceiling.

Both are a HistGradientBoosting classifier retrained at the start of each of the report's periods
(`period_end`: a week from its Monday for a daily task, else a partition: a month for a monthly
one) on the examples of the partitions before it, on the features the dbt marts give every
example, the columns the model reads:

- the **reference** learns from as many uniformly random examples of each landing partition as
  the flywheel got labels for that partition: the same budget, spent without a model, a label
  selection or a promotion gate;
- the **ceiling** learns from every example's outcome.

Each is scored as the report scores the flywheel (`production_auc`): the AUC of a binary label,
the macro one-vs-rest AUC of `FeatureConfig.classes` for several, over the classes the period's
outcomes hold often enough (sim.judge.per_class); a period whose outcomes hold one value only has
none.

Only the simulator knows every outcome, so both live here and not in the pipeline.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from datetime import date, timedelta

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from ml.labels import class_indices
from ml.metrics import auroc
from pipelines.task.cadence import Cadence, next_start
from sim.judge.per_class import macro_auc

# HistGradientBoosting's native categorical support needs codes below its bin count; a larger
# vocabulary enters as ordinal codes (as in ml.baselines).
MAX_CATEGORIES = 255
# Fewer training rows than this, or a single class: no model that period.
MIN_TRAINING_ROWS = 50
COLUMNS = ["period", "reference", "ceiling", "reference_labels", "ceiling_labels"]


def period_end(start: date, cadence: Cadence) -> date:
    """The day after the report period starting on `start`: a week for a daily task (as the
    report groups its days by week), else the task's partition."""
    return start + timedelta(weeks=1) if cadence == "daily" else next_start(start, cadence)


def production_auc(y: np.ndarray, probs: np.ndarray, classes: Sequence | None) -> float:
    """The report's production AUC of `probs` on outcomes `y` (0/1, or indices of `classes`):
    the AUC of a binary label, else the macro one-vs-rest AUC over the classes `y` holds often
    enough (sim.judge.per_class); NaN when `y` holds one value only, as the report's flywheel
    column."""
    if len(y) == 0 or y.min() == y.max():
        return float("nan")
    return auroc(y, probs) if classes is None else macro_auc(y, probs)


def reference_sample(
    examples: pd.DataFrame, spend: pd.Series, time_column: str, seed: int = 0
) -> pd.DataFrame:
    """Per landing partition (its `time_column`), `spend[partition]` of its examples drawn
    uniformly at random (all of them when it has fewer). A partition's draw depends only on the
    partition and `seed`: the labelled set grows partition by partition as an annotator's
    would."""
    picked = []
    for partition, group in examples.groupby(time_column, sort=True):
        n = int(spend.get(partition, 0))
        if n <= 0:
            continue
        digest = hashlib.sha256(f"{seed}/{partition}".encode()).hexdigest()[:8]
        rng = np.random.default_rng(int(digest, 16))
        rows = rng.choice(len(group), size=min(n, len(group)), replace=False)
        picked.append(group.iloc[np.sort(rows)])
    return pd.concat(picked) if picked else examples.iloc[:0]


def encode(
    train: pd.DataFrame, other: pd.DataFrame, features: FeatureConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float matrices for HistGradientBoosting: categorical columns as codes of the training
    rows' vocabulary (unseen values missing), numeric columns as they are; and the mask of the
    columns it treats as categorical. Columns missing in every training row are left out."""
    both = pd.concat([train, other], ignore_index=True)
    return Columns(both, features).matrices(np.arange(len(train)), np.arange(len(train), len(both)))


class Columns:
    """The feature columns of a frame's rows as numbers, computed once for the many fits that
    take their rows from it: `matrices` of any two sets of rows are `encode`'s matrices of
    those rows, without a pass over the frame's values per fit."""

    def __init__(self, frame: pd.DataFrame, features: FeatureConfig) -> None:
        # Each categorical column as codes of its values (-1: missing), numbered in any order:
        # `matrices` renumbers them by first appearance in the training rows.
        self.codes = [pd.factorize(frame[column])[0] for column in features.categorical]
        self.numeric = [
            pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)
            for column in features.numeric
        ]

    def matrices(
        self, train: np.ndarray, other: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`encode`'s matrices for the rows at positions `train` and `other`, in that order."""
        columns = []  # (training rows' values, other rows' values, categorical)
        for codes in self.codes:
            seen = codes[train]
            values, first = np.unique(seen[seen >= 0], return_index=True)
            # Code -> its rank among the training rows' values by first appearance; the last
            # slot, never assigned, is where -1 (missing) lands: missing, as unseen values are.
            rank = np.full(codes.max(initial=-1) + 2, np.nan)
            rank[values[np.argsort(first)]] = np.arange(len(values))
            columns.append((rank[seen], rank[codes[other]], len(values) <= MAX_CATEGORIES))
        columns += [(values[train], values[other], False) for values in self.numeric]
        # A column with no value in the training rows says nothing (and HistGradientBoosting
        # cannot bin it): left out of both.
        columns = [c for c in columns if not np.isnan(c[0]).all()]
        # Column-major, as HistGradientBoosting bins them: filled without a copy per column.
        x_train = np.empty((len(train), len(columns)), order="F")
        x_other = np.empty((len(other), len(columns)), order="F")
        for j, (train_values, other_values, _) in enumerate(columns):
            x_train[:, j], x_other[:, j] = train_values, other_values
        return x_train, x_other, np.array([c[2] for c in columns], dtype=bool)


def fit_predict(
    x_train: np.ndarray,
    y: np.ndarray,
    x_other: np.ndarray,
    categorical: np.ndarray,
    seed: int,
    sample_weight: np.ndarray | None = None,
    n_classes: int | None = None,
) -> np.ndarray:
    """The reference model fitted on (`x_train`, `y`), optionally weighted: its probabilities
    for `x_other`, P(1) for a binary label, else one column per class index of `y` up to
    `n_classes` (0 for a class it never saw)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(categorical_features=categorical, random_state=seed)
    predicted = model.fit(x_train, y, sample_weight=sample_weight).predict_proba(x_other)
    if n_classes is None:
        return predicted[:, 1]
    probs = np.zeros((len(x_other), n_classes))
    probs[:, model.classes_] = predicted
    return probs


# A fit's inputs: the training rows' matrix, their labels, the scored rows' matrix and which
# columns are categorical.
Fit = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# AUCs already computed, by (period, "reference" or "ceiling"): the fingerprint of their fit's
# inputs (see `fingerprint`) and the AUC.
Fitted = Mapping[tuple[date, str], tuple[str, float]]


class PlayedExamples:
    """Every example played, ready for the fits of each report period: what each retrained
    model learns from and scores, and how its scores are judged."""

    def __init__(
        self,
        examples: pd.DataFrame,
        features: FeatureConfig,
        time_column: str,
        cadence: Cadence = "daily",
    ) -> None:
        self.examples = examples.reset_index(drop=True)
        self.columns = Columns(self.examples, features)
        self.dates = pd.to_datetime(self.examples[time_column]).to_numpy("datetime64[D]")
        self.classes, self.cadence = features.classes, cadence
        # `fit_predict`'s columns: none for a binary label (P(1) only), else one per class.
        self.n_classes = None if self.classes is None else len(self.classes)
        label = self.examples[features.label]
        # 0/1 for a binary label, else each outcome's index in the classes the model predicts.
        self.labels = (
            label.to_numpy(dtype=np.int64)
            if self.classes is None
            else class_indices(label, self.classes, features.label)
        )

    def fit(self, pool: np.ndarray, period: date) -> tuple[int, np.ndarray, Fit | None]:
        """The model retrained at the start of `period` (see `period_end`) on the rows at
        positions `pool` (in that order) of the partitions before it: how many rows it learns
        from, the outcomes of the period's examples it scores, and its fit's inputs; None when
        it learns from too few rows or one class, or when the period's outcomes hold one value
        only (no AUC)."""
        start = np.datetime64(period, "D")
        end = np.datetime64(period_end(period, self.cadence), "D")
        scored = np.flatnonzero((self.dates >= start) & (self.dates < end))
        train = pool[self.dates[pool] < start]
        y_scored, y = self.labels[scored], self.labels[train]
        if len(y_scored) == 0 or y_scored.min() == y_scored.max():
            return len(train), y_scored, None
        if len(y) < MIN_TRAINING_ROWS or y.min() == y.max():
            return len(train), y_scored, None
        x_train, x_other, categorical = self.columns.matrices(train, scored)
        return len(train), y_scored, (x_train, y, x_other, categorical)

    def auc(self, y: np.ndarray, probs: np.ndarray) -> float:
        """`production_auc` of a fit's scores on the outcomes `y` of its period."""
        return production_auc(y, probs, self.classes)


def fingerprint(fit: Fit) -> str:
    """A digest of a fit's inputs. The fit is deterministic (a fixed seed; HistGradientBoosting
    gives the same model on any number of threads), so equal digests mean equal AUCs."""
    digest = hashlib.blake2b(digest_size=16)
    for array in fit:
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes(order="A"))
    return digest.hexdigest()


def reference_by_period(
    examples: pd.DataFrame,
    spend: pd.Series,
    periods: Sequence[date],
    features: FeatureConfig,
    time_column: str,
    seed: int = 0,
    jobs: int | None = None,
    fitted: Fitted | None = None,
    cadence: Cadence = "daily",
) -> pd.DataFrame:
    """Production AUC per report period (its first day, see `period_end`) of the reference and
    of the ceiling, each retrained at its start on the examples of the partitions before it;
    with how many labels each learned from.

    `examples` holds every example played (its `time_column` the date of its landing partition,
    the features, the label); `spend` how many labels the flywheel got for each landing
    partition's examples. A period in `fitted` whose fit would have the same inputs keeps its
    AUC there (see sim.judge.baseline_fits); the other fits run in `jobs` processes (default:
    one per core).
    """
    played = PlayedExamples(examples, features, time_column, cadence)
    pools = baseline_pools(played, spend, time_column, seed)
    return pd.DataFrame(auc_by_period(played, pools, periods, seed, jobs, fitted), columns=COLUMNS)


def auc_by_period(
    played: PlayedExamples,
    pools: Mapping[str, np.ndarray],
    periods: Sequence[date],
    seed: int = 0,
    jobs: int | None = None,
    fitted: Fitted | None = None,
) -> list[dict[str, object]]:
    """A row per report period (`period`: its first day): for each of `pools` (a name and the
    rows it learns from), the AUC of the model retrained at the period's start (`<name>`) and
    how many rows it learned from (`<name>_labels`). A period in `fitted` whose fit would have
    the same inputs keeps its AUC there; the other fits run in `jobs` processes (default: one
    per core)."""
    from joblib import Parallel, delayed

    rows, fits = [], []
    for period in periods:
        start = pd.Timestamp(period).date()
        row: dict[str, object] = {"period": start}
        for name, pool in pools.items():
            row[f"{name}_labels"], y, fit = played.fit(pool, start)
            row[name] = np.nan
            if fit is None:
                continue
            known = (fitted or {}).get((start, name))
            if known is not None and known[0] == fingerprint(fit):
                row[name] = known[1]
            else:
                fits.append((len(rows), name, y, fit))
        rows.append(row)
    if fits:
        scores = Parallel(n_jobs=jobs or os.cpu_count() or 1)(
            delayed(fit_predict)(*fit, seed, n_classes=played.n_classes) for _, _, _, fit in fits
        )
        for (i, name, y, _), predicted in zip(fits, scores, strict=True):
            rows[i][name] = played.auc(y, predicted)
    return rows


def baseline_pools(
    played: PlayedExamples, spend: pd.Series | None, time_column: str, seed: int
) -> dict[str, np.ndarray]:
    """The rows each baseline learns from, by name: the reference's (only when `spend` is
    given) and the ceiling's, in the order the report fits them."""
    pools = {}
    if spend is not None:
        sample = reference_sample(played.examples, spend, time_column, seed)
        pools["reference"] = sample.index.to_numpy()
    pools["ceiling"] = np.arange(len(played.examples))
    return pools
