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
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from pipelines.defs.monitoring.triggers import ALARM_TRIGGERS
from sim.judge.alarms import CADENCE_TRIGGER, WORTH

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
        alarms = {s: _judged(runs[(policy, s)], set(ALARM_TRIGGERS)) for s in seeds}
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
            }
        )
    return pd.DataFrame(rows)
