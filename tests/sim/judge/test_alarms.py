"""Alarms judged on a planted case: which retrainings were worth it over the next 14 days."""

from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest

from sim.judge import alarms
from sim.judge.examples import Judged

START = date(2013, 3, 1)
DAYS = 40
JUDGED = Judged.of("flights")


@pytest.fixture
def flights() -> pd.DataFrame:
    """200 flights a day; `signal` predicts lateness, `noise` does not. Version 1 (the champion
    of the first 20 days) and version 3 read the noise, version 2 the signal."""
    rng = np.random.default_rng(0)
    n = 200 * DAYS
    signal = rng.normal(size=n)
    days = [START + timedelta(days=int(i)) for i in np.repeat(np.arange(DAYS), 200)]
    return pd.DataFrame(
        {
            "flight_id": np.arange(n),
            "flight_date": pd.to_datetime(days),
            "signal": signal,
            "noise": rng.normal(size=n),
            "is_late": rng.random(n) < 1 / (1 + np.exp(-2 * signal)),
            "model_version": np.where(np.arange(n) < 200 * 20, 1, 2),
        }
    )


def runs(*rows: tuple[str, str, object]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["event_day", "trigger", "version"])


class Scorer:
    """Version 2 ranks by the signal; every other version by the noise. Counts what it scored."""

    def __init__(self) -> None:
        self.scored: dict[int, list[int]] = {}

    def __call__(self, version: int, frame: pd.DataFrame) -> np.ndarray:
        self.scored.setdefault(version, []).extend(frame.flight_id)
        column = frame.signal if version == 2 else frame.noise
        return 1 / (1 + np.exp(-column.to_numpy()))


def test_the_champion_is_the_version_that_scored_the_event_day(flights: pd.DataFrame) -> None:
    plan = runs(("2013-02-27", "bootstrap", 1), ("2013-03-05", "drift", 2), ("2013-03-25", "", 3))
    assert list(alarms.champions(plan, flights, JUDGED)) == [pd.NA, 1, 2]


def test_alarms_are_judged_by_their_challengers_next_14_days(flights: pd.DataFrame) -> None:
    plan = runs(
        ("2013-02-28", "bootstrap", 1),  # nothing to replace: not judged
        ("2013-03-05", "drift", 2),  # the signal against the noise: right, and a hit
        ("2013-03-12", "performance", 3),  # the noise against the noise: wrong
        ("2013-03-19", "schedule", 2),  # the signal, with no alarm: a missed week
        ("2013-03-21", "drift", ""),  # the run failed: no challenger
        ("2013-04-05", "drift", 3),  # 4 days left in the play: too late to judge
    )
    plan["champion"] = [np.nan, 1, 1, 1, 1, 1]
    scorer = Scorer()

    judged = alarms.judge(plan, flights, scorer, JUDGED, START + timedelta(days=DAYS - 1))

    assert list(judged.judged_examples.fillna(0)) == [0, 14 * 200, 14 * 200, 14 * 200, 0, 0]
    drift = judged.iloc[1]
    assert drift.challenger_auc > 0.7 and abs(drift.champion_auc - 0.5) < 0.05
    assert drift.gain == pytest.approx(drift.challenger_auc - drift.champion_auc)
    assert abs(judged.gain.iloc[2]) < 0.05
    # Each judged gain's standard error, resampling the 14 days: about a hundredth at 200
    # flights a day, far below the signal's gain; none between two models scoring alike.
    errors = judged.gain_se
    assert 0.005 < errors.iloc[1] < 0.05 and 0.005 < errors.iloc[3] < 0.05
    assert errors.iloc[2] == 0 and errors.iloc[[0, 4, 5]].isna().all()
    assert drift.gain > 5 * drift.gain_se
    # Each version scored each flight it was needed for once.
    for version, ids in scorer.scored.items():
        assert len(ids) == len(set(ids)), version
    # Version 1, the champion of three judged runs: the days after 03-05 through 03-19 + 14.
    assert set(scorer.scored[1]) == set(range(200 * 5, 200 * 33))
    summary = alarms.summarize(judged)
    assert (summary.alarms, summary.judged, summary.right, summary.hits) == (3, 2, 1, 1)
    assert summary.precision == 0.5 and summary.recall == 0.5
    assert list(summary.missed.event_day) == ["2013-03-19"]
    assert "Alarm precision 50%: 1 of 2" in summary.describe()


def test_no_alarm_judged_has_no_precision() -> None:
    summary = alarms.AlarmSummary.none()
    assert np.isnan(summary.precision) and np.isnan(summary.recall)
    assert "precision n/a" in summary.describe()


def test_the_label_ceiling_judges_each_run_again_on_the_labelled_flights(flights) -> None:
    from bench.alarm_ceiling import judged_on
    from ml.metrics import auroc

    plan = runs(("2013-03-05", "drift", 2), ("2013-03-12", "performance", 3))
    plan["champion"] = [1, 1]
    labelled = flights.flight_id % 10 == 0  # a tenth of each day's flights
    scorer = Scorer()
    table = judged_on(plan, flights, {"labelled": labelled}, scorer, date(2013, 4, 9), boot=50)

    days = flights.flight_date.dt.date
    for row, (start, challenger) in enumerate(
        [(date(2013, 3, 5), "signal"), (date(2013, 3, 12), "noise")]
    ):
        window = flights[(days > start) & (days <= start + timedelta(days=14)) & labelled]
        y = window.is_late.to_numpy()
        expected = auroc(y, window[challenger]) - auroc(y, window.noise)
        assert table.flights_labelled.iloc[row] == 14 * 20
        assert table.gain_labelled.iloc[row] == pytest.approx(expected)
    # Every flight scored once per version: the subsets reuse the scores.
    for version, ids in scorer.scored.items():
        assert len(ids) == len(set(ids)), version
    # A tenth of the flights measures the same gain with a larger error.
    assert 0 < table.error.iloc[0] < table.error_labelled.iloc[0]


def test_the_label_ceiling_is_the_precision_of_firing_on_the_labelled_gain() -> None:
    from bench.alarm_ceiling import ceiling

    table = pd.DataFrame(
        {
            "gain": [0.05, 0.0, 0.02, np.nan],
            "gain_x": [0.02, 0.03, 0.0, 0.05],
            "flights_x": [10, 20, 30, 40],
            "error_x": [0.1, 0.2, 0.3, 0.4],
        }
    )
    found = ceiling(table, "x", 0.01)
    assert (found["judged"], found["fires"]) == (3, 2)  # the run judged on no flight is left out
    assert found["precision"] == 0.5 and found["recall"] == 0.5
    assert found["flights a window (median)"] == 20 and found["gain's error (median)"] == 0.2
