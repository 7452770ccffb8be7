"""Alarms judged against a fixed cadence: lift over its base rate, with recall.

An alarm's precision alone rewards firing rarely, and its meaning moves with how often the loop
retrains: where retrainings are frequent, fewer of them can gain. A comparison that plays a
fixed cadence beside the alarm policies gives the base rate: the share of the cadence's
retrainings whose challenger beat its champion by `WORTH` AUC over the next two weeks
(sim.judge.alarms judges every retraining so). Per alarm policy, over its seeds:

- precision: the share of its alarms' retrainings that did (drift and performance triggers);
- lift: that precision over the cadence's base rate (1: no better than retraining on the
  calendar; the target is 1.5);
- recall: of the cadence's retrainings that gained, in the same seed, the share the alarm
  policy matched with an alarm retraining within the cadence's period before it (a week for
  `every-7d`): when retraining paid off, did an alarm fire.

A gain of `WORTH` judged on one window can be the window's luck. Where the retrainings carry
their gain's standard error (`gain_se`, by resampling the window's days), the same precision,
base rate and lift are given again with a retraining counted as gaining only when its gain is
clear of that noise: its 95% interval above 0 (`precision_clear`, `base_rate_clear`,
`lift_clear`).

Whether the alarms beat the calendar is read as precision minus base rate over the same seeds
(`precision_minus_base`), with the block reading of sim.judge.statistics: the seeds drawn with
replacement, then blocks of consecutive weeks of retrainings (a week's retrainings share its
champion and data), the rates recomputed in each resample. Its p-value is Holm-adjusted over the
table's alarm policies.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd

from pipelines.task.thresholds import ALARMS
from sim.judge.alarms import CADENCE_TRIGGER, WORTH
from sim.judge.statistics import block_indices, block_reading, holm

Z95 = 1.96


def _judged(runs: pd.DataFrame, triggers: set[str]) -> pd.DataFrame:
    if runs.empty or "gain" not in runs:
        return runs.iloc[:0]
    chosen = runs[runs.trigger.isin(triggers) & runs.gain.notna()]
    return chosen.assign(event_day=pd.to_datetime(chosen.event_day))


def _clear(judged: pd.DataFrame) -> pd.Series:
    """Whether each judged retraining's gain is clear of its judgement's noise (see the
    module); NaN without its standard error."""
    if "gain_se" not in judged:
        return pd.Series(float("nan"), index=judged.index)
    return (judged.gain > Z95 * judged.gain_se).where(judged.gain_se.notna())


def _lift(precision: float, rate: float) -> float:
    return precision / rate if rate > 0 else float("nan")


def _counts(judged: dict[int, pd.DataFrame], weeks: pd.DatetimeIndex) -> np.ndarray:
    """Per seed (rows, in `judged`'s order) and week: retrainings judged and those that gained
    `WORTH`, shape (2, seeds, weeks)."""
    counts = np.zeros((2, len(judged), len(weeks)))
    for i, runs in enumerate(judged.values()):
        days = pd.to_datetime(runs.event_day)
        at = weeks.get_indexer(days.dt.to_period("W-SUN").dt.start_time)
        np.add.at(counts[0, i], at, 1)
        np.add.at(counts[1, i], at, (runs.gain >= WORTH).to_numpy(dtype=float))
    return counts


def beyond_base(alarms: dict[int, pd.DataFrame], base: dict[int, pd.DataFrame]) -> dict:
    """Precision minus the base rate over the seeds of `alarms` (judged alarm retrainings by
    seed; `base`: the cadence's), with its block interval, p-value and minimal detectable
    effect (see the module)."""
    seeds = list(alarms)
    both = pd.concat([*alarms.values(), *(base[s] for s in seeds)], ignore_index=True)
    mondays = pd.to_datetime(both.event_day).dt.to_period("W-SUN").dt.start_time
    weeks = pd.date_range(mondays.min(), mondays.max(), freq="7D")
    a, c = _counts(alarms, weeks), _counts({s: base[s] for s in seeds}, weeks)

    def rate(counts: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        judged, gained = counts[0].sum(axis=axes), counts[1].sum(axis=axes)
        with np.errstate(invalid="ignore", divide="ignore"):
            return gained / judged

    estimate = float(rate(a, (0, 1)) - rate(c, (0, 1)))
    rows, cols = block_indices(len(seeds), len(weeks))
    resampled = rate(a[:, rows, cols], (1, 2)) - rate(c[:, rows, cols], (1, 2))
    block, _, p, mde = block_reading(estimate, resampled, len(weeks))
    name = "precision_minus_base"
    return {
        name: estimate,
        f"{name}_block_low": block.low,
        f"{name}_block_high": block.high,
        f"{name}_p": p,
        f"{name}_mde": mde,
    }


def alarm_lift(runs: dict[tuple[str, int], pd.DataFrame], cadence: str, period_days: int):
    """A row per alarm policy among `runs` (each (policy, seed)'s judged retrainings, the
    report's `retrainings.csv`): alarms judged, precision, the `cadence` policy's base rate,
    lift, and recall against that cadence (see the module). Empty without the cadence."""
    base = {seed: _judged(r, {CADENCE_TRIGGER}) for (p, seed), r in runs.items() if p == cadence}
    if not base:
        return pd.DataFrame()
    pooled = pd.concat(base.values(), ignore_index=True)
    rate = float((pooled.gain >= WORTH).mean()) if len(pooled) else float("nan")
    rate_clear = float(_clear(pooled).mean()) if len(pooled) else float("nan")
    rows = []
    for policy in dict.fromkeys(p for p, _ in runs):
        seeds = [s for p, s in runs if p == policy and s in base]
        alarms = {s: _judged(runs[(policy, s)], set(ALARMS)) for s in seeds}
        fired = pd.concat(alarms.values(), ignore_index=True) if alarms else pd.DataFrame()
        if policy == cadence or fired.empty:
            continue
        precision = float((fired.gain >= WORTH).mean())
        precision_clear = float(_clear(fired).mean())
        worthy = matched = 0
        for seed in seeds:
            gained = base[seed][base[seed].gain >= WORTH]
            days = alarms[seed].event_day
            for day in gained.event_day:
                worthy += 1
                window = (days > day - timedelta(days=period_days)) & (days <= day)
                matched += bool(window.any())
        rows.append(
            {
                "policy": policy,
                "alarms_judged": len(fired),
                "precision": precision,
                "base_rate": rate,
                "lift": _lift(precision, rate),
                "recall": matched / worthy if worthy else float("nan"),
                "cadence_gains": worthy,
                "precision_clear": precision_clear,
                "base_rate_clear": rate_clear,
                "lift_clear": _lift(precision_clear, rate_clear),
                **beyond_base(alarms, base),
            }
        )
    table = pd.DataFrame(rows)
    if len(table):
        p = table.precision_minus_base_p
        table.insert(table.columns.get_loc(p.name) + 1, f"{p.name}_holm", holm(p.to_numpy()))
    return table
