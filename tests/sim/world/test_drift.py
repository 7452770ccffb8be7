"""Planted drift: what changes, from which day, and how a bad specification is reported."""

from __future__ import annotations

import io
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from pipelines.ingestion.validation import validate_file
from pipelines.task import load_task
from sim.driver.simulation import UsageError, planted_break
from sim.judge.examples import Judged
from sim.world import nycflights
from sim.world.annotators import answer
from sim.world.drift import PlantedDrift, parse_drift, planted, record
from sim.world.flight_breaks import flip_probability, flips
from sim.world.replay import day_files
from sim.world.sources import held_back

OCTOBER = [date(2013, 10, d) for d in range(1, 32)]


def weather(*temps: str) -> pd.DataFrame:
    return pd.DataFrame({"temp": list(temps), "dewp": list(temps), "humid": list(temps)})


def flight_ids(days: list[date]) -> pd.DataFrame:
    """Every flight of `days`: its id and carrier."""
    frames = [nycflights.load().day("flights", d) for d in days]
    flights = pd.concat(frames, ignore_index=True)
    day = flights.year + "-" + flights.month.str.zfill(2) + "-" + flights.day.str.zfill(2)
    ids = day + "_" + flights.carrier + flights.flight + "_" + flights.origin
    return pd.DataFrame({"flight_id": ids, "carrier": flights.carrier})


def late_rates(flights: pd.DataFrame, drift: PlantedDrift | None) -> pd.Series:
    """Each carrier's late rate over `flights` in a world with break `drift`."""
    late = pd.Series(held_back("flights", flights.flight_id, drift), index=flights.index)
    return late.astype(float).groupby(flights.carrier).mean()


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
    plain = pd.read_csv(io.BytesIO(day_files(date(2013, 9, 2))[key]))
    drifted = pd.read_csv(io.BytesIO(day_files(date(2013, 9, 2), drift=drift)[key]))
    expected = ((plain.temp - 32) * 5 / 9).round(2)
    assert drifted.temp.tolist() == pytest.approx(expected.tolist())
    assert drifted.humid.equals(plain.humid)


def test_concept_raises_one_carriers_late_rate_by_0_2_and_no_other() -> None:
    year = flight_ids(list(pd.date_range("2013-01-01", "2013-12-31").date))
    before = late_rates(year, None)
    after = late_rates(year, parse_drift("concept@2013-01-01"))
    # Over the year its flip probability is computed from, the rise is 0.2 in expectation; the
    # hash's draw over some 40,000 on-time flights spreads it by about 0.002.
    assert after["B6"] - before["B6"] == pytest.approx(0.2, abs=0.01)
    assert after.drop("B6").equals(before.drop("B6"))
    assert flip_probability("B6") == pytest.approx(0.2 / (1 - before["B6"]))


def test_concept_changes_outcomes_from_its_day_on_only() -> None:
    drift = parse_drift("concept:UA@2013-10-15")
    october = flight_ids(OCTOBER)
    source = pd.Series(held_back("flights", october.flight_id, None))
    broken = pd.Series(held_back("flights", october.flight_id, drift))
    changed = source != broken
    on_or_after = october.flight_id.str[:10] >= "2013-10-15"
    assert changed.any()
    assert not changed[~on_or_after].any()
    assert (october.carrier[changed] == "UA").all()
    assert not source[changed].any() and broken[changed].all()  # on time made late, never back
    # A stretch more punctual than the year rises by 0.2 * (its on-time share / the year's).
    ua = (october.carrier == "UA") & on_or_after
    year_on_time = 1 - nycflights.carrier_late_rates()["UA"]
    expected = 0.2 * (1 - source[ua].mean()) / year_on_time
    assert broken[ua].mean() - source[ua].mean() == pytest.approx(expected, abs=0.03)


def test_annotators_and_the_judge_agree_on_a_flipped_flight(home: Path) -> None:
    flights = flight_ids([date(2013, 10, 21)])
    b6 = flights.flight_id[flights.carrier == "B6"]
    flipped = next(f for f in b6 if not nycflights.is_late(f) and flips(f))
    spec, judged = load_task().labeling, Judged.of("flights")
    assert answer(spec, "t1", flipped, 0.0, 0) == spec.choice_of(False)
    assert judged.outcomes(pd.Series([flipped])) == [False]
    record(home, parse_drift("concept@2013-10-21"))
    assert planted(home) == PlantedDrift(date(2013, 10, 21), "concept", "B6")
    assert answer(spec, "t1", flipped, 0.0, 0) == spec.choice_of(True)
    assert judged.outcomes(pd.Series([flipped])) == [True]


