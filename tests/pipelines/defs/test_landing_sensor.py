"""landing_sensor: one run per new or replaced landing day, nothing twice, nothing missed, and
a landing of several files taken whole."""

import json
from datetime import date

import dagster as dg
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from pipelines.lib.landing_zone import landing_settled
from pipelines.task import load_task
from sim.world.replay import day_files, dimension_files, land_days


def tick(flywheel, cursor: str | None):
    sensor = flywheel.defs.resolve_sensor_def("landing_sensor")
    with dg.build_sensor_context(
        cursor=cursor,
        instance=flywheel.instance,
        resources={"landing_zone": flywheel.zone},
        definitions=flywheel.defs,
    ) as context:
        return sensor.evaluate_tick(context)


def take(flywheel, cursor: str | None):
    """Two evaluations, as the daemon makes them an interval apart, with nothing landing
    between: the first finds the new files, the second takes them."""
    first = tick(flywheel, cursor)
    assert first.run_requests == [] and not landing_settled(first.cursor)
    assert first.asset_events == []
    second = tick(flywheel, first.cursor)
    assert landing_settled(second.cursor)
    return second


def by_partition(result) -> dict[str | None, dg.RunRequest]:
    return {r.partition_key: r for r in result.run_requests}


def build_dimensions(flywheel, but: str | None = None) -> None:
    """Record what a dimension run materializes (all of it, or all but the asset `but`)."""
    job = flywheel.defs.resolve_job_def("dimension_warehouse_job")
    for key in job.asset_layer.executable_asset_keys:
        if key.path[-1] != but:
            flywheel.instance.report_runless_asset_event(dg.AssetMaterialization(key))


def test_days_wait_for_the_first_dimension_run_then_go_at_once(flywheel):
    land_days(flywheel.zone, [date(2013, 1, 1), date(2013, 1, 2)])
    first = tick(flywheel, tick(flywheel, None).cursor)
    # A day's models join the dimension tables: no day runs beside the first dimension run.
    assert [(r.job_name, r.partition_key) for r in first.run_requests] == [
        ("dimension_warehouse_job", None)
    ]
    assert not landing_settled(first.cursor)  # the days wait in the cursor
    waiting = tick(flywheel, first.cursor)  # its run has not built them yet: the days wait
    assert waiting.run_requests == []
    build_dimensions(flywheel, but="stg_landing__airports")
    assert tick(flywheel, waiting.cursor).run_requests == []  # one view short is not built
    build_dimensions(flywheel)
    # The listing settled before the days were held: they go at the next evaluation.
    days = tick(flywheel, waiting.cursor)
    assert [(r.job_name, r.partition_key) for r in days.run_requests] == [
        ("daily_warehouse_job", "2013-01-01"),
        ("daily_warehouse_job", "2013-01-02"),
    ]
    assert landing_settled(days.cursor)
    assert tick(flywheel, days.cursor).run_requests == []


def test_requests_each_landed_day_once(flywheel):
    build_dimensions(flywheel)
    land_days(flywheel.zone, [date(2013, 1, 1), date(2013, 1, 2)])
    first = take(flywheel, None)
    requests = by_partition(first)
    assert sorted(requests, key=str) == ["2013-01-01", "2013-01-02", None]
    assert requests[None].job_name == "dimension_warehouse_job"
    assert first.run_requests[0].partition_key is None  # the dimension tables are requested first
    day = requests["2013-01-01"]
    assert day.job_name == "daily_warehouse_job"
    selected = {k.path[-1] for k in day.asset_selection}
    assert {"raw_flights", "raw_weather", "fct_flight_features"} <= selected
    assert "raw_planes" not in selected

    again = tick(flywheel, first.cursor)
    assert again.run_requests == []

    land_days(flywheel.zone, [date(2013, 1, 3)])
    later = take(flywheel, again.cursor)
    assert list(by_partition(later)) == ["2013-01-03"]


def test_a_landing_under_way_is_taken_whole_once_the_listing_settles(flywheel):
    build_dimensions(flywheel)
    dimensions = iter(dimension_files().items())
    flywheel.zone.write_bytes(*next(dimensions))
    first = tick(flywheel, None)  # one dimension file of several is there
    assert first.run_requests == [] and not landing_settled(first.cursor)
    assert first.skip_message is not None and "1 new or replaced" in first.skip_message
    for key, data in dimensions:
        flywheel.zone.write_bytes(key, data)
    for key, data in day_files(date(2013, 1, 1)).items():
        flywheel.zone.write_bytes(key, data)
    moved = tick(flywheel, first.cursor)  # more have landed since: still waiting
    assert moved.run_requests == [] and not landing_settled(moved.cursor)
    taken = tick(flywheel, moved.cursor)
    assert [(r.job_name, r.partition_key) for r in taken.run_requests] == [
        ("dimension_warehouse_job", None),
        ("daily_warehouse_job", "2013-01-01"),
    ]
    dimension = taken.run_requests[0]
    tables = sorted(feed.asset_name for feed in load_task().dimension_feeds)
    assert len(tables) > 1 and dimension.tags["flywheel/files"].split(",") == tables
    daily = taken.run_requests[1]
    assert {"raw_flights", "raw_weather"} <= {k.path[-1] for k in daily.asset_selection}
    assert tick(flywheel, taken.cursor).run_requests == []


