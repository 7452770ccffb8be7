"""Calibration of the live scores under a moving late rate, and a prior-shift correction.

The flights' late rate moves from 13% in September to 32% in December, while a model keeps the
late rate of the labels it trained on until it is replaced: its scores are then too low or too
high as a whole, however well they rank. The report measures, per week, the expected
calibration error (ECE, ten equal-width bins) of the live scores, and of the same scores
corrected for the shift of the prior (Saerens, Latinne and Decaestecker 2002): each day, the
log-odds of the champion's scores move by the one shift that makes its mean score on the uniform
audit flights whose labels came back in the `window` days before equal their late rate (the
maximum-likelihood intercept of a logistic recalibration with the scores as offset; under
Bayes' rule, a change of prior keeps each score's likelihood ratio and moves every log-odds by
the same amount). The audit sample is uniform, so its late rate is an unbiased estimate of
production's, with no EM on unlabelled scores (which holds only while the model's calibration
within each class does, what a drifting feed breaks; Alexandari et al. 2020). Binary labels
only.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import numpy as np
import pandas as pd

from ml.metrics import expected_calibration_error, logloss

# Days of audit labels behind each day's correction, and the fewest that move it.
WINDOW_DAYS = 14
MIN_LABELS = 100
EPS = 1e-6


def _logit(p: np.ndarray | float) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


def shift(probs: np.ndarray, delta: float) -> np.ndarray:
    """`probs` with every log-odds moved by `delta`."""
    return 1.0 / (1.0 + np.exp(-(_logit(probs) + delta)))


def prior_shift(probs: np.ndarray, outcomes: np.ndarray, steps: int = 50) -> float:
    """The log-odds shift after which `probs` average what `outcomes` do (Newton's method on
    the logistic likelihood of the intercept; it is concave, so the root is the maximum)."""
    logits, target = _logit(probs), float(np.sum(outcomes))
    target = min(max(target, EPS), len(logits) - EPS)  # all 0 or all 1: a finite shift
    delta = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(logits + delta)))
        step = (target - p.sum()) / max(float(np.sum(p * (1 - p))), EPS)
        delta += step
        if abs(step) < 1e-10:
            break
    return delta


def prior_corrected(
    examples: pd.DataFrame,
    audit: pd.DataFrame,
    predict: Callable[[int, pd.DataFrame], np.ndarray],
    day_column: str,
    window: int = WINDOW_DAYS,
    min_labels: int = MIN_LABELS,
) -> np.ndarray:
    """The flywheel's scores of `examples` (columns `flywheel`, `model_version`, `day_column`),
    each day's corrected by the audit labels known before it: `audit` holds the audit-sampled
    flights' features, their outcome (`y`) and the day their label came back (`delivered`).
    A day with fewer than `min_labels` audit labels in its window keeps its scores."""
    out = examples["flywheel"].to_numpy(dtype=np.float64).copy()
    if audit.empty:
        return out
    days = pd.to_datetime(examples[day_column]).dt.normalize()
    delivered = pd.to_datetime(audit["delivered"]).dt.normalize()
    y = audit["y"].to_numpy(dtype=np.float64)
    scored = {int(v): predict(int(v), audit) for v in examples.model_version.unique()}
    keys = pd.DataFrame({"day": days, "version": examples.model_version.astype(int)})
    for (day, version), rows in keys.groupby(["day", "version"]).groups.items():
        known = ((delivered < day) & (delivered >= day - timedelta(days=window))).to_numpy()
        if known.sum() < min_labels:
            continue
        at = examples.index.get_indexer(rows)
        out[at] = shift(out[at], prior_shift(scored[version][known], y[known]))
    return out


def weekly_calibration(
    y: np.ndarray, week: pd.Series, columns: dict[str, np.ndarray]
) -> pd.DataFrame:
    """Per week: the ECE of each of `columns`' scores (`<name>_ece`) and, for the corrected
    scores, their log loss too (`corrected_logloss`)."""
    rows = []
    for period in sorted(week.unique()):
        at = np.flatnonzero((week == period).to_numpy())
        row: dict = {"week": period}
        for name, probs in columns.items():
            row[f"{name}_ece"] = expected_calibration_error(y[at], probs[at])
        if "corrected" in columns:
            row["corrected_logloss"] = logloss(y[at], columns["corrected"][at])
        rows.append(row)
    return pd.DataFrame(rows)
