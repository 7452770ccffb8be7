"""A model's probabilities moved to a new prior: the correction between retrainings.

A model keeps the positive rate of the labels it trained on until it is replaced, while
production's moves (the flights' late rate goes from 13% in September to 32% in December): its
scores are then too low or too high as a whole, however well they rank. Under Bayes' rule a
change of prior keeps each score's likelihood ratio and moves every log-odds by the same amount
(Saerens, Latinne and Decaestecker 2002). `prior_shift` finds that amount from labelled examples
drawn uniformly from recent traffic: the maximum-likelihood intercept of a logistic
recalibration with the scores' log-odds as offset, after which the scores average the labels.
A uniform sample's positive rate is an unbiased estimate of production's, so no EM on
unlabelled scores is needed (EM holds only while the model's calibration within each class
does, which a drifting feed breaks; Alexandari et al. 2020). Binary labels only.

The alternatives the served correction is measured against (sim/judge/recalibration_floor.py):
the shift with recent labels weighing more (`prior_shift`'s `weights`), Platt scaling (`platt`:
a slope on the log-odds as well as the intercept, Platt 1999), and a day-level offset model
(`OffsetModel`: the shift as a linear function of what is known of a day before its labels,
fitted to past days' shifts or to their labels).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS = 1e-6
MAX_STEP = 1.0  # the largest Newton step, in log-odds


def logit(p: np.ndarray | float) -> np.ndarray:
    """The log-odds of `p`, clipped away from 0 and 1."""
    p = np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


def shift(probs: np.ndarray, delta: float) -> np.ndarray:
    """`probs` with every log-odds moved by `delta`."""
    return 1.0 / (1.0 + np.exp(-(logit(probs) + delta)))


def prior_shift(
    probs: np.ndarray,
    outcomes: np.ndarray,
    steps: int = 50,
    weights: np.ndarray | None = None,
) -> float:
    """The log-odds shift after which `probs` average what `outcomes` (0/1, or a share of
    annotators) do, each row counted `weights` times (once by default): Newton's method on the
    logistic likelihood of the intercept, which is concave, so the root is the maximum."""
    logits = logit(probs)
    w = np.ones(len(logits)) if weights is None else np.asarray(weights, dtype=np.float64)
    target = float(np.sum(w * np.asarray(outcomes, dtype=np.float64)))
    target = min(max(target, EPS), float(w.sum()) - EPS)  # all 0 or all 1: a finite shift
    delta = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(logits + delta)))
        step = (target - float(np.sum(w * p))) / max(float(np.sum(w * p * (1 - p))), EPS)
        # Far from the root the curvature is small and a full step overshoots into a flat tail.
        step = min(max(step, -MAX_STEP), MAX_STEP)
        delta += step
        if abs(step) < 1e-10:
            break
    return delta


def rescale(probs: np.ndarray, slope: float, intercept: float) -> np.ndarray:
    """`probs` with every log-odds multiplied by `slope`, then moved by `intercept`."""
    return 1.0 / (1.0 + np.exp(-(slope * logit(probs) + intercept)))


def platt(probs: np.ndarray, outcomes: np.ndarray, steps: int = 50) -> tuple[float, float]:
    """The slope and intercept on the log-odds of `probs` that maximise the likelihood of
    `outcomes` (0/1), fitted to Platt's smoothed targets so that outcomes of one value, or
    scores that separate them, still give finite ones."""
    x = logit(probs)
    y = np.asarray(outcomes, dtype=np.float64)
    positives = float(y.sum())
    # Platt (1999): targets pulled in by one pseudo-count each way.
    high, low = (positives + 1) / (positives + 2), 1 / (len(y) - positives + 2)
    target = np.where(y > 0.5, high, low)
    design = np.column_stack([x, np.ones_like(x)])
    coef = np.array([1.0, 0.0])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(design @ coef)))
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + EPS * np.eye(2)
        step = np.linalg.solve(hessian, design.T @ (target - p))
        step *= min(1.0, MAX_STEP / float(np.abs(step).max()))
        coef += step
        if np.abs(step).max() < 1e-10:
            break
    return float(coef[0]), float(coef[1])


@dataclass(frozen=True)
class OffsetModel:
    """A day's log-odds shift predicted from what is known of the day before its labels: a
    linear model on standardised day-level features, its slopes shrunk to 0 (then it predicts
    the weighted mean of the days it was fitted on)."""

    intercept: float
    slopes: np.ndarray
    center: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(
        cls, features: np.ndarray, shifts: np.ndarray, weights: np.ndarray, alpha: float
    ) -> OffsetModel:
        """The weighted ridge regression of past days' `shifts` on their `features` (a row a
        day), each day weighing `weights` (e.g. its labels), the slopes' penalty `alpha` in
        units of the mean day's weight."""
        x = np.asarray(features, dtype=np.float64)
        y, w = np.asarray(shifts, dtype=np.float64), np.asarray(weights, dtype=np.float64)
        if x.ndim != 2 or len(x) != len(y) or len(y) != len(w) or len(y) == 0:
            raise ValueError(f"OffsetModel.fit needs a row of features per shift: {x.shape}")
        w = w / w.mean()
        center = np.average(x, axis=0, weights=w)
        scale = np.sqrt(np.average((x - center) ** 2, axis=0, weights=w))
        constant = scale <= EPS
        scale = np.where(constant, 1.0, scale)
        z, mean_y = (x - center) / scale, float(np.average(y, weights=w))
        z[:, constant] = 0.0  # a constant feature says nothing of the shift: its slope stays 0
        gram = z.T @ (z * w[:, None]) + (alpha + EPS) * np.eye(z.shape[1])
        slopes = np.linalg.solve(gram, z.T @ (w * (y - mean_y)))
        return cls(mean_y, slopes, center, scale)

    @classmethod
    def fit_to_labels(
        cls,
        features: np.ndarray,
        logits: np.ndarray,
        outcomes: np.ndarray,
        alpha: float,
        steps: int = 50,
    ) -> OffsetModel:
        """The penalised logistic regression of `outcomes` (0/1, a row a label) on `features`
        (each label's day's), its scores' `logits` as offset: the shift as a function of the
        day fitted to the labels themselves, each weighing alike, the slopes' penalty `alpha`
        in units of Fisher information (a label's is p(1 - p))."""
        x, offset = np.asarray(features, dtype=np.float64), np.asarray(logits, dtype=np.float64)
        y = np.asarray(outcomes, dtype=np.float64)
        if x.ndim != 2 or len(x) != len(y) or len(y) != len(offset) or len(y) == 0:
            raise ValueError(f"OffsetModel.fit_to_labels needs features per label: {x.shape}")
        center, scale = x.mean(axis=0), x.std(axis=0)
        constant = scale <= EPS
        z = np.where(constant, 0.0, (x - center) / np.where(constant, 1.0, scale))
        design = np.column_stack([np.ones(len(y)), z])
        penalty = np.diag([EPS, *([alpha + EPS] * z.shape[1])])
        coef = np.zeros(design.shape[1])
        for _ in range(steps):
            p = 1.0 / (1.0 + np.exp(-(offset + design @ coef)))
            hessian = design.T @ (design * (p * (1 - p))[:, None]) + penalty
            step = np.linalg.solve(hessian, design.T @ (y - p) - penalty @ coef)
            step *= min(1.0, MAX_STEP / max(float(np.abs(step).max()), EPS))
            coef += step
            if np.abs(step).max() < 1e-10:
                break
        return cls(float(coef[0]), coef[1:], center, np.where(constant, 1.0, scale))

    def predict(self, features: np.ndarray) -> np.ndarray:
        """The shift of each row of `features`."""
        z = (np.atleast_2d(np.asarray(features, dtype=np.float64)) - self.center) / self.scale
        return self.intercept + z @ self.slopes
