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
"""

from __future__ import annotations

import numpy as np

EPS = 1e-6


def logit(p: np.ndarray | float) -> np.ndarray:
    """The log-odds of `p`, clipped away from 0 and 1."""
    p = np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


def shift(probs: np.ndarray, delta: float) -> np.ndarray:
    """`probs` with every log-odds moved by `delta`."""
    return 1.0 / (1.0 + np.exp(-(logit(probs) + delta)))


def prior_shift(probs: np.ndarray, outcomes: np.ndarray, steps: int = 50) -> float:
    """The log-odds shift after which `probs` average what `outcomes` (0/1, or a share of
    annotators) do: Newton's method on the logistic likelihood of the intercept, which is
    concave, so the root is the maximum."""
    logits, target = logit(probs), float(np.sum(outcomes))
    target = min(max(target, EPS), len(logits) - EPS)  # all 0 or all 1: a finite shift
    delta = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(logits + delta)))
        step = (target - p.sum()) / max(float(np.sum(p * (1 - p))), EPS)
        delta += step
        if abs(step) < 1e-10:
            break
    return delta
