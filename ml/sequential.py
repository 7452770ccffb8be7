"""A retraining alarm with a known false-alarm rate: a CUSUM on a model's daily excess loss.

The daily statistic is the champion's excess loss on the day's uniformly drawn labels: its log
loss minus the entropy of its own predictions, averaged over the labels. For a calibrated model
the two agree in expectation whatever the day's mix of easy and hard examples, so the statistic
is about 0 while the model holds and rises when its predictions stop matching the outcomes.

The one-sided upper CUSUM (Page, 1954) accumulates the statistic's excess over its in-control
mean less an allowance (half the smallest shift worth detecting) and alarms when the sum
crosses a threshold. The threshold is set from past ordinary days: streams resampled from them in
blocks of consecutive days (which keeps the week-long spells of weather and traffic) must run
`run_length` days on average before a false alarm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPSILON = 1e-7


def excess_loss(y: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Each example's log loss minus the entropy of its predicted distribution: `y` holds 0/1
    outcomes with `probs` the probability of 1, or class indices with `probs` one row of class
    probabilities per example."""
    y = np.asarray(y)
    probs = np.clip(np.asarray(probs, dtype=np.float64), EPSILON, 1 - EPSILON)
    if probs.ndim == 1:
        if len(y) != len(probs):
            raise ValueError(f"{len(y)} outcomes for {len(probs)} probabilities")
        probs = np.column_stack([1 - probs, probs])
        y = y.astype(np.float64).astype(np.int64)
    if probs.shape[0] != len(y):
        raise ValueError(f"{len(y)} outcomes for {probs.shape[0]} rows of probabilities")
    probs = probs / probs.sum(axis=1, keepdims=True)
    loss = -np.log(probs[np.arange(len(y)), y])
    entropy = -(probs * np.log(probs)).sum(axis=1)
    return loss - entropy


@dataclass(frozen=True)
class Cusum:
    """A CUSUM path: the statistic after each day and whether that day alarmed."""

    statistic: np.ndarray
    alarms: np.ndarray


def cusum(increments: np.ndarray, threshold: float) -> Cusum:
    """The upper CUSUM of `increments` (each day's statistic less its in-control mean and the
    allowance): S_t = max(0, S_(t-1) + increment_t), an alarm where S_t > `threshold`, after
    which the sum starts again from 0."""
    statistic = np.zeros(len(increments))
    alarms = np.zeros(len(increments), dtype=bool)
    total = 0.0
    for t, step in enumerate(np.asarray(increments, dtype=np.float64)):
        total = max(0.0, total + step)
        statistic[t] = total
        if total > threshold:
            alarms[t] = True
            total = 0.0
    return Cusum(statistic, alarms)


def _block_streams(
    centred: np.ndarray, block: int, length: int, paths: int, rng: np.random.Generator
) -> np.ndarray:
    """`paths` streams of `length` days, each made of blocks of `block` consecutive days drawn
    from `centred` (circularly, so every day starts as many blocks)."""
    n = len(centred)
    block = max(1, min(block, n))
    starts = rng.integers(0, n, size=(paths, -(-length // block)))
    index = (starts[:, :, None] + np.arange(block)) % n
    return centred[index.reshape(paths, -1)[:, :length]]


def average_run_length(increments: np.ndarray, threshold: float) -> float:
    """The mean first alarm day of the CUSUM over the rows of `increments` (one stream a row),
    a stream with no alarm counted at its length (so the figure is a lower bound)."""
    return _mean_first_alarm(_running_peak(np.atleast_2d(increments)), threshold)


def _mean_first_alarm(peak: np.ndarray, threshold: float) -> float:
    return float((1 + (peak <= threshold).sum(axis=1)).clip(max=peak.shape[1]).mean())


def _running_peak(increments: np.ndarray) -> np.ndarray:
    """Each stream's largest CUSUM so far: the first alarm is where it first tops the threshold
    (before it, the sum never restarted)."""
    sums = np.zeros(increments.shape)
    total = np.zeros(increments.shape[0])
    for t in range(increments.shape[1]):
        total = np.maximum(0.0, total + increments[:, t])
        sums[:, t] = total
    return np.maximum.accumulate(sums, axis=1)


def cusum_threshold(
    reference: np.ndarray,
    allowance: float,
    run_length: float,
    block: int = 7,
    paths: int = 2000,
    seed: int = 0,
) -> float:
    """The smallest threshold whose average run length to a false alarm is at least
    `run_length` days on streams resampled, in blocks of `block` days, from the `reference`
    days' statistics centred on their mean, less `allowance` each day."""
    reference = np.asarray(reference, dtype=np.float64)
    reference = reference[np.isfinite(reference)]
    if len(reference) < 2:
        raise ValueError(f"a threshold needs at least 2 reference days, got {len(reference)}")
    if run_length < 2:
        raise ValueError(f"run_length must be at least 2 days, got {run_length}")
    rng = np.random.default_rng(seed)
    length = int(10 * run_length)
    streams = _block_streams(reference - reference.mean(), block, length, paths, rng)
    peak = _running_peak(streams - allowance)
    # The run length grows with the threshold: the smallest one is the quantile of the peaks at
    # which the mean first-passage time reaches `run_length`; found by bisection on the peaks.
    candidates = np.unique(peak[:, -1])
    low, high = 0, len(candidates) - 1
    while low < high:
        middle = (low + high) // 2
        if _mean_first_alarm(peak, candidates[middle]) >= run_length:
            high = middle
        else:
            low = middle + 1
    return float(candidates[low])
