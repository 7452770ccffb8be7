"""The calibration floor's measurement (sim/judge/recalibration_floor.py) on a planted play:
each day's late rate moved by its weather, its labels back the next day."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from ml.calibration import shift
from sim.judge.recalibration_floor import (
    BASELINE,
    DAY,
    DELIVERED,
    OFFSET_MODELS,
    OUTCOME,
    VERSION,
    FloorSettings,
    corrections,
    day_features,
    floor_table,
    offset_shift,
)

DAYS = pd.date_range("2013-10-01", periods=42, freq="D").date
SETTINGS = FloorSettings(min_labels=50)


def planted(n: int = 2_000, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """A day's flights, each scored by a model that kept a 13% late rate, whose day's late rate
    moves by a planted shift, rainy days' a log-odds up; a uniform 5% labelled, back the next
    day. Returns the flights, the labelled ones and the planted shift of each day."""
    rng = np.random.default_rng(seed)
    rain = rng.exponential(0.1, len(DAYS)) * (rng.random(len(DAYS)) < 0.4)
    planted_shift = 0.3 + 5.0 * rain
    day = np.repeat(DAYS, n)
    p = 1 / (1 + np.exp(-rng.normal(np.log(0.13 / 0.87) - 0.3, 1.0, len(day))))
    truth = shift(p, np.repeat(planted_shift, n))
    flights = pd.DataFrame(
        {
            "flight_id": np.arange(len(day)),
            DAY: day,
            "probability": p,
            VERSION: 1,
            OUTCOME: (rng.random(len(p)) < truth).astype(np.float64),
            "precip": np.repeat(rain, n),
            "visib": 10.0,
            "wind_speed": rng.normal(10, 3, len(p)),
            "humid": 60.0,
        }
    )
    labelled = flights.sample(frac=0.05, random_state=seed).reset_index(drop=True)
    labelled[DELIVERED] = [d + timedelta(days=1) for d in labelled[DAY]]
    return flights, labelled, planted_shift


def scorer(labelled: pd.DataFrame):
    def score(version: int) -> np.ndarray:
        return labelled.probability.to_numpy()

    return score


def test_the_oracle_finds_each_days_planted_shift_and_the_offset_model_the_rain() -> None:
    flights, labelled, planted_shift = planted()
    columns, days = corrections(
        flights, labelled, scorer(labelled), day_features(flights), SETTINGS
    )
    np.testing.assert_allclose(days.oracle, planted_shift, atol=0.15)
    # Before a window of labels: the model's probabilities, but for the oracle.
    first = (flights[DAY] == DAYS[0]).to_numpy()
    np.testing.assert_array_equal(columns[BASELINE][first], flights.probability[first])
    week = pd.Series(pd.to_datetime(flights[DAY])).dt.to_period("W-SUN").dt.start_time
    later = (flights[DAY] >= DAYS[14]).to_numpy()
    y = flights[OUTCOME].to_numpy()
    uniform = flights.flight_id.isin(labelled.flight_id).to_numpy()
    table = floor_table(
        y[later],
        week[later].reset_index(drop=True),
        {k: v[later] for k, v in columns.items()},
        uniform[later],
    ).set_index("method")
    assert table.loc["oracle", "gap_closed"] == 1.0 and table.loc[BASELINE, "gap_closed"] == 0.0
    assert table.loc[BASELINE, "minus_window"] == 0.0
    # The rain moves the late rate day by day; only the offset models see it coming.
    for name in OFFSET_MODELS:
        assert table.loc[name, "gap_closed"] > 0.5, table
        assert table.loc[name, "weekly_ece"] < table.loc[BASELINE, "weekly_ece"]


def test_no_label_delivered_on_or_after_a_day_moves_its_correction() -> None:
    """Labels of a day's own flights, all late, planted as if back on the day and after it: the
    day's corrections, the offset model's among them, are those without them."""
    flights, labelled, _ = planted(n=600, seed=1)
    day = DAYS[30]
    own = flights[flights[DAY] == day].assign(**{OUTCOME: 1.0})
    leaked = pd.concat(
        [labelled, own.assign(**{DELIVERED: day}), own.assign(**{DELIVERED: day + timedelta(3)})],
        ignore_index=True,
    )
    past = day_features(flights)
    _, clean = corrections(flights, labelled, scorer(labelled), past, SETTINGS)
    _, dirty = corrections(flights, leaked, scorer(leaked), past, SETTINGS)
    at = lambda days: days[days[DAY] == day].drop(columns=DAY).iloc[0]  # noqa: E731
    pd.testing.assert_series_equal(at(clean), at(dirty))
    # The leak is large enough to show had it been read: a day later, the labels are known.
    following = lambda days: days[days[DAY] == DAYS[31]].iloc[0]  # noqa: E731
    for name in OFFSET_MODELS:
        assert following(dirty)[name] > following(clean)[name] + 0.1
    # And the offset model alone, given the leaked labels, reads none of them.
    today = np.append(past.loc[day].to_numpy(), 0.0)
    scores = leaked.probability.to_numpy()
    assert offset_shift(day, scores, leaked, today, past, SETTINGS) == pytest.approx(
        offset_shift(day, labelled.probability.to_numpy(), labelled, today, past, SETTINGS)
    )
