"""Paired comparisons of retraining policies played over the same weeks with several seeds.

The input is a long table of weekly production scores, a row per (policy, seed, week) with the
columns `policy`, `seed`, `week`, `auc`, `logloss` and `examples` (`weekly_scores` builds it from
each play's `weekly.csv`). Two policies are compared on the (seed, week) pairs both played: the
same days landed and the same seed drawn, so what differs is the policy alone.

Which interval. `paired_difference` gives one reading: Student's t over the weekly means
(`unit="week"`: a week's difference averaged over the seeds) or over the seeds' means over the
weeks (`unit="seed"`), or a percentile bootstrap of those units (`method="bootstrap"`). Weeks
are not independent (a model serves about a week, so a lead persists), and the week reading runs
narrow for it. The report's tables (`differences`) read each difference three ways with
`judge`: the week and seed readings beside a two-level block bootstrap over seeds and blocks of
weeks, weeks weighted by their examples, and a p-value Holm-adjusted over the table
(sim.judge.statistics says how and why).

Regret: each policy's mean weekly AUC below the best fixed cadence in hindsight, the
fixed-cadence policy of highest mean weekly AUC on the same seeds and weeks, with the paired
interval of that difference. Choosing the best on the same data favours it: a regret is read
against a cadence that had the luck of these seeds, and the best's own regret is 0 with no
interval. sim.judge.cross_fit chooses it on the other seeds instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from sim.judge.statistics import Interval, Reading, holm, read, t_interval

COLUMNS = ("policy", "seed", "week", "auc", "logloss", "examples")
Unit = Literal["week", "seed"]
Method = Literal["t", "bootstrap"]


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
    """`a`'s and `b`'s `metric` on every (seed, week) both scored, `diff` = a - b, and the
    week's `examples` (a's; the same days landed in both), 1 where the scores lack them."""
    columns = ["seed", "week", metric, "examples"]
    wide = [
        scores.loc[(scores.policy == p) & scores[metric].notna()]
        .reindex(columns=columns)
        .fillna({"examples": 1.0})
        for p in (a, b)
    ]
    paired = wide[0].merge(
        wide[1].drop(columns="examples"), on=["seed", "week"], suffixes=("_a", "_b")
    )
    return paired.assign(diff=paired[f"{metric}_a"] - paired[f"{metric}_b"])


def grid(paired: pd.DataFrame, value: str = "diff") -> tuple[np.ndarray, np.ndarray]:
    """`value` and the examples of `paired`'s rows as seeds x weeks matrices (NaN and weight 0
    where a (seed, week) was not paired), the weeks in order."""
    values = paired.pivot_table(index="seed", columns="week", values=value, aggfunc="mean")
    weights = paired.pivot_table(index="seed", columns="week", values="examples", aggfunc="sum")
    weights = weights.reindex_like(values).fillna(0.0)
    return values.sort_index(axis=1).to_numpy(), weights.sort_index(axis=1).to_numpy()


def judge(scores: pd.DataFrame, a: str, b: str, metric: str = "auc") -> Reading:
    """`a` minus `b` in `metric` read three ways, weeks weighted by their examples
    (sim.judge.statistics)."""
    paired = pairs(scores, a, b, metric)
    return read(*grid(paired))


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
    paired interval (`low`, `high`); the best's own regret is 0. In-sample: the best chose
    itself on the same plays, which favours it (sim.judge.cross_fit does not)."""
    policies = list(dict.fromkeys(scores.policy))
    shared = common_seeds(scores, policies)
    best = best_cadence(shared, cadences)
    rows = []
    for policy in policies:
        if policy == best:
            # 0 by construction, no interval: chosen on these very plays (see `cross_fitted`).
            nan = float("nan")
            rows.append({"policy": policy, "best": best, "regret": 0.0, "low": nan, "high": nan})
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


def reading_columns(prefix: str, reading: Reading) -> dict[str, float]:
    """A reading's figures as a table's columns: `{prefix}_diff` (weeks weighted by their
    examples), `_low`, `_high` (the week reading), `_block_low`, `_block_high`, `_seed_low`,
    `_seed_high`, `_p` (the block reading's) and `_mde`."""
    return {
        f"{prefix}_diff": reading.estimate,
        f"{prefix}_low": reading.week.low,
        f"{prefix}_high": reading.week.high,
        f"{prefix}_block_low": reading.block.low,
        f"{prefix}_block_high": reading.block.high,
        f"{prefix}_seed_low": reading.seed.low,
        f"{prefix}_seed_high": reading.seed.high,
        f"{prefix}_p": reading.p,
        f"{prefix}_mde": reading.mde,
    }


def with_holm(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with a `<x>_p_holm` beside each `<x>_p`: every p-value of the table one family,
    adjusted by Holm's method (sim.judge.statistics)."""
    found = [c for c in table.columns if c == "p" or c.endswith("_p")]
    if table.empty or not found:
        return table
    adjusted = holm(table[found].to_numpy().ravel()).reshape(len(table), len(found))
    table = table.copy()
    for i, column in enumerate(found):
        table.insert(table.columns.get_loc(column) + 1, f"{column}_holm", adjusted[:, i])
    return table


def differences(scores: pd.DataFrame, against: str) -> pd.DataFrame:
    """A row per other policy: its mean weekly AUC and log loss minus `against`'s, each read
    three ways with its p-value, Holm-adjusted over the table (`reading_columns`), the weeks
    and seeds paired and the seeds in which it was ahead in AUC."""
    rows = []
    for policy in dict.fromkeys(scores.policy):
        if policy == against:
            continue
        ahead = paired_difference(scores, policy, against, "auc")
        rows.append(
            {
                "policy": policy,
                "against": against,
                **reading_columns("auc", judge(scores, policy, against, "auc")),
                **reading_columns("logloss", judge(scores, policy, against, "logloss")),
                "weeks": ahead.weeks,
                "seeds": ahead.seeds,
                "seeds_ahead": ahead.seeds_ahead,
            }
        )
    return with_holm(pd.DataFrame(rows))


def weekly_scores(weekly: dict[tuple[str, int], pd.DataFrame]) -> pd.DataFrame:
    """The long table of `COLUMNS` from each (policy, seed)'s report table `weekly.csv` (its
    `flywheel` column: the production AUC of the champions that policy promoted; `examples`:
    the flights scored that week, 1 in a table without them)."""

    def column(table: pd.DataFrame, name: str, default: float) -> pd.Series:
        return table.get(name, pd.Series(default, index=table.index))

    frames = [
        pd.DataFrame(
            {
                "policy": policy,
                "seed": seed,
                "week": table.week,
                "auc": table.flywheel,
                "logloss": column(table, "flywheel_logloss", np.nan),
                "examples": column(table, "examples", 1.0),
            }
        )
        for (policy, seed), table in weekly.items()
        if len(table)
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
