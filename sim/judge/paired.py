"""Paired comparisons of retraining policies played over the same weeks with several seeds.

The input is a long table of weekly production scores, a row per (policy, seed, week) with the
columns `policy`, `seed`, `week`, `auc` and `logloss` (`weekly_scores` builds it from each play's
`weekly.csv`). Two policies are compared on the (seed, week) pairs both played: the same days
landed and the same seed drawn, so what differs is the policy alone.

Which interval, and why. A weekly difference is first averaged over the seeds (training and
label sampling noise of that week), then the interval is Student's t over those weekly means
(`unit="week"`, the default): the weeks are the replications a reader of the weekly table sees,
and with the 7 to 24 weeks of a comparison a t-interval keeps its coverage where a percentile
bootstrap runs narrow (it undercovers below about 20 units). Weeks are not independent, though:
a model serves several weeks, so one policy's lead persists. `unit="seed"` reads the same
differences the other way, one mean over the weeks per seed and a t-interval over the seeds:
the span's weeks held fixed, the plays' randomness alone as the replication. With 3 seeds it
has 2 degrees of freedom and is wide; a difference both readings put away from 0 is one to
believe. `method="bootstrap"` resamples the units instead (seeded, 10,000 resamples, the
percentile interval), for many units with skewed differences.

Regret: each policy's mean weekly AUC below the best fixed cadence in hindsight, the
fixed-cadence policy of highest mean weekly AUC on the same seeds and weeks, with the paired
interval of that difference. Choosing the best on the same data favours it: a regret is read
against a cadence that had the luck of these seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats

COLUMNS = ("policy", "seed", "week", "auc", "logloss")
Unit = Literal["week", "seed"]
Method = Literal["t", "bootstrap"]


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


@dataclass(frozen=True)
class Difference:
    """`a` minus `b` in `metric` over their paired weeks and seeds: the interval over the
    chosen units, how many weeks and seeds were paired, and in how many seeds `a` was ahead
    (its mean over the weeks above `b`'s; below for log loss)."""

    a: str
    b: str
    metric: str
    interval: Interval
    weeks: int
    seeds: int
    seeds_ahead: int


def t_interval(values: np.ndarray, confidence: float = 0.95) -> Interval:
    """The mean of `values` and Student's t-interval for it."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else float("nan")
    if n < 2:
        return Interval(mean, float("nan"), float("nan"), n)
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * values.std(ddof=1) / np.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def bootstrap_interval(
    values: np.ndarray, confidence: float = 0.95, n_boot: int = 10_000, seed: int = 0
) -> Interval:
    """The mean of `values` and its percentile bootstrap interval (`n_boot` resamples)."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else float("nan")
    if n < 2:
        return Interval(mean, float("nan"), float("nan"), n)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Interval(mean, float(low), float(high), n)


def pairs(scores: pd.DataFrame, a: str, b: str, metric: str = "auc") -> pd.DataFrame:
    """`a`'s and `b`'s `metric` on every (seed, week) both scored, and `diff` = a - b."""
    wide = [
        scores.loc[(scores.policy == p) & scores[metric].notna(), ["seed", "week", metric]]
        for p in (a, b)
    ]
    paired = wide[0].merge(wide[1], on=["seed", "week"], suffixes=("_a", "_b"))
    return paired.assign(diff=paired[f"{metric}_a"] - paired[f"{metric}_b"])


def paired_difference(
    scores: pd.DataFrame,
    a: str,
    b: str,
    metric: str = "auc",
    unit: Unit = "week",
    method: Method = "t",
    confidence: float = 0.95,
) -> Difference:
    """`a` minus `b` in `metric` with its interval over `unit`s (see the module's docstring)."""
    paired = pairs(scores, a, b, metric)
    units = paired.groupby(unit)["diff"].mean().to_numpy()
    interval = (
        t_interval(units, confidence) if method == "t" else bootstrap_interval(units, confidence)
    )
    per_seed = paired.groupby("seed")["diff"].mean()
    ahead = int((per_seed < 0).sum() if metric == "logloss" else (per_seed > 0).sum())
    return Difference(a, b, metric, interval, paired.week.nunique(), paired.seed.nunique(), ahead)


def common_seeds(scores: pd.DataFrame, policies: list[str]) -> pd.DataFrame:
    """The rows of the seeds every one of `policies` played: the same seeds for all."""
    seeds = [set(scores.seed[scores.policy == p]) for p in policies]
    shared = set.intersection(*seeds) if seeds else set()
    return scores[scores.seed.isin(shared) & scores.policy.isin(policies)]


def best_cadence(scores: pd.DataFrame, cadences: list[str]) -> str:
    """The fixed-cadence policy of highest mean weekly AUC on the seeds all of them played."""
    played = [c for c in cadences if (scores.policy == c).any()]
    if not played:
        raise ValueError(f"no fixed-cadence policy among the scores (of {cadences})")
    shared = common_seeds(scores, played)
    means = shared.groupby("policy")["auc"].mean()
    return str(means[played].idxmax())


def regret(
    scores: pd.DataFrame, cadences: list[str], unit: Unit = "week", confidence: float = 0.95
) -> pd.DataFrame:
    """A row per policy: the best fixed cadence in hindsight (`best`), the policy's `regret`
    (the best's mean weekly AUC minus the policy's, on the seeds all policies played) and its
    paired interval (`low`, `high`); the best's own regret is 0."""
    policies = list(dict.fromkeys(scores.policy))
    shared = common_seeds(scores, policies)
    best = best_cadence(shared, cadences)
    rows = []
    for policy in policies:
        if policy == best:
            rows.append({"policy": policy, "best": best, "regret": 0.0, "low": 0.0, "high": 0.0})
            continue
        interval = paired_difference(shared, best, policy, "auc", unit, confidence=confidence)
        rows.append(
            {
                "policy": policy,
                "best": best,
                "regret": interval.interval.estimate,
                "low": interval.interval.low,
                "high": interval.interval.high,
            }
        )
    return pd.DataFrame(rows)


def differences(
    scores: pd.DataFrame, against: str, unit: Unit = "week", confidence: float = 0.95
) -> pd.DataFrame:
    """A row per other policy: its mean weekly AUC and log loss minus `against`'s, each with
    its interval, the weeks and seeds paired and the seeds in which it was ahead in AUC."""
    rows = []
    for policy in dict.fromkeys(scores.policy):
        if policy == against:
            continue
        auc = paired_difference(scores, policy, against, "auc", unit, confidence=confidence)
        loss = paired_difference(scores, policy, against, "logloss", unit, confidence=confidence)
        rows.append(
            {
                "policy": policy,
                "against": against,
                "auc_diff": auc.interval.estimate,
                "auc_low": auc.interval.low,
                "auc_high": auc.interval.high,
                "logloss_diff": loss.interval.estimate,
                "logloss_low": loss.interval.low,
                "logloss_high": loss.interval.high,
                "weeks": auc.weeks,
                "seeds": auc.seeds,
                "seeds_ahead": auc.seeds_ahead,
            }
        )
    return pd.DataFrame(rows)


def weekly_scores(weekly: dict[tuple[str, int], pd.DataFrame]) -> pd.DataFrame:
    """The long table of `COLUMNS` from each (policy, seed)'s report table `weekly.csv` (its
    `flywheel` column: the production AUC of the champions that policy promoted)."""
    frames = [
        pd.DataFrame(
            {
                "policy": policy,
                "seed": seed,
                "week": table.week,
                "auc": table.flywheel,
                "logloss": table.get("flywheel_logloss", pd.Series(np.nan, index=table.index)),
            }
        )
        for (policy, seed), table in weekly.items()
        if len(table)
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
