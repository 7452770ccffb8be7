"""Strategies' paired differences from a baseline over seeds, with Holm-adjusted intervals.

Each seed is one independent replication of the replay (its own draws for every strategy), so
a strategy's difference from the baseline is the mean over seeds of its per-seed difference in
mean weekly AUC, with a seed-level t interval. The comparisons with the baseline are adjusted
by Holm's step-down: the k-th smallest p-value of m is judged at level alpha / (m - k + 1), its
interval drawn at that level, and once one comparison is not rejected, none after it is.
"""

from __future__ import annotations

import math

import pandas as pd
from scipy import stats

from sim.judge.statistics import holm, mde


def seed_means(weeks: pd.DataFrame) -> pd.DataFrame:
    """Mean weekly AUC per seed (rows) and strategy (columns), over the weeks every strategy
    of the seed has an AUC for."""
    wide = weeks.pivot_table(index=["seed", "week"], columns="strategy", values="auc")
    return wide.dropna().groupby(level="seed").mean()


def compare(means: pd.DataFrame, baseline: str, alpha: float = 0.05) -> pd.DataFrame:
    """A row per other strategy: its mean difference from `baseline` over seeds, the Holm
    level and interval, the adjusted decision (`rejected`) and the minimal detectable effect
    at 80% power at that level."""
    if baseline not in means.columns:
        raise ValueError(f"no {baseline!r} column among {sorted(means.columns)}")
    if len(means) < 2:
        raise ValueError(f"paired intervals need two seeds or more, got {len(means)}")
    n, rows = len(means), []
    for name in (c for c in means.columns if c != baseline):
        diff = (means[name] - means[baseline]).to_numpy()
        sd = float(diff.std(ddof=1))
        se = sd / math.sqrt(n)
        t = diff.mean() / se if se > 0 else math.copysign(math.inf, diff.mean())
        p = float(2 * stats.t.sf(abs(t), n - 1))
        rows.append({"strategy": name, "diff": float(diff.mean()), "sd": sd, "p": p})
    table = pd.DataFrame(rows).sort_values("p", ignore_index=True)
    table["p_holm"] = holm(table.p.to_numpy())
    # The k-th smallest of m p-values is judged at alpha / (m - k + 1); its interval and MDE
    # are drawn at that level.
    table["level"] = alpha / (len(table) - table.index)
    se = table.sd / math.sqrt(n)
    half = stats.t.ppf(1 - table.level / 2, n - 1) * se
    return table.assign(
        low=table["diff"] - half,
        high=table["diff"] + half,
        rejected=table.p_holm <= alpha,
        mde=[mde(e, n - 1, alpha=level) for e, level in zip(se, table.level, strict=True)],
        seeds=n,
    )


def winner(table: pd.DataFrame, min_gain: float, baseline: str) -> str:
    """The strategy with the largest difference among those at least `min_gain` better than
    the baseline with their Holm-adjusted interval above 0; else the baseline."""
    beats = table[(table["diff"] >= min_gain) & table.rejected & (table.low > 0)]
    return baseline if beats.empty else str(beats.sort_values("diff").strategy.iloc[-1])
