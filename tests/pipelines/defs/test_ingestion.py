"""Ingestion: exact row counts, idempotent partitions, quarantine, and files that fail whole."""

from __future__ import annotations

import codecs
from datetime import date

import pytest

from sim.world.replay import land_days
from tests.pipelines.conftest import source_rows

DAY = "2013-01-02"


def failure_message(result) -> str:
    """The messages of a failed run's first step error and all its causes."""
    error, messages = result.get_step_failure_events()[0].event_specific_data.error, []
    while error is not None:
        messages.append(error.message)
        error = error.cause
    return "\n".join(messages)


def land(flywheel, *days: str) -> None:
    land_days(flywheel.zone, [date.fromisoformat(d) for d in days])


def good_file(flywheel, feed: str = "flights", day: str = DAY) -> list[str]:
    return flywheel.zone.read_bytes(f"{feed}/{day}.csv").decode().splitlines()


def rewrite(flywheel, lines: list[str], feed: str = "flights", day: str = DAY) -> None:
    flywheel.zone.write_bytes(f"{feed}/{day}.csv", ("\n".join(lines) + "\n").encode())


def test_days_load_with_exact_row_counts(flywheel):
    days = ["2013-01-01", "2013-01-02", "2013-01-03"]
    land(flywheel, *days)
    for day in days:
        flywheel.ingest(day)
    for day in days:
        for feed in ("flights", "weather"):
            n = flywheel.scalar(f"select count(*) from raw.{feed} where _landing_date = '{day}'")
            assert n == source_rows(feed, day)
    assert flywheel.scalar("select count(*) from raw.quarantine") == 0


def test_rerunning_a_partition_replaces_it_exactly(flywheel):
    land(flywheel, DAY)
    first = flywheel.ingest(DAY)
    flywheel.ingest(DAY)
    assert flywheel.scalar("select count(*) from raw.flights") == source_rows("flights", DAY)
    dupes = flywheel.sql(
        "select count(*) from (select year, month, day, carrier, flight, origin from raw.flights "
        "group by all having count(*) > 1)"
    )
    assert dupes == [(0,)]
    meta = first.asset_materializations_for_node("flights__raw_flights")[0].metadata
    assert meta["dagster/row_count"].value == source_rows("flights", DAY)


def test_dimension_feeds_load_whole(flywheel):
    land(flywheel, DAY)
    flywheel.run("dimension_warehouse_job", assets=["raw_planes", "raw_airports", "raw_airlines"])
    flywheel.run("dimension_warehouse_job", assets=["raw_planes", "raw_airports", "raw_airlines"])
    assert flywheel.scalar("select count(*) from raw.planes") == 3322
    assert flywheel.scalar("select count(*) from raw.airlines") == 16
    assert flywheel.scalar("select count(*) from raw.airports") == 1458


def test_a_real_out_of_range_observation_is_quarantined(flywheel):
    # The source records a 1048 mph wind at EWR on 2013-02-12 03:00: a sensor fault.
    land(flywheel, "2013-02-12")
    result = flywheel.ingest("2013-02-12", feeds=("weather",))
    rows = flywheel.sql("select feed, source_file, source_line, reason from raw.quarantine")
    assert len(rows) == 1
    feed, source_file, line, reason = rows[0]
    assert (feed, source_file, reason) == (
        "weather",
        "weather/2013-02-12.csv",
        "wind_speed above 250",
    )
    assert good_file(flywheel, "weather", "2013-02-12")[line - 1].startswith("EWR,2013,2,12,3,")
    loaded = flywheel.scalar("select count(*) from raw.weather")
    assert loaded == source_rows("weather", "2013-02-12") - 1
    meta = result.asset_materializations_for_node("flights__raw_weather")[0].metadata
    assert meta["rows_quarantined"].value == 1


