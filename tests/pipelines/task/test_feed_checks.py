"""Volume and freshness checks on the daily feeds: thresholds that fit 2013, days that block."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from pipelines.task import load_task
from pipelines.task.feed_checks import (
    FreshnessRule,
    VolumeRule,
    baseline_days,
    judge_freshness,
    judge_volume,
)
from sim.world.replay import day_files, land_days
from tests.pipelines.conftest import source_rows, source_table

THANKSGIVING = "2013-11-28"  # the shortest flights day of 2013 against its trailing weeks
TRAILING = ["2013-10-31", "2013-11-07", "2013-11-14", "2013-11-21"]
DOWNSTREAM = ["fct_flight_features", "flight_predictions", "feature_drift"]
POLICY = load_task().feed_checks


def daily_counts(feed: str) -> dict[str, int]:
    """Rows per day of a source table, for every day of 2013 that has any."""
    t = source_table(feed)
    days = pd.to_datetime({"year": t.year, "month": t.month, "day": t.day}).dt.strftime("%Y-%m-%d")
    return days.value_counts().to_dict()


def judge_2013(feed: str) -> list:
    """Every day of 2013 judged as if each day had loaded after all the days before it."""
    counts = daily_counts(feed)
    first = date(2013, 1, 1)
    days = [(first + timedelta(days=i)).isoformat() for i in range(365)]
    return [judge_volume(d, counts.get(d, 0), counts, POLICY.volume[feed]) for d in days]


def test_no_real_flights_day_of_2013_reaches_the_error_threshold():
    verdicts = judge_2013("flights")
    judged = sorted((v for v in verdicts if v.ratio is not None), key=lambda v: v.ratio)
    assert [v.severity for v in verdicts].count("error") == 0
    assert len(judged) == 344  # the first three weeks lack a baseline of three same weekdays
    shortest = judged[0]
    assert (shortest.day, shortest.rows, shortest.baseline_median) == (THANKSGIVING, 634, 989.5)
    assert shortest.ratio == pytest.approx(0.6407, abs=1e-4)
    assert shortest.severity == "warn"
    assert [v.day for v in judged[:4]] == [THANKSGIVING, "2013-11-29", "2013-07-04", "2013-12-25"]
    assert sorted(v.day for v in verdicts if v.severity == "warn") == [
        "2013-05-26",
        "2013-07-04",
        "2013-09-01",
        "2013-11-28",
        "2013-11-29",
        "2013-12-24",
        "2013-12-25",
    ]
    # The same day cut to a tenth, or to its header, is an error.
    counts = daily_counts("flights")
    for rows in (63, 0):
        assert (
            judge_volume(THANKSGIVING, rows, counts, POLICY.volume["flights"]).severity == "error"
        )


def test_the_source_lacks_weather_for_its_last_day_only():
    verdicts = judge_2013("weather")
    errors = [v for v in verdicts if v.severity == "error"]
    assert [(v.day, v.rows) for v in errors] == [("2013-12-31", 0)]
    assert errors[0].reason.startswith("2013-12-31: no rows: the file holds a header only")
    # Hence the weather check reports an empty day without holding the day's flights back.
    assert POLICY.volume["weather"].blocking is False
    assert POLICY.volume["flights"].blocking is True


def test_volume_verdicts_against_the_same_weekday():
    rule = VolumeRule(trailing=4, min_history=3, error_below=0.5, warn_deviation=0.2)
    assert baseline_days("2013-03-29", 2) == ["2013-03-22", "2013-03-15"]
    history = {"2013-03-22": 100, "2013-03-15": 90, "2013-03-08": 110, "2013-03-28": 5}
    normal = judge_volume("2013-03-29", 95, history, rule)
    assert (normal.severity, normal.baseline, normal.baseline_median) == (
        "pass",
        {"2013-03-22": 100, "2013-03-15": 90, "2013-03-08": 110},
        100,
    )
    assert normal.reason == "2013-03-29: 95 rows, 95% of the same-weekday median 100"
    low = judge_volume("2013-03-29", 75, history, rule)
    assert (low.severity, low.ratio) == ("warn", 0.75)
    assert low.reason.endswith("75% of the same-weekday median 100: more than 20% off")
    assert judge_volume("2013-03-29", 125, history, rule).severity == "warn"
    cut = judge_volume("2013-03-29", 49, history, rule)
    assert (cut.severity, cut.reason) == (
        "error",
        "2013-03-29: 49 rows, 49% of the same-weekday median 100: below 50%",
    )
    # Two same weekdays are too few to judge anything but an empty day.
    short = {d: n for d, n in history.items() if d != "2013-03-08"}
    assert judge_volume("2013-03-29", 10, short, rule).severity == "pass"
    assert judge_volume("2013-03-29", 0, {}, rule).severity == "error"


def test_freshness_against_the_landing_frontier():
    rule = FreshnessRule(max_lag_days=0, lookback_days=14)
    days = [f"2013-01-0{i}" for i in range(1, 6)]
    verdicts = judge_freshness(
        {
            "flights": set(days),
            "weather": set(days[:3]),  # two days behind
            "metar": {days[0], days[1], days[3], days[4]},  # a gap
            "radar": set(),  # never landed
        },
        rule,
    )
    assert verdicts["flights"].passed
    assert verdicts["flights"].reason == "flights has landed every day up to 2013-01-05"
    weather = verdicts["weather"]
    assert (weather.passed, weather.newest, weather.lag_days, weather.missing_days) == (
        False,
        "2013-01-03",
        2,
        ("2013-01-04", "2013-01-05"),
    )
    assert weather.reason == (
        "weather trails the landing frontier 2013-01-05 by 2 day(s) "
        "(newest file 2013-01-03; 0 allowed)"
    )
    assert verdicts["metar"].reason == "metar has no file for 2013-01-03"
    assert verdicts["radar"].reason == "no radar file has landed; other feeds reached 2013-01-05"
    lenient = judge_freshness(
        {"flights": set(days), "weather": set(days[:3])}, replace(rule, max_lag_days=2)
    )
    assert lenient["weather"].passed
    # Days before the lookback window are no longer reported.
    old = judge_freshness(
        {"flights": set(days), "weather": {days[0], days[3], days[4]}},
        replace(rule, lookback_days=2),
    )
    assert old["weather"].passed and old["weather"].missing_days == ()
    assert judge_freshness({"flights": set()}, rule) == {}


@pytest.mark.parametrize(
    ("old", "new", "error"),
    [
        (
            "    error_below: 0.5\n",
            "    error_below: 0.5\n    eror: 1\n",
            r"checks.volume: unknown settings \['eror'\]",
        ),
        (
            "      weather:\n        # The",
            "      planes:\n        # The",
            r"\['planes'\] are not daily feeds",
        ),
        (
            "      dew_point: dewp\n",
            "      dew_point: visibility\n",
            r"humidity.weather: 'visibility' is not a numeric column",
        ),
        (
            "      units: fahrenheit\n",
            "      units: kelvin\n",
            "units must be fahrenheit or celsius",
        ),
        (
            "      quarantine: true\n",
            "      quarantine: sometimes\n",
            "quarantine true or false",
        ),
    ],
)
def test_bad_check_settings_are_refused(tmp_path: Path, old: str, new: str, error: str):
    text = load_task().path.read_text()
    assert text.count(old) == 1
    bad = tmp_path / "flights.yaml"
    bad.write_text(text.replace(old, new))
    with pytest.raises(ValueError, match=error):
        load_task(bad)


# --- in Dagster --------------------------------------------------------------------------------


def land(flywheel, *days: str) -> None:
    land_days(flywheel.zone, [date.fromisoformat(d) for d in days])


def check_evaluation(result: dg.ExecuteInProcessResult, asset: str, check: str):
    (evaluation,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.asset_key == dg.AssetKey(["flights", asset]) and e.check_name == check
    ]
    return evaluation


def materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}


def test_a_header_only_day_blocks_its_features_and_scoring_and_a_short_day_does_not(flywheel):
    land(flywheel, *TRAILING, THANKSGIVING)
    flywheel.run("dimension_warehouse_job")
    for day in TRAILING:
        flywheel.ingest(day, feeds=("flights",))
    # An empty weather file is an ERROR too, but the weather check does not block (see YAML).
    empty_weather(flywheel, THANKSGIVING)

    short = flywheel.run("daily_warehouse_job", THANKSGIVING)
    assert materialized(short) >= {"raw_flights", "raw_weather", *DOWNSTREAM}
    volume = check_evaluation(short, "raw_flights", "volume")
    assert (volume.passed, volume.severity) == (False, dg.AssetCheckSeverity.WARN)
    meta = {k: v.value for k, v in volume.metadata.items()}
    assert meta["rows"] == 634 and meta["ratio"] == 0.641 and meta["baseline_median"] == 989.5
    assert meta["baseline"] == {d: source_rows("flights", d) for d in TRAILING}
    weather = check_evaluation(short, "raw_weather", "volume")
    assert (weather.passed, weather.severity, weather.blocking) == (
        False,
        dg.AssetCheckSeverity.ERROR,
        False,
    )
    features = f"select count(*) from fct_flight_features where flight_date = '{THANKSGIVING}'"
    assert flywheel.scalar(features) == 634

    header = flywheel.zone.read_bytes(f"flights/{THANKSGIVING}.csv").split(b"\n", 1)[0] + b"\n"
    flywheel.zone.write_bytes(f"flights/{THANKSGIVING}.csv", header)
    blocked = flywheel.run("daily_warehouse_job", THANKSGIVING, raise_on_error=False)
    assert not blocked.success
    assert materialized(blocked) == {"raw_weather"}
    # Refused before it replaced anything, naming the file: the day's raw rows and features stay.
    (failure,) = blocked.get_step_failure_events()
    assert failure.step_key == "flights__raw_flights"
    message = failure.step_failure_data.user_failure_data.description
    assert message == (
        f"re-delivered file refused by the volume check: flights/{THANKSGIVING}.csv: "
        f"{THANKSGIVING}: no rows: the file holds a header only, or every row was quarantined; "
        "the 634 rows loaded before stay"
    )
    raw = f"select count(*) from raw.flights where _landing_date = '{THANKSGIVING}'"
    assert flywheel.scalar(raw) == 634
    assert flywheel.scalar(features) == 634


def test_a_first_delivery_with_a_header_only_is_loaded_and_blocks(flywheel):
    """A day with no rows yet has nothing to keep: its file is loaded and the blocking check
    fails the run after the load, naming the day."""
    land(flywheel, *TRAILING, THANKSGIVING)
    flywheel.run("dimension_warehouse_job")
    for day in TRAILING:
        flywheel.ingest(day, feeds=("flights",))
    key = f"flights/{THANKSGIVING}.csv"
    flywheel.zone.write_bytes(key, flywheel.zone.read_bytes(key).split(b"\n", 1)[0] + b"\n")
    blocked = flywheel.run("daily_warehouse_job", THANKSGIVING, raise_on_error=False)
    assert not blocked.success
    assert materialized(blocked) == {"raw_flights", "raw_weather"}
    volume = check_evaluation(blocked, "raw_flights", "volume")
    assert (volume.passed, volume.severity, volume.blocking) == (
        False,
        dg.AssetCheckSeverity.ERROR,
        True,
    )
    assert volume.description == (
        f"{THANKSGIVING}: no rows: the file holds a header only, or every row was quarantined"
    )
    assert volume.metadata["failed_days"].value == {THANKSGIVING: "error"}


def empty_weather(flywheel, day: str) -> None:
    key = f"weather/{day}.csv"
    flywheel.zone.write_bytes(key, flywheel.zone.read_bytes(key).split(b"\n", 1)[0] + b"\n")


def test_a_file_cut_to_a_tenth_is_an_error_naming_the_day_in_a_multi_day_run(flywheel):
    land(flywheel, *TRAILING, "2013-11-27", THANKSGIVING)
    for day in TRAILING:
        flywheel.ingest(day, feeds=("flights",))
    lines = flywheel.zone.read_bytes(f"flights/{THANKSGIVING}.csv").decode().splitlines()
    flywheel.zone.write_bytes(
        f"flights/{THANKSGIVING}.csv", ("\n".join(lines[: 1 + 63]) + "\n").encode()
    )
    job = flywheel.defs.resolve_job_def("daily_warehouse_job")
    result = job.execute_in_process(
        instance=flywheel.instance,
        asset_selection=[dg.AssetKey(["flights", "raw_flights"])],
        tags={
            "dagster/asset_partition_range_start": "2013-11-27",
            "dagster/asset_partition_range_end": THANKSGIVING,
        },
        raise_on_error=False,
    )
    assert not result.success
    volume = check_evaluation(result, "raw_flights", "volume")
    assert (volume.passed, volume.severity) == (False, dg.AssetCheckSeverity.ERROR)
    meta = {k: v.value for k, v in volume.metadata.items()}
    assert meta["failed_days"] == {THANKSGIVING: "error"}
    assert (meta["landing_date"], meta["rows"], meta["days_judged"]) == (THANKSGIVING, 63, 2)
    assert volume.description == (
        f"{THANKSGIVING}: 63 rows, 6% of the same-weekday median 989.5: below 50%"
    )
    # The run also reports the feed's freshness: the days between these Thursdays never landed.
    freshness = check_evaluation(result, "raw_flights", "freshness")
    assert (freshness.passed, freshness.severity) == (False, dg.AssetCheckSeverity.WARN)
    missing = [f"2013-11-{d}" for d in (15, 16, 17, 18, 19, 20, 22, 23, 24, 25, 26)]
    assert freshness.metadata["missing_days"].value == missing


# --- humidity ----------------------------------------------------------------------------------


def weather_days() -> dict[str, pd.DataFrame]:
    """Every day of 2013's weather source, as the contract types it."""
    t = source_table("weather")
    days = pd.to_datetime({"year": t.year, "month": t.month, "day": t.day}).dt.strftime("%Y-%m-%d")
    return {day: rows for day, rows in t.groupby(days)}


