"""The replayed flights with the features the warehouse gives them before any label."""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pytest

from pipelines.task import load_task
from sim.judge.flight_table import WEATHER_LOOKBACK, flight_table
from sim.judge.label_features import COLUMNS
from sim.world.nycflights import is_late


@pytest.fixture(scope="module")
def week() -> pd.DataFrame:
    return flight_table(date(2013, 3, 4), date(2013, 3, 11))


def test_every_flight_of_the_days_with_the_models_columns_but_the_label_features(week) -> None:
    spec = load_task("flights").model
    assert set(week.flight_date) == {date(2013, 3, d) for d in range(4, 11)}
    assert week.flight_id.is_unique and week.flight_id.is_monotonic_increasing
    wanted = {*spec.features.categorical, *spec.features.numeric} - set(COLUMNS)
    assert wanted <= set(week.columns)
    assert not set(COLUMNS) & set(week.columns)


def test_the_outcome_is_the_worlds_and_the_weekday_iso(week) -> None:
    sample = week.sample(200, random_state=0)
    assert sample.is_late.tolist() == [is_late(i) for i in sample.flight_id]
    assert (week.loc[week.flight_date == date(2013, 3, 4), "scheduled_weekday"] == 1).all()
    assert (week.loc[week.flight_date == date(2013, 3, 10), "scheduled_weekday"] == 7).all()
    assert (week.route == week.origin + "-" + week.dest).all()


def test_the_weather_is_the_latest_observation_within_the_lookback(week) -> None:
    observed = week.dropna(subset=["weather_observed_at"])
    lag = observed.scheduled_departure_at - observed.weather_observed_at
    assert (lag >= pd.Timedelta(0)).all() and (lag <= WEATHER_LOOKBACK).all()
    # Observations are hourly: the latest one is under an hour old wherever the feed has it.
    assert (lag < pd.Timedelta(hours=1)).mean() > 0.95
    assert len(observed) > 0.95 * len(week)


def test_a_plane_without_a_record_has_no_plane_features(week) -> None:
    unknown = week[week.plane_seats.isna()]
    assert len(unknown) > 0 and unknown.plane_manufacturer.isna().all()
    known = week.dropna(subset=["plane_seats"])
    assert np.all(known.plane_age_years.dropna() >= 0)


def test_an_empty_span_is_refused() -> None:
    with pytest.raises(ValueError, match="no days"):
        flight_table(date(2013, 3, 4), date(2013, 3, 4))
