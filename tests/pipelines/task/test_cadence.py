"""Partitions of a day, a week or a month: the contracts, validation and Dagster agree on them."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest

from pipelines.ingestion.validation import validate_file
from pipelines.lib.partitions import landing_partitions
from pipelines.task.cadence import next_start, partition_start, partition_starts
from pipelines.task.contracts import read_contracts
from pipelines.task.feed_checks import (
    FreshnessRule,
    VolumeRule,
    baseline_days,
    judge_freshness,
    judge_volume,
)

TASK_YAML = """
task: events
partitions: {{start_date: "{start}", end_date: "2014-01-01"{cadence}}}
feeds:
  events:
    kind: daily
    key: [event_id]
    partition_date: [{partition_date}]
    columns:
      event_id: {{type: integer}}
      happened_at: {{type: timestamp}}
      year: {{type: integer}}
      month: {{type: integer}}
      day: {{type: integer}}
"""


def task_file(tmp_path, start="2013-01-01", cadence="monthly", partition_date="happened_at"):
    path = tmp_path / "events.yaml"
    extra = f", cadence: {cadence}" if cadence else ""
    path.write_text(TASK_YAML.format(start=start, cadence=extra, partition_date=partition_date))
    return path


@pytest.mark.parametrize(
    ("cadence", "start", "count"),
    [("daily", "2013-01-01", 365), ("weekly", "2013-01-02", 52), ("monthly", "2013-01-01", 12)],
)
def test_the_partitions_are_dagsters_and_each_day_falls_in_one(tmp_path, cadence, start, count):
    task = read_contracts(task_file(tmp_path, start, cadence))
    keys = landing_partitions(task).get_partition_keys()
    first, end = date.fromisoformat(start), date(2014, 1, 1)
    assert [d.isoformat() for d in partition_starts(first, end, cadence)] == keys
    assert len(keys) == count
    for key, following in zip(keys, [*keys[1:], "2014-01-01"], strict=True):
        assert task.partition_end(key) == following
        day = date.fromisoformat(key)
        while day.isoformat() < following:
            assert task.partition_of(day) == key
            day = next_start(day, "daily")


def test_a_month_ends_where_the_next_begins() -> None:
    assert next_start(date(2013, 1, 1), "monthly") == date(2013, 2, 1)
    assert next_start(date(2012, 12, 1), "monthly") == date(2013, 1, 1)
    assert partition_start(date(2012, 2, 29), "monthly", date(2012, 1, 1)) == date(2012, 2, 1)
    assert partition_start(date(2013, 1, 8), "weekly", date(2013, 1, 2)) == date(2013, 1, 2)
    assert partition_start(date(2013, 1, 9), "weekly", date(2013, 1, 2)) == date(2013, 1, 9)


def test_a_task_is_daily_unless_it_says_otherwise(tmp_path) -> None:
    assert read_contracts(task_file(tmp_path, cadence="")).cadence == "daily"


@pytest.mark.parametrize(
    ("start", "cadence", "partition_date", "error"),
    [
        ("2013-01-01", "hourly", "happened_at", "cadence 'hourly' is not one of"),
        ("2013-01-15", "monthly", "happened_at", "starts on a month's first day"),
        ("2013-01-01", "monthly", "event_id", "three integer columns"),
        ("2013-01-01", "monthly", "year, month", "three integer columns"),
    ],
)
def test_a_wrong_partitioning_is_a_named_error(tmp_path, start, cadence, partition_date, error):
    with pytest.raises(ValueError, match=error):
        read_contracts(task_file(tmp_path, start, cadence, partition_date))


def test_only_a_partitions_first_day_names_its_file(tmp_path) -> None:
    task = read_contracts(task_file(tmp_path))
    assert task.match_key("events/2013-03-01.csv") == (task.feeds["events"], "2013-03-01")
    assert task.match_key("events/2013-03-02.csv") is None
    daily = replace(task, cadence="daily")
    assert daily.match_key("events/2013-03-02.csv") == (task.feeds["events"], "2013-03-02")


@pytest.mark.parametrize("partition_date", ["happened_at", "year, month, day"])
def test_a_row_dated_outside_its_partition_is_quarantined(tmp_path, partition_date) -> None:
    task = read_contracts(task_file(tmp_path, partition_date=partition_date))
    feed = task.feeds["events"]
    rows = [
        "event_id,happened_at,year,month,day",
        "1,2013-03-01T00:00:00Z,2013,3,1",
        "2,2013-03-31T23:59:59Z,2013,3,31",
        "3,2013-04-01T00:00:00Z,2013,4,1",
        "4,2013-02-28T23:59:59Z,2013,2,28",
    ]
    data = ("\n".join(rows) + "\n").encode()
    got = validate_file(feed, "events/2013-03-01.csv", data, ("",), "2013-03-01", "2013-04-01")
    assert got.rows.event_id.tolist() == [1, 2]
    assert got.rejected.reason.tolist() == [
        "dated 2013-04-01, outside the partition 2013-03-01 to 2013-04-01 (exclusive)",
        "dated 2013-02-28, outside the partition 2013-03-01 to 2013-04-01 (exclusive)",
    ]
    # Without the partition's end, the file's date is the only day its rows may hold.
    day = validate_file(feed, "events/2013-03-01.csv", data, ("",), "2013-03-01")
    assert day.rows.event_id.tolist() == [1]
    assert day.rejected.reason.iloc[0] == "dated 2013-03-31, not landing day 2013-03-01"


def test_a_months_volume_is_judged_against_the_months_before() -> None:
    rule = VolumeRule(trailing=3, min_history=2, error_below=0.5, warn_deviation=0.2)
    assert baseline_days("2013-05-01", 3, "monthly", "2013-01-01") == [
        "2013-04-01",
        "2013-03-01",
        "2013-02-01",
    ]
    history = {"2013-04-01": 100, "2013-03-01": 120, "2013-02-01": 80}
    normal = judge_volume("2013-05-01", 101, history, rule, "monthly", "2013-01-01")
    assert (normal.severity, normal.baseline_median) == ("pass", 100)
    assert "median of the partitions before 100" in normal.reason
    cut = judge_volume("2013-05-01", 40, history, rule, "monthly", "2013-01-01")
    assert cut.severity == "error"


def test_a_month_missing_from_a_feed_is_named_by_its_freshness() -> None:
    rule = FreshnessRule(max_lag_days=0, lookback_days=366)
    months = ["2013-01-01", "2013-02-01", "2013-03-01", "2013-04-01"]
    verdicts = judge_freshness(
        {"ratings": set(months), "events": {"2013-01-01", "2013-03-01"}},
        rule,
        "monthly",
        "2013-01-01",
    )
    assert verdicts["ratings"].passed and verdicts["ratings"].missing_days == ()
    events = verdicts["events"]
    assert events.missing_days == ("2013-02-01", "2013-04-01")
    assert events.lag_days == 31
    assert "events has no file for 2013-02-01" in events.reason