def test_a_cursor_of_the_earlier_format_is_read_as_the_files_it_has_seen(flywheel):
    build_dimensions(flywheel)
    land_days(flywheel.zone, [date(2013, 1, 1)])
    old = json.dumps({f.key: f.version for f in flywheel.zone.list_files()})
    assert tick(flywheel, old).run_requests == []
    land_days(flywheel.zone, [date(2013, 1, 2)])
    assert list(by_partition(take(flywheel, old))) == ["2013-01-02"]


def test_a_replaced_file_is_requested_again_with_a_new_run_key(flywheel):
    build_dimensions(flywheel)
    land_days(flywheel.zone, [date(2013, 1, 1)])
    first = take(flywheel, None)
    old_key = by_partition(first)["2013-01-01"].run_key
    data = flywheel.zone.read_bytes("weather/2013-01-01.csv")
    flywheel.zone.write_bytes("weather/2013-01-01.csv", data)
    assert tick(flywheel, first.cursor).run_requests == []  # same bytes: nothing to do
    lines = data.decode().splitlines()
    flywheel.zone.write_bytes("weather/2013-01-01.csv", ("\n".join(lines[:-1]) + "\n").encode())
    second = take(flywheel, first.cursor)
    request = by_partition(second)["2013-01-01"]
    assert request.run_key != old_key
    assert {k.path[-1] for k in request.asset_selection} >= {"raw_weather"}
    assert "raw_flights" not in {k.path[-1] for k in request.asset_selection}


def test_a_misnamed_file_is_reported_and_not_requested(flywheel, capfd):
    flywheel.zone.write_bytes("flights/2013-1-5.csv", b"year\n2013\n")
    flywheel.zone.write_bytes("flights/2014-06-01.csv", b"year\n2014\n")
    flywheel.zone.write_bytes("notes/readme.txt", b"hello\n")
    result = tick(flywheel, None)  # files that fit no feed are not waited for
    assert result.run_requests == [] and landing_settled(result.cursor)
    logged = capfd.readouterr().err
    for key in ("flights/2013-1-5.csv", "flights/2014-06-01.csv", "notes/readme.txt"):
        assert f"WARNING - landing file '{key}' fits no feed" in logged
    tick(flywheel, result.cursor)
    assert "fits no feed" not in capfd.readouterr().err  # once per version, not every tick


def test_freshness_is_reported_when_the_daily_files_change(flywheel):
    build_dimensions(flywheel)
    land_days(flywheel.zone, [date(2013, 1, 1), date(2013, 1, 2)])
    flights_only = day_files(date(2013, 1, 3))
    flywheel.zone.write_bytes("flights/2013-01-03.csv", flights_only["flights/2013-01-03.csv"])
    first = take(flywheel, None)
    events = {e.asset_key.path[-1]: e for e in first.asset_events}
    assert sorted(events) == ["raw_flights", "raw_weather"]
    assert events["raw_flights"].passed
    weather = events["raw_weather"]
    assert (weather.check_name, weather.passed, weather.severity) == (
        "freshness",
        False,
        dg.AssetCheckSeverity.WARN,
    )
    assert weather.description == (
        "weather trails the landing frontier 2013-01-03 by 1 day(s) "
        "(newest file 2013-01-02; 0 allowed)"
    )
    assert weather.metadata["missing_days"].value == ["2013-01-03"]
    # The daemon stores what the sensor reports against the check declared on the asset.
    key = dg.AssetCheckKey(dg.AssetKey(["flights", "raw_weather"]), "freshness")
    assert key in flywheel.defs.resolve_asset_graph().asset_check_keys
    for event in first.asset_events:
        flywheel.instance.report_runless_asset_event(event)
    record = flywheel.instance.get_latest_asset_check_evaluation_record(key)
    assert record.status == AssetCheckExecutionRecordStatus.FAILED
    assert record.event.asset_check_evaluation.description == weather.description

    assert tick(flywheel, first.cursor).asset_events == []  # nothing changed, nothing reported
    land_days(flywheel.zone, [date(2013, 1, 3)])
    later = take(flywheel, first.cursor)
    assert [(e.asset_key.path[-1], e.passed) for e in later.asset_events] == [
        ("raw_flights", True),
        ("raw_weather", True),
    ]


def test_a_stray_file_rewritten_at_every_evaluation_holds_nothing_back(flywheel):
    build_dimensions(flywheel)
    land_days(flywheel.zone, [date(2013, 1, 1)])
    cursor = None
    for n in range(3):
        flywheel.zone.write_bytes("notes/heartbeat.txt", f"{n}\n".encode())
        result = tick(flywheel, cursor)
        cursor = result.cursor
        if result.run_requests:
            break
    assert n == 1  # the landed day waits one evaluation, the rewritten stray file none
    assert list(by_partition(result)) == [None, "2013-01-01"]