def test_a_world_plays_one_break_recorded_before_its_first_day(home: Path) -> None:
    concept = parse_drift("concept@2013-10-21")
    assert planted_break(home, None, None) is None
    with pytest.raises(UsageError, match="already played"):
        planted_break(home, concept, date(2013, 10, 21))
    assert planted_break(home, concept, date(2013, 10, 20)) == concept
    assert planted_break(home, None, date(2013, 10, 25)) == concept  # resumed without --drift
    with pytest.raises(UsageError, match="plays --drift concept:B6@2013-10-21"):
        planted_break(home, parse_drift("concept:UA@2013-10-21"), None)


def test_reschedule_moves_one_carriers_departures_consistently() -> None:
    day = date(2013, 10, 1)
    drift = parse_drift("reschedule:EV+3@2013-10-01")
    source = nycflights.load().day("flights", day)
    moved = drift("flights", day, source)
    key = ["carrier", "flight", "origin"]
    pair = source.merge(moved, on=key, suffixes=("", "_moved"))
    assert len(pair) == len(source) == len(moved)
    ev = pair.carrier == "EV"
    hour, hour_moved = pair.hour.astype(int), pair.hour_moved.astype(int)
    assert ((hour[ev] + 3) % 24 == hour_moved[ev]).all() and (hour_moved[ev] < 3).any()
    dep = pair.sched_dep_time_moved.astype(int)
    assert (dep // 100 == hour_moved).all() and (dep % 100 == pair.minute_moved.astype(int)).all()
    arr, arr_moved = pair.sched_arr_time.astype(int), pair.sched_arr_time_moved.astype(int)
    assert ((arr[ev] // 100 + 3) % 24 == arr_moved[ev] // 100).all()
    local = pd.to_datetime(pair.time_hour_moved).dt.tz_convert("America/New_York")
    assert (local.dt.hour == hour_moved).all() and (local.dt.day == 1).all()
    columns = [c for c in source.columns if c not in key]
    others = pair[~ev]
    assert all(others[c].equals(others[f"{c}_moved"]) for c in columns)
    assert moved.sched_dep_time.astype(int).is_monotonic_increasing  # the day's order kept
    assert drift("flights", date(2013, 9, 30), source).equals(source)
    assert drift("weather", day, source).equals(source)


def test_rescheduled_flights_pass_the_contract_and_keep_their_outcomes() -> None:
    task, day = load_task(), date(2013, 10, 1)
    drift = parse_drift("reschedule:B6+6@2013-10-01")
    feed = next(f for f in task.daily_feeds if f.name == "flights")
    key = feed.landing_key(day)
    landed = day_files(day, task, drift)[key]
    assert landed != day_files(day, task)[key]
    checked = validate_file(feed, key, landed, tuple(task.null_values), day.isoformat())
    assert checked.rejected.empty
    assert len(checked.rows) == len(nycflights.load().day("flights", day))
    flights = flight_ids([day])
    assert held_back("flights", flights.flight_id, drift) == held_back(
        "flights", flights.flight_id, None
    )


def test_bad_specifications_name_the_problem() -> None:
    assert parse_drift("celsius@2013-11-01") == PlantedDrift(date(2013, 11, 1), "celsius")
    assert str(parse_drift("reschedule@2013-11-01")) == "reschedule:B6+6@2013-11-01"
    assert parse_drift("concept:UA@2013-11-01") == PlantedDrift(date(2013, 11, 1), "concept", "UA")
    with pytest.raises(ValueError, match=r"unknown drift 'kelvin'; known: \['celsius', 'concept'"):
        parse_drift("kelvin@2013-11-01")
    with pytest.raises(ValueError, match=r"KIND\[:OPTION\]@YYYY-MM-DD"):
        parse_drift("celsius")
    with pytest.raises(ValueError, match="'celsius' takes no option"):
        parse_drift("celsius:UA@2013-11-01")
    with pytest.raises(ValueError, match="unknown carrier 'ZZ'"):
        parse_drift("concept:ZZ@2013-11-01")
    with pytest.raises(ValueError, match="'concept' takes no hours"):
        parse_drift("concept:UA+3@2013-11-01")
    with pytest.raises(ValueError, match=r"within 1\.\.23, got 24"):
        parse_drift("reschedule:UA+24@2013-11-01")
