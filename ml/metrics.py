"""Vectorised classification metrics shared by baselines and evaluation: binary ones on P(true)
per row, multi-class ones on (n, K) probabilities and class indices 0..K-1, under the same keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ml.labels import class_indices
from ml.labels import score_of as score_of  # one place for the 1-d score: ml.labels

PROB_EPS = 1e-7


def auroc(y_true: ArrayLike, y_score: ArrayLike) -> float:
    """Area under the ROC curve via the Mann-Whitney rank statistic (ties get average ranks)."""
    y = np.asarray(y_true).astype(bool).ravel()
    s = np.asarray(y_score, dtype=np.float64).ravel()
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("auroc needs both classes in y_true")
    order = np.argsort(s, kind="mergesort")
    sorted_scores = s[order]
    # Average ranks over runs of tied scores, computed from run boundaries without a Python loop.
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], s.size]
    run_rank = (starts + ends + 1) / 2.0
    ranks = np.empty(s.size, dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def expected_auroc(y_prob: ArrayLike) -> float:
    """The AUROC that probabilities would score if they were calibrated, from the scores alone.

    Confidence-based performance estimation: each row counts as a positive with weight p and a
    negative with weight 1 - p, and the estimate is the weighted share of (positive, negative)
    pairs of distinct rows that the scores order correctly (tied scores count half). Needs no
    label, so it follows a model on unlabelled traffic; it cannot see a change in what the
    features mean (the scores' calibration is what it assumes).
    """
    p = np.asarray(y_prob, dtype=np.float64).ravel()
    if p.size < 2 or np.any((p < 0) | (p > 1)) or np.isnan(p).any():
        raise ValueError("expected_auroc needs at least two probabilities in [0, 1]")
    order = np.argsort(p, kind="mergesort")
    s = p[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    pos = np.add.reduceat(s, starts)  # positive mass of each run of tied scores
    neg = np.add.reduceat(1 - s, starts)
    self_pairs = np.add.reduceat(s * (1 - s), starts)
    below = np.cumsum(neg) - neg  # negative mass scored strictly lower
    pairs = pos.sum() * neg.sum() - self_pairs.sum()
    if pairs <= 0:
        raise ValueError(
            "expected_auroc needs a probability strictly between 0 and 1, or both 0 and 1"
        )
    ordered = (pos * below).sum() + 0.5 * (pos * neg - self_pairs).sum()
    return float(ordered / pairs)


def logloss(
    y_true: ArrayLike,
    y_prob: ArrayLike,
    eps: float = PROB_EPS,
    *,
    weights: ArrayLike | None = None,
) -> float:
    """Mean binary cross-entropy of probabilities clipped to [eps, 1 - eps] (weighted by the
    rows' `weights` when given)."""
    y = np.asarray(y_true, dtype=np.float64).ravel()
    p = np.clip(np.asarray(y_prob, dtype=np.float64).ravel(), eps, 1 - eps)
    return float(-np.average(y * np.log(p) + (1 - y) * np.log1p(-p), weights=weights))


def brier(y_true: ArrayLike, y_prob: ArrayLike, *, weights: ArrayLike | None = None) -> float:
    """Mean squared difference between the predicted probability and the 0/1 label (weighted
    by the rows' `weights` when given)."""
    y = np.asarray(y_true, dtype=np.float64).ravel()
    p = np.asarray(y_prob, dtype=np.float64).ravel()
    return float(np.average((p - y) ** 2, weights=weights))


def expected_calibration_error(y_true: ArrayLike, y_prob: ArrayLike, n_bins: int = 10) -> float:
    """Row-weighted mean of |mean label - mean probability| over equal-width bins on [0, 1]."""
    y = np.asarray(y_true, dtype=np.float64).ravel()
    p = np.asarray(y_prob, dtype=np.float64).ravel()
    if y.size == 0:
        raise ValueError("expected_calibration_error needs at least one row")
    # Bin i holds [i/n, (i+1)/n); clipping puts p == 1.0 in the last bin rather than its own.
    bins = np.clip((p * n_bins).astype(np.int64), 0, n_bins - 1)
    label_sums = np.bincount(bins, weights=y, minlength=n_bins)
    prob_sums = np.bincount(bins, weights=p, minlength=n_bins)
    # |mean(y) - mean(p)| * n_bin / n equals |sum(y) - sum(p)| / n, and empty bins add zero.
    return float(np.abs(label_sums - prob_sums).sum() / y.size)


def binary_metrics(
    y_true: ArrayLike, y_prob: ArrayLike, *, weights: ArrayLike | None = None
) -> dict[str, float]:
    """Return ``{"auroc", "logloss", "brier", "ece"}`` for one set of predictions; with row
    `weights`, logloss and Brier score are weighted means (AUROC and ECE are not weighted)."""
    return {
        "auroc": auroc(y_true, y_prob),
        "logloss": logloss(y_true, y_prob, weights=weights),
        "brier": brier(y_true, y_prob, weights=weights),
        "ece": expected_calibration_error(y_true, y_prob),
    }


def class_aurocs(y_index: ArrayLike, probs: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Per class k, the one-vs-rest AUROC of column k for "class k or not" and how many rows
    are of class k; the AUROC is NaN for a class absent from ``y_index`` or the only one present."""
    y, p = _checked(y_index, probs)
    counts = np.bincount(y, minlength=p.shape[1])
    scores = np.array(
        [auroc(y == k, p[:, k]) if 0 < n < y.size else np.nan for k, n in enumerate(counts)]
    )
    return scores, counts


def multiclass_auroc(y_index: ArrayLike, probs: ArrayLike, min_count: int = 1) -> float:
    """Macro one-vs-rest AUROC: the mean over classes of the AUROC of column k for "class k
    or not"; a class with fewer than ``min_count`` rows (by default: absent from ``y_index``),
    or the only one present, has none and is skipped."""
    scores, counts = class_aurocs(y_index, probs)
    kept = scores[~np.isnan(scores) & (counts >= min_count)]
    if not kept.size:
        raise ValueError(
            f"multiclass_auroc needs at least two classes in y_index, one with {min_count}+ rows"
        )
    return float(np.mean(kept))


def multiclass_logloss(
    y_index: ArrayLike,
    probs: ArrayLike,
    eps: float = PROB_EPS,
    *,
    weights: ArrayLike | None = None,
) -> float:
    """Mean cross-entropy -log p(true class), its probability clipped to [eps, 1 - eps] as
    ``logloss`` clips (weighted by the rows' `weights` when given). With K = 2 columns it is
    the binary ``logloss`` of column 1."""
    y, p = _checked(y_index, probs)
    p_true = np.clip(p[np.arange(y.size), y], eps, 1 - eps)
    return float(-np.average(np.log(p_true), weights=weights))


def multiclass_brier(
    y_index: ArrayLike, probs: ArrayLike, *, weights: ArrayLike | None = None
) -> float:
    """Mean over rows of the sum over classes of (p_k - 1[y = k])^2, in [0, 2] (weighted by the
    rows' `weights` when given). Brier's original multi-class score: with K = 2 columns it is
    twice the binary ``brier``."""
    y, p = _checked(y_index, probs)
    squared = (p - _one_hot(y, p.shape[1])) ** 2
    return float(np.average(squared.sum(axis=1), weights=weights))


def top_label_calibration_error(y_index: ArrayLike, probs: ArrayLike, n_bins: int = 10) -> float:
    """Top-label ECE: ``expected_calibration_error`` of whether the most probable class is the
    true one against that class's probability (the model's confidence)."""
    y, p = _checked(y_index, probs)
    top = p.argmax(axis=1)
    return expected_calibration_error(top == y, p[np.arange(y.size), top], n_bins)


def class_calibration(y_index: ArrayLike, probs: ArrayLike, n_bins: int = 10) -> dict[int, float]:
    """One-vs-rest calibration error per class index: ``expected_calibration_error`` of
    "class k" against column k."""
    y, p = _checked(y_index, probs)
    return {k: expected_calibration_error(y == k, p[:, k], n_bins) for k in range(p.shape[1])}


def multiclass_metrics(
    y_index: ArrayLike, probs: ArrayLike, *, weights: ArrayLike | None = None
) -> dict[str, float]:
    """``binary_metrics``' keys for (n, K) probabilities and class indices 0..K-1: macro
    one-vs-rest ``auroc``, ``logloss`` (cross-entropy), ``brier`` (summed over classes, see
    ``multiclass_brier``) and top-label ``ece``; with row `weights`, logloss and Brier score are
    weighted means (AUROC and ECE are not weighted)."""
    return {
        "auroc": multiclass_auroc(y_index, probs),
        "logloss": multiclass_logloss(y_index, probs, weights=weights),
        "brier": multiclass_brier(y_index, probs, weights=weights),
        "ece": top_label_calibration_error(y_index, probs),
    }


def metrics_of(
    y: ArrayLike,
    probs: ArrayLike,
    classes: Sequence[Any] | None = None,
    *,
    weights: ArrayLike | None = None,
) -> dict[str, float]:
    """``binary_metrics`` of 0/1 labels and (n,) probabilities, or with ``classes``
    ``multiclass_metrics`` of label values (mapped to their index in ``classes``) and (n, K)
    probabilities."""
    if classes is None:
        return binary_metrics(y, probs, weights=weights)
    return multiclass_metrics(class_indices(y, classes), probs, weights=weights)


def _checked(y_index: ArrayLike, probs: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y_index).ravel()
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != y.size or y.size == 0:
        raise ValueError(f"need (n, K) probabilities for n = {y.size} > 0 rows, got {p.shape}")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= p.shape[1]:
        raise ValueError(f"class indices must be integers in 0..{p.shape[1] - 1}")
    return y.astype(np.int64), p


def _one_hot(y: np.ndarray, k: int) -> np.ndarray:
    return (y[:, None] == np.arange(k)).astype(np.float64)
