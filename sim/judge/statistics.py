"""How the policy comparison reads a paired difference: three intervals, a p-value, an MDE.

A comparison holds, per seed, a series of weekly differences between two policies. Two things
make the weeks poor replications: a model serves about a week, so a lead persists from one week
to the next (the weekly differences are autocorrelated), and the seeds are few (3). Three
readings of the same differences are given side by side:

- the week reading: Student's t over the weekly means (a week's difference averaged over the
  seeds), as if weeks were independent; it runs narrow when they are not;
- the seed reading: Student's t over the seeds' means over the weeks: the weeks held fixed, the
  plays' randomness the replication; with 3 seeds, 2 degrees of freedom and wide;
- the block reading: a two-level bootstrap, the seeds drawn with replacement, then moving
  blocks of `block_length(weeks)` consecutive weeks (the same weeks for every drawn seed, so a
  week's shared ups and downs stay together). Its standard error (the resampled means' spread)
  makes the interval: estimate +- t * SE, t on (weeks // block - 1) degrees of freedom, the
  independent blocks being the replications (as in batch means): percentiles of so few
  blocks run narrow. Blocks keep the weeks' dependence within a block, so this is the interval
  the report leads with. Each reading's coverage on planted, autocorrelated weeks
  (tests/sim/judge/test_statistics.py) is in docs/benchmarks.md.

Weeks are weighted by their examples (flights scored that week) in the estimate and in every
reading; a table without an `examples` column weighs each week 1.

The p-value is the block reading's: two-sided, of estimate / SE on the same t distribution, so
that it is below alpha exactly when the block interval excludes 0. It comes from the block
bootstrap rather than the week reading because it keeps the weeks' dependence the week reading
ignores. Within a family of comparisons (one table of the report) the p-values are adjusted by
Holm's step-down method, which holds the chance of any false finding in the family at alpha
whatever their dependence.

The minimal detectable effect: the true difference a two-sided test at `alpha` would find with
80% power, given the block bootstrap's standard error: (t_{1-alpha/2} + t_{0.8}) * SE, on the
block reading's degrees of freedom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

N_BOOT = 10_000
POWER = 0.8
ALPHA = 0.05


@dataclass(frozen=True)
class Interval:
    """A mean over `n` units and its confidence interval (NaN bounds below two units)."""

    estimate: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        """Whether the whole interval lies on one side of 0."""
        return bool(self.low > 0 or self.high < 0)


def t_interval(values: np.ndarray, confidence: float = 0.95) -> Interval:
    """The mean of `values` and Student's t-interval for it."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else float("nan")
    if n < 2:
        return Interval(mean, float("nan"), float("nan"), n)
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * values.std(ddof=1) / np.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def block_length(weeks: int) -> int:
    """The moving blocks' length for `weeks` weeks: ceil(weeks^(1/3)), the order that balances
    the bootstrap variance's bias and spread (Hall, Horowitz and Jing, 1995): 2 for 7 weeks, 3
    for 24, 4 for 37."""
    return max(1, math.ceil(weeks ** (1 / 3) - 1e-9))


def weighted_t_interval(
    values: np.ndarray, weights: np.ndarray, confidence: float = 0.95
) -> Interval:
    """The `weights`-weighted mean of `values` and its t-interval (the usual one when the
    weights are equal)."""
    values, weights = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    n = len(values)
    if n == 0 or weights.sum() <= 0:
        return Interval(float("nan"), float("nan"), float("nan"), n)
    mean = float(np.average(values, weights=weights))
    if n < 2:
        return Interval(mean, float("nan"), float("nan"), n)
    share = weights / weights.sum()
    se = math.sqrt(n / (n - 1) * float(np.sum(share**2 * (values - mean) ** 2)))
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * se
    return Interval(mean, mean - half, mean + half, n)


