"""Planted drift: what changes, from which day, and how a bad specification is reported."""

from __future__ import annotations

from datetime import date

import pandas as pd
import pytest

from sim.world.drift import PlantedDrift, parse_drift
from sim.world.replay import day_files


def weather(*temps: str) -> pd.DataFrame:
    return pd.DataFrame({"temp": list(temps), "dewp": list(temps), "humid": list(temps)})


def test_celsius_converts_temperatures_from_its_start_day_only() -> None:
    drift = PlantedDrift(date(2013, 11, 1), "celsius")
    frame = weather("32", "212", "", "50")
    after = drift("weather", date(2013, 11, 1), frame)
    assert after.temp.tolist() == ["0", "100", "", "10"]
    assert after.dewp.tolist() == ["0", "100", "", "10"]
    assert after.humid.tolist() == frame.humid.tolist()
    assert drift("weather", date(2013, 10, 31), frame).equals(frame)
    assert drift("flights", date(2013, 11, 2), frame).equals(frame)


def test_landed_weather_is_in_celsius_after_the_start() -> None:
    drift = PlantedDrift(date(2013, 9, 2), "celsius")
    key = "weather/2013-09-02.csv"
    plain = pd.read_csv(pd.io.common.BytesIO(day_files(date(2013, 9, 2))[key]))
    drifted = pd.read_csv(pd.io.common.BytesIO(day_files(date(2013, 9, 2), drift=drift)[key]))
    expected = ((plain.temp - 32) * 5 / 9).round(2)
    assert drifted.temp.tolist() == pytest.approx(expected.tolist())
    assert drifted.humid.equals(plain.humid)


def test_bad_specifications_name_the_problem() -> None:
    assert parse_drift("celsius@2013-11-01") == PlantedDrift(date(2013, 11, 1), "celsius")
    with pytest.raises(ValueError, match="unknown drift 'kelvin'"):
        parse_drift("kelvin@2013-11-01")
    with pytest.raises(ValueError, match="KIND@YYYY-MM-DD"):
        parse_drift("celsius")
