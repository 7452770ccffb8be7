"""Model evaluation beyond one number: slices, paired bootstrap intervals, a side-by-side table.

Predictions are P(label = 1) per row, shape (n,), for a binary label; for a label of K classes
(``classes``: its values in order) each model's are (n, K) probabilities, column k for
``classes[k]``, and the metrics are ``ml.metrics.multiclass_metrics``' (same keys).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from ml.labels import class_indices
from ml.metrics import (
    PROB_EPS,
    auroc,
    binary_metrics,
    logloss,
    multiclass_auroc,
    multiclass_logloss,
    multiclass_metrics,
)

BOOTSTRAP_METRICS = ("auroc", "logloss", "brier")
# The overall figures a challenger's evaluation records and the gate reads.
METRICS = ("auroc", "logloss", "brier", "ece")
# Bound on the elements of one chunk of the (n_boot, n) resample matrix: about 32 MB of int64.
_CHUNK_ELEMENTS = 4_000_000

SliceKey = str | Callable[[pd.DataFrame], ArrayLike]


@dataclass(frozen=True)
class BootstrapResult:
    """A paired bootstrap percentile interval for metric(a) - metric(b)."""

    metric: str
    estimate: float
    low: float
    high: float
    n_boot: int
    confidence: float


@dataclass
class Evaluation:
    """Overall metrics per model, metrics per slice, and model-vs-against intervals."""

    overall: pd.DataFrame
    slices: pd.DataFrame
    comparison: dict[str, BootstrapResult] = field(default_factory=dict)


def overall_by_model(evaluation: Evaluation) -> pd.DataFrame:
    """The overall figures indexed by model."""
    overall = evaluation.overall
    return overall.set_index("model") if "model" in overall.columns else overall


def finite(value: float | None) -> float | None:
    """A figure for JSON: None where it is missing or not finite."""
    return None if value is None or not math.isfinite(float(value)) else float(value)


def evaluation_summary(evaluation: Evaluation, window: tuple[str, str]) -> dict:
    """The evaluation as JSON: its test window, overall figures, intervals and slices."""
    overall = overall_by_model(evaluation)
    return {
        "window": list(window),
        "overall": {m: {k: finite(v) for k, v in row.items()} for m, row in overall.iterrows()},
        "comparison": {
            metric: {"estimate": i.estimate, "low": i.low, "high": i.high, "n_boot": i.n_boot}
            for metric, i in evaluation.comparison.items()
        },
        "slices": evaluation.slices.astype(object)
        .where(evaluation.slices.notna(), None)
        .to_dict("records"),
    }


def bands(values: ArrayLike, edges: dict[str, tuple[float, float]]) -> np.ndarray:
    """Name the band of ``edges`` (name: half-open [low, high)) each value falls in; a value in
    none of them is "other", a missing one "missing"."""
    v = np.asarray(values, dtype=np.float64).ravel()
    named = np.full(v.shape, "other", dtype=object)
    named[np.isnan(v)] = "missing"
    for name, (low, high) in edges.items():
        named[(v >= low) & (v < high)] = name
    return named


def slice_metrics(
    frame: pd.DataFrame,
    label: str,
    predictions: dict[str, np.ndarray],
    slices: dict[str, SliceKey],
    classes: Sequence[Any] | None = None,
) -> pd.DataFrame:
    """AUROC (NaN with one class) and log loss per model for every value of every slice.

    A slice is a column name of ``frame`` or a callable that takes ``frame`` and returns one value
    per row; missing values form their own group. Long format, one row per slice value and model.
    With ``classes`` the figures are the multi-class ones (macro one-vs-rest AUROC over the
    classes present, cross-entropy) and ``positives`` is NaN (no class is the positive one).
    """
    y = _labels(frame, label, classes)
    probs = _checked(predictions, len(y), classes)
    rows = []
    for name, key in slices.items():
        values = np.asarray(frame[key] if isinstance(key, str) else key(frame))
        if len(values) != len(y):
            raise ValueError(f"slice {name!r} gives {len(values)} values for {len(y)} rows")
        for value, index in pd.Series(values).groupby(values, dropna=False).indices.items():
            y_slice = y[index]
            if classes is None:
                positives = int(y_slice.sum())
                both = 0 < positives < len(index)
            else:
                positives, both = np.nan, len(np.unique(y_slice)) > 1
            for model, p in probs.items():
                rows.append(
                    {
                        "slice": name,
                        "value": value,
                        "n": len(index),
                        "positives": positives,
                        "model": model,
                        "auroc": _auroc(y_slice, p[index]) if both else np.nan,
                        "logloss": _logloss(y_slice, p[index]),
                    }
                )
    columns = ["slice", "value", "n", "positives", "model", "auroc", "logloss"]
    return pd.DataFrame(rows, columns=columns)


def paired_bootstrap(
    y_true: ArrayLike,
    p_a: ArrayLike,
    p_b: ArrayLike,
    metric: str,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapResult:
    """Percentile interval of metric(p_a) - metric(p_b) over rows resampled jointly for both.

    For auroc, resamples that hold a single class have no AUC and are skipped, so the result's
    ``n_boot`` counts the resamples actually used (fewer than asked only with very rare classes).
    With (n, K) probabilities ``y_true`` holds class indices 0..K-1 and the metrics are the
    multi-class ones; a resample's macro AUROC averages the classes it holds with others.
    """
    if metric not in BOOTSTRAP_METRICS:
        raise ValueError(f"metric must be one of {BOOTSTRAP_METRICS}, got {metric!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    a, b = (np.asarray(p, dtype=np.float64) for p in (p_a, p_b))
    if _several_classes(a) or _several_classes(b):
        if a.shape != b.shape:
            raise ValueError(f"need probabilities of one shape; got {a.shape} and {b.shape}")
        y = np.asarray(y_true).ravel().astype(np.int64)
    else:
        y = np.asarray(y_true, dtype=np.float64).ravel()
        a, b = a.ravel(), b.ravel()
    if not len(y) == len(a) == len(b) > 0:
        raise ValueError(f"need equal, non-empty lengths; got {len(y)}, {len(a)}, {len(b)}")
    if metric == "auroc":
        estimate = _auroc(y, a) - _auroc(y, b)
        diffs = _bootstrap_auroc_diffs(y, a, b, n_boot, seed)
    else:
        per_row = _row_losses(y, a, metric) - _row_losses(y, b, metric)
        estimate = float(per_row.mean())
        diffs = np.concatenate(
            [per_row[idx].mean(axis=1) for idx in _resamples(len(y), n_boot, seed)]
        )
    diffs = diffs[np.isfinite(diffs)]
    if diffs.size == 0:
        raise ValueError("every bootstrap resample held a single class")
    tail = (1 - confidence) / 2
    low, high = np.quantile(diffs, [tail, 1 - tail])
    return BootstrapResult(metric, float(estimate), float(low), float(high), diffs.size, confidence)


def evaluate_models(
    frame: pd.DataFrame,
    label: str,
    predictions: dict[str, np.ndarray],
    slices: dict[str, SliceKey],
    model: str,
    against: str | None,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    classes: Sequence[Any] | None = None,
) -> Evaluation:
    """Overall and per-slice metrics per model, and paired intervals of model - against; with
    ``classes`` (the label's values in order) the label column is mapped to class indices and
    every model's predictions are (n, K) probabilities."""
    y = _labels(frame, label, classes)
    probs = _checked(predictions, len(y), classes)
    for name in (model, against):
        if name is not None and name not in probs:
            raise ValueError(f"model {name!r} has no predictions; have {sorted(probs)}")
    overall = pd.DataFrame(
        [{"model": m, "n": len(y), **_metrics(y, p)} for m, p in probs.items()],
        columns=["model", "n", "auroc", "logloss", "brier", "ece"],
    )
    comparison = {}
    if against is not None:
        comparison = {
            metric: paired_bootstrap(
                y, probs[model], probs[against], metric, n_boot, seed, confidence
            )
            for metric in ("auroc", "logloss")
        }
    return Evaluation(overall, slice_metrics(frame, label, probs, slices, classes), comparison)


def _labels(frame: pd.DataFrame, label: str, classes: Sequence[Any] | None = None) -> np.ndarray:
    if classes is not None:
        return class_indices(frame[label], classes, label)
    y = frame[label].to_numpy(dtype=np.float64, na_value=np.nan)
    if not np.isin(y, (0.0, 1.0)).all():
        raise ValueError(f"label column {label!r} must hold only 0/1 (or booleans), no missing")
    return y


def _checked(
    predictions: dict[str, np.ndarray], n: int, classes: Sequence[Any] | None = None
) -> dict[str, np.ndarray]:
    if classes is not None:
        probs = {name: np.asarray(p, dtype=np.float64) for name, p in predictions.items()}
        shape = (n, len(classes))
        if wrong := {name: p.shape for name, p in probs.items() if p.shape != shape}:
            raise ValueError(f"predictions must be {shape}, one column per class; got {wrong}")
        return probs
    probs = {name: np.asarray(p, dtype=np.float64).ravel() for name, p in predictions.items()}
    if wrong := {name: len(p) for name, p in probs.items() if len(p) != n}:
        raise ValueError(f"predictions must have one value per row ({n}); got {wrong}")
    return probs


def _several_classes(p: np.ndarray) -> bool:
    """Whether ``p`` holds a column per class ((n, K)) rather than P(label = 1)."""
    return p.ndim == 2 and p.shape[1] > 1


def _metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    return multiclass_metrics(y, p) if p.ndim == 2 else binary_metrics(y, p)


def _auroc(y: np.ndarray, p: np.ndarray) -> float:
    return multiclass_auroc(y, p) if p.ndim == 2 else auroc(y, p)


def _logloss(y: np.ndarray, p: np.ndarray) -> float:
    return multiclass_logloss(y, p) if p.ndim == 2 else logloss(y, p)


def _row_losses(y: np.ndarray, p: np.ndarray, metric: str) -> np.ndarray:
    if p.ndim == 2:
        # Class-index labels: the multi-class Brier score and cross-entropy of each row.
        if metric == "brier":
            return ((p - (y[:, None] == np.arange(p.shape[1]))) ** 2).sum(axis=1)
        return -np.log(np.clip(p[np.arange(y.size), y], PROB_EPS, 1 - PROB_EPS))
    if metric == "brier":
        return (p - y) ** 2
    p = np.clip(p, PROB_EPS, 1 - PROB_EPS)
    return -(y * np.log(p) + (1 - y) * np.log1p(-p))


def _resamples(n: int, n_boot: int, seed: int):
    """Yield (chunk, n) matrices of row indices drawn with replacement, n_boot rows in all."""
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, n_boot, chunk):
        yield rng.integers(0, n, size=(min(chunk, n_boot - start), n))