def test_every_real_weather_day_of_2013_passes_and_every_celsius_day_fails():
    from pipelines.task.feed_checks import judge_humidity

    rule = POLICY.humidity["weather"]
    days = weather_days()
    verdicts = [judge_humidity(day, rows, rule) for day, rows in days.items()]
    assert len(verdicts) == 364 and all(v.passed for v in verdicts)
    assert max(v.median_gap for v in verdicts) < 0.05
    celsius = [
        judge_humidity(
            day, rows.assign(temp=(rows.temp - 32) * 5 / 9, dewp=(rows.dewp - 32) * 5 / 9), rule
        )
        for day, rows in days.items()
    ]
    assert not any(v.passed for v in celsius)
    assert min(v.median_gap for v in celsius) > 1.0
    worst = min(celsius, key=lambda v: v.median_gap)
    assert "not in the units its contract says" in worst.reason and worst.day in worst.reason
    # Only temperature converted: caught too; a day without dew points has nothing to judge.
    day, rows = "2013-06-01", days["2013-06-01"]
    assert not judge_humidity(day, rows.assign(temp=(rows.temp - 32) * 5 / 9), rule).passed
    empty = judge_humidity(day, rows.assign(dewp=None), rule)
    assert (empty.passed, empty.rows, empty.median_gap) == (True, 0, None)


