"""The replay's files: contract columns, exact rows per local day, no outcomes, stable bytes."""

from __future__ import annotations

import csv
import io
import re
from datetime import date

import pytest

from pipelines.lib.landing_zone import LocalLandingZone
from pipelines.task import load_task
from sim.world.replay import day_files, dimension_files, land_days

TASK = load_task("flights")
OUTCOMES = {"dep_time", "dep_delay", "arr_time", "arr_delay", "air_time"}
# New Year's Day, both DST switches, and the last day (which has no weather observations).
DAYS = [date(2013, 1, 1), date(2013, 3, 10), date(2013, 11, 3), date(2013, 12, 31)]


def _rows(data: bytes) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(data.decode()))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


@pytest.mark.parametrize("day", DAYS, ids=str)
def test_daily_files_hold_the_source_rows_of_their_local_day(day, source_counts):
    files = day_files(day, TASK)
    assert set(files) == {f"flights/{day}.csv", f"weather/{day}.csv"}
    for feed in TASK.daily_feeds:
        header, rows = _rows(files[feed.landing_key(day)])
        assert header == feed.column_names
        assert len(rows) == source_counts[feed.name][day.isoformat()]
        assert {(r["year"], r["month"], r["day"]) for r in rows} <= {
            (str(day.year), str(day.month), str(day.day))
        }


def test_flights_feed_holds_no_outcomes():
    header, _ = _rows(day_files(date(2013, 6, 1), TASK)["flights/2013-06-01.csv"])
    assert OUTCOMES.isdisjoint(header)
    assert "sched_dep_time" in header


def test_last_day_weather_file_is_header_only():
    data = day_files(date(2013, 12, 31), TASK)["weather/2013-12-31.csv"]
    assert data == (",".join(TASK.feeds["weather"].column_names) + "\n").encode()


def test_values_follow_the_contract_types():
    files = {**day_files(date(2013, 2, 8), TASK), **dimension_files(TASK)}
    for key, data in files.items():
        feed, _ = TASK.match_key(key)
        _, rows = _rows(data)
        assert rows, key
        for column in feed.columns:
            values = {r[column.name] for r in rows} - ({""} if column.nullable else set())
            assert "" not in values and "NA" not in values, (key, column.name)
            if column.type == "integer":
                assert all(re.fullmatch(r"-?\d+", v) for v in values), (key, column.name)
            if column.type == "timestamp":
                pattern = r"\d{4}-\d\d-\d\dT\d\d:00:00Z"
                assert all(re.fullmatch(pattern, v) for v in values), (key, column.name)


def test_missing_values_are_empty_and_floats_keep_source_digits():
    flights = _rows(day_files(date(2013, 2, 8), TASK)["flights/2013-02-08.csv"])[1]
    assert any(r["tailnum"] == "" for r in flights)
    weather = _rows(day_files(date(2013, 1, 1), TASK)["weather/2013-01-01.csv"])[1]
    first_ewr = next(r for r in weather if r["origin"] == "EWR")
    assert first_ewr["wind_speed"] == "10.357019999999999"
    assert first_ewr["wind_gust"] == ""


def test_dimension_files_hold_every_source_row():
    files = dimension_files(TASK)
    counts = {key: len(_rows(data)[1]) for key, data in files.items()}
    assert counts == {
        "dimension/planes.csv": 3322,
        "dimension/airports.csv": 1458,
        "dimension/airlines.csv": 16,
    }
    _, airports = _rows(files["dimension/airports.csv"])
    assert sum(r["tzone"] == "" for r in airports) == 3


def test_bytes_are_deterministic():
    day = date(2013, 7, 4)
    assert day_files(day, TASK) == day_files(day, TASK)
    assert dimension_files(TASK) == dimension_files(TASK)


def test_landing_twice_writes_nothing_new(tmp_path):
    zone = LocalLandingZone(root=str(tmp_path))
    days = [date(2013, 5, 1), date(2013, 5, 2)]
    first = land_days(zone, days, TASK)
    versions = zone.list_files()
    second = land_days(zone, days, TASK)
    assert (first.written, first.unchanged) == (7, 0)
    assert (second.written, second.unchanged) == (0, 7)
    assert second.rows == first.rows and first.rows["flights"] > 0
    assert zone.list_files() == versions


def test_days_outside_the_task_are_refused():
    with pytest.raises(ValueError, match="outside task"):
        day_files(date(2014, 1, 1), TASK)