def _bootstrap_auroc_diffs(
    y: np.ndarray, a: np.ndarray, b: np.ndarray, n_boot: int, seed: int
) -> np.ndarray:
    diffs = []
    for idx in _resamples(len(y), n_boot, seed):
        # A resample is the original rows weighted by how often each was drawn: AUC over the
        # resample equals the count-weighted AUC, so each model's scores are sorted only once.
        k, n = idx.shape
        offsets = (idx + n * np.arange(k)[:, None]).ravel()
        counts = np.bincount(offsets, minlength=k * n).reshape(k, n).astype(np.float64)
        if a.ndim == 2:
            diffs.append(_macro_weighted_auroc(y, a, counts) - _macro_weighted_auroc(y, b, counts))
        else:
            diffs.append(_weighted_auroc(y, a, counts) - _weighted_auroc(y, b, counts))
    return np.concatenate(diffs)


def _macro_weighted_auroc(y: np.ndarray, probs: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Macro one-vs-rest AUC per row of ``weights`` over the classes each holds with others."""
    per_class = np.stack(
        [
            _weighted_auroc((y == k).astype(np.float64), probs[:, k], weights)
            for k in range(probs.shape[1])
        ]
    )
    present = np.isfinite(per_class)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(present, per_class, 0.0).sum(axis=0) / present.sum(axis=0)


def _weighted_auroc(y: np.ndarray, score: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Mann-Whitney AUC per row of ``weights`` (ties count half); NaN without both classes."""
    order = np.argsort(score, kind="mergesort")
    s = score[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    positive = y[order] == 1
    w = weights[:, order]
    pos = np.add.reduceat(np.where(positive, w, 0.0), starts, axis=1)
    neg = np.add.reduceat(np.where(positive, 0.0, w), starts, axis=1)
    below = np.cumsum(neg, axis=1) - neg
    pairs = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, (pos * (below + 0.5 * neg)).sum(axis=1) / pairs, np.nan)