def test_implied_humidity_is_the_magnus_formula():
    from pipelines.task.feed_checks import implied_humidity

    # Saturated air: the dew point is the temperature; 20 C at a 10 C dew point is about 52.6%.
    assert implied_humidity([50.0, 68.0], [50.0, 50.0]) == pytest.approx([100.0, 52.6], abs=0.1)
    assert implied_humidity([20.0], [10.0], "celsius") == pytest.approx([52.6], abs=0.1)


def test_a_day_of_weather_in_celsius_is_quarantined_and_its_flights_built_without_it(flywheel):
    from sim.world.drift import PlantedDrift

    good, day = "2013-05-31", "2013-06-01"
    land(flywheel, good, day)
    flywheel.run("dimension_warehouse_job")
    key = f"weather/{day}.csv"
    source = pd.read_csv(
        io.BytesIO(flywheel.zone.read_bytes(key)), dtype=str, keep_default_na=False
    )
    drifted = PlantedDrift(date.fromisoformat(day))("weather", date.fromisoformat(day), source)
    flywheel.zone.write_bytes(key, drifted.to_csv(index=False).encode())

    # Both days in one run: only the one in Celsius is quarantined.
    job = flywheel.defs.resolve_job_def("daily_warehouse_job")
    result = job.execute_in_process(
        instance=flywheel.instance,
        tags={
            "dagster/asset_partition_range_start": good,
            "dagster/asset_partition_range_end": day,
        },
    )
    assert materialized(result) >= {"raw_flights", "raw_weather", *DOWNSTREAM}
    humidity = check_evaluation(result, "raw_weather", "humidity")
    assert (humidity.passed, humidity.severity, humidity.blocking) == (
        False,
        dg.AssetCheckSeverity.ERROR,
        False,
    )
    meta = {k: v.value for k, v in humidity.metadata.items()}
    assert meta["landing_date"] == day and set(meta["failed_days"]) == {day}
    assert meta["days_judged"] == 2 and meta["median_gap"] > 1.0
    assert humidity.description.startswith(f"{day}: the reported humid is ")
    assert humidity.description.endswith("rows of the failed day(s) quarantined in raw.quarantine")
    # Every row of the day quarantined, with the verdict as its reason; none loaded.
    loaded = dict(
        flywheel.sql(
            "select strftime(_landing_date, '%Y-%m-%d'), count(*) from raw.weather group by 1"
        )
    )
    assert loaded == {good: source_rows("weather", good)}
    quarantined = flywheel.sql("select source_file, reason, record from raw.quarantine")
    assert len(quarantined) == source_rows("weather", day)
    assert {(f, r.split(":")[0]) for f, r, _ in quarantined} == {(key, "humidity")}
    assert all(f"{day}: the reported humid is " in r for _, r, _ in quarantined)
    # Each record holds the row's contract fields as parsed: here temperatures in Celsius.
    celsius = {json.loads(record)["temp"] for *_, record in quarantined}
    assert max(celsius) < 50
    # Both days' flights are built; the quarantined day's without weather.
    for d, with_weather in ((good, True), (day, False)):
        flights, weather = flywheel.sql(
            f"select count(*), count(temp) from fct_flight_features where flight_date = '{d}'"
        )[0]
        assert flights == source_rows("flights", d)
        assert (weather > 0) == with_weather


