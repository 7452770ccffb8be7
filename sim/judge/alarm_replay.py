"""The excess-loss alarm on the replayed year: how often it fires on ordinary days, and how soon
after a planted concept break.

The selection screen's replay (sim.judge.selection_screen: uniform labels, the reference learner
refitted every 7 days as the weekly schedule would) gives each day's labels with the scores they
were served; the pipeline's own alarm (pipelines.monitoring.replay_alarm) judges each delivery
day's mean excess loss over them. The alarm watches here: its alarms do not retrain.
"""

from __future__ import annotations

import copy
from datetime import date, timedelta

import numpy as np
import pandas as pd

from ml.sequential import excess_loss
from pipelines.monitoring import replay_alarm
from pipelines.task.thresholds import MonitoringSpec
from sim.judge.selection_screen import ScreenConfig, World, replay
from sim.world.drift import PlantedDrift

EPOCH = date(1970, 1, 1)


def daily_excess(world: World, seed: int, config: ScreenConfig) -> pd.DataFrame:
    """A row per delivery day with labels of scored flights: the day (`monitored_on`), how many
    labels came in (`labels`) and their mean excess loss (`excess_loss`)."""
    delivered: list[tuple[int, np.ndarray, np.ndarray]] = []
    replay(
        world, "uniform", seed, config, lambda rows, s, known: delivered.append((known, rows, s))
    )
    rows = []
    for known, picked, scores in delivered:
        scored = np.isfinite(scores)
        if scored.any():
            loss = excess_loss(world.labels[picked][scored], scores[scored])
            day = EPOCH + timedelta(days=int(known))
            rows.append(
                {"monitored_on": day, "labels": int(scored.sum()), "excess_loss": loss.mean()}
            )
    return pd.DataFrame(rows)


def alarms(
    world: World, seed: int, config: ScreenConfig, monitoring: MonitoringSpec
) -> pd.DataFrame:
    """The alarm's verdict on each delivery day of the replay under `seed`."""
    days = daily_excess(world, seed, config)
    return replay_alarm(days["monitored_on"], days["excess_loss"], monitoring)


def concept_break(world: World, carrier: str, start: date) -> World:
    """`world` with the outcomes the simulator's concept break `concept:CARRIER@START` gives
    (sim.world.drift.PlantedDrift.outcome: the same flights flip)."""
    drift = PlantedDrift(start, "concept", carrier)
    broken = copy.copy(world)
    broken.labels = np.array(
        [
            drift.outcome("flights", i, bool(y))
            for i, y in zip(world.ids, world.labels, strict=True)
        ],
        dtype=world.labels.dtype,
    )
    return broken


def first_alarm_after(verdicts: pd.DataFrame, start: date) -> date | None:
    """The first day on or after `start` the alarm fired, if any."""
    fired = verdicts.loc[verdicts.is_alarm & (verdicts.monitored_on >= start), "monitored_on"]
    return fired.min() if len(fired) else None
