"""Regret against the best fixed cadence, chosen cross-fitted so that it is not flattered.

The best fixed cadence in hindsight (sim.judge.paired.regret) is chosen on the very plays it is
then judged on: among cadences equal in truth, the one whose seeds had the most luck wins, and
every other policy shows a regret against it that is that luck. Cross-fitted, the cadence a seed
is judged against is chosen on the other seeds' weeks only (highest mean weekly AUC, weeks
weighted by their examples), then compared with each policy on the held-out seed. Those
held-out pairs, seeds x weeks, are read like any paired difference (sim.judge.statistics): the
regret, its three intervals and p-value. The best cadence's own regret is no longer 0 by
construction: where another seed would have chosen otherwise, it shows.
"""

from __future__ import annotations

import pandas as pd

from sim.judge.paired import common_seeds, grid, reading_columns, with_holm
from sim.judge.statistics import N_BOOT, read


def chosen_per_seed(scores: pd.DataFrame, cadences: list[str]) -> dict[int, str]:
    """For each seed, the cadence of highest example-weighted mean weekly AUC on the other
    seeds; ValueError below two seeds (nothing to choose on)."""
    seeds = sorted(scores.seed.unique())
    if len(seeds) < 2:
        raise ValueError(f"cross-fitting needs two seeds or more, the scores hold {len(seeds)}")
    played = scores[scores.policy.isin(cadences) & scores.auc.notna()]
    if played.empty:
        raise ValueError(f"no fixed-cadence policy among the scores (of {cadences})")
    weights = played.get("examples", pd.Series(1.0, index=played.index)).fillna(1.0)
    played = played.assign(weighted=played.auc * weights, weight=weights)
    chosen = {}
    for seed in seeds:
        others = played[played.seed != seed].groupby("policy")[["weighted", "weight"]].sum()
        means = others.weighted / others.weight
        # In the order of `cadences` on a tie: the choice must not depend on row order.
        chosen[int(seed)] = str(means.reindex([c for c in cadences if c in means.index]).idxmax())
    return chosen


def held_out_pairs(scores: pd.DataFrame, chosen: dict[int, str], policy: str) -> pd.DataFrame:
    """Per seed, the cadence chosen without it minus `policy`, weekly AUC on that seed: rows of
    (seed, week, diff, examples)."""
    frames = []
    for seed, best in chosen.items():
        own = scores[scores.seed == seed]
        mine = own[own.policy == policy].set_index("week")
        theirs = own[own.policy == best].set_index("week").auc
        both = mine.index.intersection(theirs.index)
        examples = mine.get("examples", pd.Series(1.0, index=mine.index)).fillna(1.0)
        frames.append(
            pd.DataFrame(
                {
                    "seed": seed,
                    "week": both,
                    "diff": theirs[both].to_numpy() - mine.auc[both].to_numpy(),
                    "examples": examples[both].to_numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def cross_fitted_regret(
    scores: pd.DataFrame, cadences: list[str], n_boot: int = N_BOOT
) -> pd.DataFrame:
    """A row per policy: the cadences chosen for the held-out seeds (`best`, e.g. `every-3d
    2/3, every-7d 1/3`), the policy's cross-fitted `regret` (the chosen cadence's mean weekly
    AUC minus the policy's on each held-out seed) with its readings (`reading_columns` with no
    prefix: `low`, `high`, `block_low`... `p`, `p_holm` over the table, `mde`; none for a
    cadence every seed was judged against, its regret 0 against itself). Played on the seeds
    every policy played; empty below two of them. `n_boot`: the block resamples."""
    policies = list(dict.fromkeys(scores.policy))
    shared = common_seeds(scores, policies)
    if shared.seed.nunique() < 2:
        return pd.DataFrame()
    chosen = chosen_per_seed(shared, cadences)
    counts = pd.Series(chosen.values()).value_counts()
    best = ", ".join(f"{c} {n}/{len(chosen)}" for c, n in counts.items())
    rows = []
    for policy in policies:
        if set(chosen.values()) == {policy}:
            # Every seed was judged against this very policy: a regret of 0, no comparison.
            rows.append({"policy": policy, "best": best, "regret": 0.0})
            continue
        pairs = held_out_pairs(shared, chosen, policy)
        reading = read(*grid(pairs), n_boot=n_boot) if len(pairs) else None
        columns = reading_columns("x", reading) if reading else {}
        rows.append(
            {
                "policy": policy,
                "best": best,
                **{k.removeprefix("x_").replace("diff", "regret"): v for k, v in columns.items()},
            }
        )
    return with_holm(pd.DataFrame(rows))