def test_a_file_quarantined_whole_keeps_every_row_with_its_line_and_own_reason():
    from pipelines.ingestion.validation import validate_file

    task = load_task()
    feed, day = task.feeds["weather"], "2013-06-01"
    lines = day_files(date.fromisoformat(day))[f"weather/{day}.csv"].decode().splitlines()
    header = lines[0].split(",")
    bad = lines[3].split(",")
    bad[header.index("humid")] = "wet"
    lines[3] = ",".join(bad)
    data = ("\n".join(lines) + "\n").encode()
    validated = validate_file(feed, "weather/2013-06-01.csv", data, task.null_values, day)
    assert len(validated.rejected) == 1 and len(validated.rows) == len(lines) - 2

    whole = validated.quarantined("humidity: units")
    assert whole.rows.empty and list(whole.rows.columns) == list(validated.rows.columns)
    assert whole.rows_read == validated.rows_read
    assert whole.rejected.source_line.tolist() == list(range(2, len(lines) + 1))
    reasons = dict(zip(whole.rejected.source_line, whole.rejected.reason, strict=True))
    assert reasons.pop(4).startswith("humid: ")  # its own reason, from the contract
    assert set(reasons.values()) == {"humidity: units"}
    # Each record holds the row's fields, numbers as numbers and a missing value as null.
    first = json.loads(whole.rejected.record[0])
    row = validated.rows.iloc[0]
    assert set(first) == set(feed.column_names)
    assert first["temp"] == pytest.approx(float(row.temp))
    assert first["origin"] == row.origin
    missing = [c for c in feed.column_names if pd.isna(row[c])]
    assert all(first[c] is None for c in missing)


def test_the_declared_humidity_check_says_what_happens_to_a_failing_day():
    from pipelines.defs.ingestion.checks import humidity_check_spec

    key, rule = dg.AssetKey(["flights", "raw_weather"]), POLICY.humidity["weather"]
    assert rule.quarantine
    assert humidity_check_spec(key, rule).description.endswith(
        "the day's rows are quarantined in raw.quarantine."
    )
    kept = humidity_check_spec(key, replace(rule, quarantine=False)).description
    assert kept.endswith("the day's weather is still used.")
