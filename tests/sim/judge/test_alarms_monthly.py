"""Alarms of a monthly task with ten ordered classes, judged over the next three months."""

from datetime import date

import numpy as np
import pandas as pd
import pytest

from pipelines.task.cadence import next_start
from sim.judge import alarms
from sim.judge.examples import Judged

JUDGED = Judged.of("movielens")
PER_MONTH = 300


def months() -> list[date]:
    starts = [date(2000, 1, 1)]
    while len(starts) < 12:
        starts.append(next_start(starts[-1], "monthly"))
    return starts


@pytest.fixture
def ratings() -> pd.DataFrame:
    """300 ratings a month of 2000, dated by their month's first day; `signal` predicts the
    stars, `noise` does not. Version 1 scored January to June, version 2 the rest."""
    rng = np.random.default_rng(0)
    n = PER_MONTH * 12
    signal = rng.normal(size=n)
    latent = signal + 0.5 * rng.normal(size=n)
    cuts = np.quantile(latent, np.linspace(0, 1, len(JUDGED.classes) + 1)[1:-1])
    return pd.DataFrame(
        {
            "rating_id": np.arange(n),
            "rating_month": np.repeat(months(), PER_MONTH),
            "signal": signal,
            "noise": rng.normal(size=n),
            "rating": np.asarray(JUDGED.classes)[np.searchsorted(cuts, latent)],
            "model_version": np.where(np.arange(n) < PER_MONTH * 6, 1, 2),
        }
    )


def scorer(version: int, frame: pd.DataFrame) -> np.ndarray:
    """Version 2 puts its ten probabilities around the stars the signal says; every other
    version around those the noise says."""
    score = (frame.signal if version == 2 else frame.noise).to_numpy()
    center = (len(JUDGED.classes) - 1) / (1 + np.exp(-1.5 * score))
    weights = np.exp(-((np.arange(len(JUDGED.classes)) - center[:, None]) ** 2) / 2)
    return weights / weights.sum(axis=1, keepdims=True)


def test_a_monthly_retraining_is_judged_over_the_next_three_months(ratings) -> None:
    plan = pd.DataFrame(
        [
            ("2000-03-01", "drift", 2),  # the signal against the noise: right, and a hit
            ("2000-04-01", "performance", 3),  # the noise against the noise: wrong
            # The day before its tick (on July 1), when June was the newest month played:
            # judged from July on, against June's champion (July was scored by version 2).
            ("2000-06-30", "schedule", 2),
            ("2000-07-09", "schedule", 2),  # the same, had the tick been a Monday's (July 10)
            ("2000-10-01", "drift", 3),  # two months left: judged, the noise against the signal
            ("2000-11-01", "drift", 3),  # one month left: too late to judge
        ],
        columns=["event_day", "trigger", "version"],
    )
    plan["champion"] = alarms.champions(plan, ratings, JUDGED)
    assert list(plan.champion) == [1, 1, 1, 1, 2, 2]

    judged = alarms.judge(plan, ratings, scorer, JUDGED, months()[-1])

    assert list(judged.judged_examples.fillna(0)) == [900, 900, 900, 900, 600, 0]
    assert judged.gain.iloc[0] > alarms.MISSED and judged.gain.iloc[2] > alarms.MISSED
    assert judged.gain.iloc[3] == judged.gain.iloc[2]
    assert judged.gain.iloc[1] == 0 and judged.gain.iloc[4] < 0
    # The gain is in the report's macro AUC over the ten classes.
    july_to_september = ratings[ratings.rating_month.between(months()[6], months()[8])]
    assert judged.challenger_auc.iloc[2] == JUDGED.auc(
        july_to_september.rating.to_numpy(), scorer(2, july_to_september)
    )
    summary = alarms.summarize(judged, alarms.HORIZONS["monthly"])
    assert (summary.alarms, summary.judged, summary.right, summary.hits) == (4, 3, 1, 1)
    assert list(summary.missed.event_day) == ["2000-06-30", "2000-07-09"]
    assert "over the next 3 months" in summary.describe()


def test_a_daily_task_keeps_its_fourteen_days_judged_once_seven_are_played() -> None:
    assert alarms.HORIZONS["daily"] == alarms.Horizon(14, 7, "days")
    flights = Judged.of("flights").task
    days = pd.Series(pd.date_range("2013-03-01", "2013-03-31").date)
    window = alarms.judged_window(days, "2013-03-05", date(2013, 3, 31), flights, trigger="drift")
    assert list(days[window]) == list(pd.date_range("2013-03-06", "2013-03-19").date)
    # The schedule's event day is the Sunday before its tick: the same days after it.
    sunday = alarms.judged_window(
        days, "2013-03-10", date(2013, 3, 31), flights, trigger="schedule"
    )
    assert list(days[sunday]) == list(pd.date_range("2013-03-11", "2013-03-24").date)
    assert alarms.judged_window(days, "2013-03-05", date(2013, 3, 12), flights) is not None
    assert alarms.judged_window(days, "2013-03-05", date(2013, 3, 11), flights) is None