def block_indices(
    seeds: int, weeks: int, n_boot: int = N_BOOT, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """`n_boot` two-level resamples of a seeds x weeks table, as index arrays of shapes
    (n_boot, seeds, 1) and (n_boot, 1, weeks): seeds with replacement, then moving blocks of
    `block_length(weeks)` consecutive weeks, the same weeks for every drawn seed."""
    block = block_length(weeks)
    rng = np.random.default_rng(seed)
    drawn_seeds = rng.integers(0, seeds, size=(n_boot, seeds))
    starts = rng.integers(0, weeks - block + 1, size=(n_boot, math.ceil(weeks / block)))
    drawn_weeks = (starts[:, :, None] + np.arange(block)).reshape(n_boot, -1)[:, :weeks]
    return drawn_seeds[:, :, None], drawn_weeks[:, None, :]


def block_means(
    diff: np.ndarray, weights: np.ndarray, n_boot: int = N_BOOT, seed: int = 0
) -> np.ndarray:
    """The weighted mean of `diff` (seeds x weeks, weight 0 where a cell was not played) in
    each of `n_boot` resamples (`block_indices`); resamples of no weight left out."""
    rows, cols = block_indices(*diff.shape, n_boot, seed)
    w = weights[rows, cols]
    total = w.sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (diff[rows, cols] * w).sum(axis=(1, 2)) / total
    return means[total > 0]


def block_reading(
    estimate: float, resampled: np.ndarray, weeks: int, confidence: float = 0.95
) -> tuple[Interval, float, float, float]:
    """From an estimate over `weeks` weeks and its block resamples: the block interval
    (estimate +- t * SE on `block_df(weeks)`), the standard error, the two-sided p-value and
    the minimal detectable effect."""
    resampled = resampled[~np.isnan(resampled)]
    if len(resampled) < 2 or np.isnan(estimate):
        nan = float("nan")
        return Interval(estimate, nan, nan, len(resampled)), nan, nan, nan
    se = float(resampled.std(ddof=1))
    df = block_df(weeks)
    half = stats.t.ppf(0.5 + confidence / 2, df) * se
    block = Interval(estimate, estimate - half, estimate + half, len(resampled))
    p = float(2 * stats.t.sf(abs(estimate) / se, df)) if se > 0 else float(estimate == 0)
    return block, se, p, mde(se, df)


@dataclass(frozen=True)
class Reading:
    """A paired difference read three ways (see the module): its weighted estimate, the week,
    seed and block intervals, the block bootstrap's standard error, two-sided p-value and the
    minimal detectable effect at `ALPHA` and 80% power."""

    estimate: float
    week: Interval
    seed: Interval
    block: Interval
    se: float
    p: float
    mde: float
    weeks: int
    seeds: int


def read(
    diff: np.ndarray,
    weights: np.ndarray,
    confidence: float = 0.95,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> Reading:
    """The readings of `diff` (seeds x weeks, NaN where not paired) weighted by `weights`."""
    diff = np.asarray(diff, dtype=float)
    weights = np.where(np.isnan(diff), 0.0, np.asarray(weights, dtype=float))
    diff = np.nan_to_num(diff)
    played_weeks, played_seeds = weights.sum(axis=0) > 0, weights.sum(axis=1) > 0
    diff, weights = diff[played_seeds][:, played_weeks], weights[played_seeds][:, played_weeks]
    seeds, weeks = diff.shape
    nan = Interval(float("nan"), float("nan"), float("nan"), 0)
    if seeds == 0 or weeks == 0:
        return Reading(float("nan"), nan, nan, nan, *[float("nan")] * 3, weeks, seeds)
    week_w = weights.sum(axis=0)
    week = weighted_t_interval((diff * weights).sum(axis=0) / week_w, week_w, confidence)
    per_seed = (diff * weights).sum(axis=1) / weights.sum(axis=1)
    seed_reading = t_interval(per_seed, confidence)
    estimate = week.estimate
    if weeks < 2 and seeds < 2:
        return Reading(estimate, week, seed_reading, nan, *[float("nan")] * 3, weeks, seeds)
    means = block_means(diff, weights, n_boot, seed)
    block, se, p, smallest = block_reading(estimate, means, weeks, confidence)
    return Reading(estimate, week, seed_reading, block, se, p, smallest, weeks, seeds)


def block_df(weeks: int) -> int:
    """The block reading's degrees of freedom: the whole blocks in `weeks`, less one (at
    least 1)."""
    return max(1, weeks // block_length(weeks) - 1)


def mde(se: float, df: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true difference a two-sided test at `alpha` finds with `power`, for an
    estimate of standard error `se` on `df` degrees of freedom: (t_{1-alpha/2} + t_power) * se."""
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * se)


def holm(p_values: np.ndarray | list[float]) -> np.ndarray:
    """Holm's step-down adjustment of a family's p-values, in their order: the k-th smallest
    times (m - k + 1), made non-decreasing in that order and capped at 1; NaN stays NaN and does
    not count in m."""
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full(p.shape, np.nan)
    known = np.flatnonzero(~np.isnan(p))
    order = known[np.argsort(p[known], kind="stable")]
    m = len(order)
    steps = p[order] * (m - np.arange(m))
    adjusted[order] = np.minimum(np.maximum.accumulate(steps), 1.0)
    return adjusted