def test_bad_rows_are_quarantined_with_line_and_reason(flywheel):
    land(flywheel, DAY)
    lines = good_file(flywheel)
    header = lines[0].split(",")
    col = {name: i for i, name in enumerate(header)}

    def broken(line: str, column: str, value: str) -> str:
        fields = line.split(",")
        fields[col[column]] = value
        return ",".join(fields)

    lines[1] = broken(lines[1], "distance", "far")  # wrong type
    lines[2] = broken(lines[2], "month", "13")  # out of range
    lines[3] = broken(lines[3], "sched_dep_time", "1275")  # not a time of day
    lines[4] = broken(lines[4], "carrier", "")  # required value missing
    lines.append(lines[10])  # duplicate key
    rewrite(flywheel, lines)
    flywheel.ingest(DAY, feeds=("flights",))
    rows = dict(flywheel.sql("select source_line, reason from raw.quarantine order by 1"))
    assert rows[2] == "distance: not a valid float"
    assert rows[3].startswith("month above 12")
    assert rows[4] == "sched_dep_time is not a time of day (hhmm)"
    assert rows[5] == "carrier is missing"
    assert rows[len(lines)].startswith("duplicate key (year, month, day, carrier, flight, origin)")
    assert len(rows) == 5
    loaded = flywheel.scalar("select count(*) from raw.flights")
    assert loaded == source_rows("flights", DAY) - 4  # the duplicate's first copy stays


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda data: b"", "file is empty"),
        (lambda data: data[: len(data) // 2], "truncated at line"),
        (
            lambda data: data.replace(b"tailnum,", b"", 1).replace(b"\n", b"\n", 1),
            "line 2 has 14 fields, header has 13",
        ),
        (
            lambda data: data.split(b"\n", 1)[0].replace(b",tailnum", b"") + b"\n",
            "header lacks contract columns ['tailnum']",
        ),
        (lambda data: data.replace(b"\n", b'\n"unterminated,', 1), "record starting at line 2"),
        (lambda data: data[:100] + "ü".encode("latin-1") + data[100:], "not UTF-8 at byte 100"),
        (
            lambda data: data.decode().encode("utf-16"),
            "not UTF-8 at byte 0 (it starts with a UTF-16 byte-order mark)",
        ),
    ],
    ids=[
        *("empty", "truncated", "short-header", "missing-column", "unterminated-quote"),
        *("latin-1", "utf-16"),
    ],
)
def test_unparseable_file_fails_partition_and_keeps_warehouse(flywheel, corrupt, message):
    land(flywheel, DAY)
    flywheel.ingest(DAY)
    before = flywheel.sql("select * from raw.flights order by all")
    data = flywheel.zone.read_bytes(f"flights/{DAY}.csv")
    flywheel.zone.write_bytes(f"flights/{DAY}.csv", corrupt(data))
    result = flywheel.ingest(DAY, raise_on_error=False)
    assert not result.success
    error = failure_message(result)
    assert f"flights/{DAY}.csv" in error and message in error
    assert flywheel.sql("select * from raw.flights order by all") == before


def test_a_missing_landing_file_fails_naming_it(flywheel):
    result = flywheel.ingest("2013-03-01", feeds=("flights",), raise_on_error=False)
    assert not result.success
    assert "no file 'flights/2013-03-01.csv'" in failure_message(result)


def test_numbers_beyond_their_type_cost_only_their_row(flywheel):
    land(flywheel, DAY)
    lines = good_file(flywheel)
    col = {name: i for i, name in enumerate(lines[0].split(","))}
    beyond = "not a valid integer (out of the 64-bit range)"
    cases = [
        ("flight", "1" * 23, f"flight: {beyond}"),  # pandas: float64 not safely cast to int64
        ("flight", str(2**63 + 5), f"flight: {beyond}"),  # pandas: uint64
        ("flight", "1e308", f"flight: {beyond}"),
        ("flight", "inf", "flight: not a valid integer"),
        ("flight", "nan", "flight: not a valid integer"),
        ("flight", str(2**53 + 1), "flight above 9999"),  # float64 would read 2**53
        ("distance", "1e400", "distance: not a valid float (beyond the float64 range)"),
        (
            "time_hour",
            "9999-12-31T23:00:00-05:00",
            "time_hour: not a valid timestamp (outside years 1 to 9999)",
        ),
    ]
    for line, (column, value, _) in enumerate(cases, start=1):
        fields = lines[line].split(",")
        fields[col[column]] = value
        lines[line] = ",".join(fields)
    rewrite(flywheel, lines)
    flywheel.ingest(DAY, feeds=("flights",))
    rows = dict(flywheel.sql("select source_line, reason from raw.quarantine order by 1"))
    assert rows == {line + 1: reason for line, (_, _, reason) in enumerate(cases, start=1)}
    loaded = flywheel.scalar("select count(*) from raw.flights")
    assert loaded == source_rows("flights", DAY) - len(cases)


@pytest.mark.parametrize(
    "variant",
    [
        lambda data: codecs.BOM_UTF8 + data,
        lambda data: data.replace(b"\n", b"\r\n"),
        lambda data: data.replace(b"\n", b"\r"),
    ],
    ids=["utf-8-bom", "crlf", "cr"],
)
def test_a_byte_order_mark_or_other_line_endings_load_every_row(flywheel, variant):
    land(flywheel, DAY)
    data = flywheel.zone.read_bytes(f"flights/{DAY}.csv")
    flywheel.zone.write_bytes(f"flights/{DAY}.csv", variant(data))
    flywheel.ingest(DAY, feeds=("flights",))
    assert flywheel.scalar("select count(*) from raw.flights") == source_rows("flights", DAY)
    assert flywheel.scalar("select count(*) from raw.quarantine") == 0
