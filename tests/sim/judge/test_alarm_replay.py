"""The excess-loss alarm on a replayed world (sim.judge.alarm_replay)."""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd

from pipelines.task.thresholds import MonitoringSpec
from sim.judge.alarm_replay import EPOCH, alarms, concept_break, daily_excess, first_alarm_after
from sim.judge.selection_screen import ScreenConfig, World
from tests.sim.judge.test_selection_screen import FEATURES, synthetic_world

CONFIG = ScreenConfig(budget=40, max_iter=20, scored_from=date(2013, 4, 8))
# A short memory, so that a month's world arms the alarm.
QUICK = MonitoringSpec(
    alarm_history_days=20, alarm_recent_days=3, alarm_min_history_days=8, alarm_run_length=30
)


def world(days: int = 35) -> World:
    return World(synthetic_world(days=days, per_day=120), FEATURES, "flight_date")


def test_each_delivery_day_after_the_first_model_gives_its_labels_excess_loss() -> None:
    table = daily_excess(world(21), seed=0, config=CONFIG)
    # The first model is fitted on the first week's labels; the second week's come in a day on.
    assert table.monitored_on.min() == date(2013, 4, 9)
    assert len(table) == 14 and (table.labels == 40).all()  # the days of 04-08 to 04-21
    assert np.isfinite(table.excess_loss).all() and abs(table.excess_loss.mean()) < 0.2


def test_the_concept_break_flips_the_carriers_on_time_flights_from_its_day_only() -> None:
    replayed = world()
    broken = concept_break(replayed, "B6", date(2013, 4, 20))
    changed = np.flatnonzero(broken.labels != replayed.labels)
    carriers = replayed.examples.carrier.to_numpy()
    assert len(changed) > 20
    assert (carriers[changed] == "B6").all() and (replayed.labels[changed] == 0).all()
    assert (broken.labels[changed] == 1).all()
    assert (replayed.days[changed] >= (date(2013, 4, 20) - EPOCH).days).all()
    assert replayed.labels.sum() < broken.labels.sum()  # the world it came from is unchanged


def test_a_planted_break_raises_the_alarm_within_days() -> None:
    replayed = world()
    broken = concept_break(replayed, "B6", date(2013, 4, 24))
    # Every B6 flight late from the break: a step far above the days' spread.
    b6 = (replayed.examples.carrier == "B6").to_numpy()
    broken.labels[b6 & (replayed.days >= (date(2013, 4, 24) - EPOCH).days)] = 1
    verdicts = alarms(broken, seed=0, config=CONFIG, monitoring=QUICK)
    armed = verdicts[~verdicts.status.str.startswith("not armed")]
    assert len(armed) and armed.monitored_on.min() < date(2013, 4, 24)
    # The labels of the break's days come in a day later; their excess stands far above before.
    after = pd.Series(verdicts.monitored_on) > date(2013, 4, 24)
    assert verdicts.excess_loss[after].mean() > verdicts.excess_loss[~after].mean() + 0.1
    first = first_alarm_after(verdicts, date(2013, 4, 24))
    assert first is not None and (first - date(2013, 4, 24)).days <= 4
