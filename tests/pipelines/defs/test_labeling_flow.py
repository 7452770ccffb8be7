"""The labeling loop through Dagster: export -> annotators (sim) -> import, and bad deliveries."""

import json
import logging
from datetime import date

import dagster as dg
import duckdb

from pipelines.lib.asset_keys import task_run_config
from sim.world.annotators import LabelingService
from sim.world.replay import land_days
from tests.pipelines.conftest import source_table

DAY, NEXT = "2013-01-01", "2013-01-02"


def materialize(flywheel, asset: str, partition: str, config: dict | None = None):
    return flywheel.defs.resolve_job_def("__ASSET_JOB").execute_in_process(
        instance=flywheel.instance,
        partition_key=partition,
        asset_selection=[dg.AssetKey(["flights", asset])],
        run_config=(
            task_run_config("flights", {"ops": {asset: {"config": config}}}) if config else None
        ),
    )


def expected_late(flight_ids: list[str]) -> dict[str, bool]:
    """Outcomes recomputed from the source: late if 15+ min late or never arrived."""
    f = source_table("flights")
    ids = f.year.astype(str) + "-" + f.month.astype(str).str.zfill(2) + "-"
    ids += f.day.astype(str).str.zfill(2) + "_" + f.carrier + f.flight.astype(str) + "_" + f.origin
    late = (f.arr_delay >= 15) | f.arr_delay.isna()
    outcome = dict(zip(ids, late, strict=True))
    return {i: bool(outcome[i]) for i in flight_ids}


def test_export_label_import_round_trip(flywheel):
    land_days(flywheel.zone, [date(2013, 1, 1)])
    flywheel.run("dimension_warehouse_job")
    flywheel.run("daily_warehouse_job", DAY)
    budget = {"budget": 40, "audit_share": 0.25}
    exported = materialize(flywheel, "label_tasks", DAY, budget)
    meta = exported.asset_materializations_for_node("flights__label_tasks")[0].metadata
    assert meta["dagster/row_count"].value == 40
    assert meta["reasons"].value == {"random": 40}  # no model yet: the choice is random
    tasks = flywheel.sql("select task_id, flight_id, reason from raw.label_tasks")
    assert len(tasks) == 40 and {r for _, _, r in tasks} == {"random"}
    store = flywheel.defs.resources["label_store"]
    batch = json.loads(store.read_bytes(f"outbox/flights-{DAY}.json"))
    assert sorted(t["data"]["task_id"] for t in batch) == sorted(t for t, _, _ in tasks)

    # The same day exported again chooses the same flights: nothing is exported twice.
    materialize(flywheel, "label_tasks", DAY, budget)
    assert flywheel.scalar("select count(*) from raw.label_tasks") == 40

    LabelingService(store, latency_days=1).deliver(date(2013, 1, 2))
    imported = materialize(flywheel, "flight_labels", NEXT)
    assert (
        imported.asset_materializations_for_node("flights__flight_labels")[0]
        .metadata["dagster/row_count"]
        .value
        == 40
    )
    labels = dict(flywheel.sql("select flight_id, is_late from raw.flight_labels"))
    assert labels == expected_late([f for _, f, _ in tasks])
    known = flywheel.sql("select distinct cast(known_at as date) from raw.flight_labels")
    assert known == [(date(2013, 1, 2),)]

    materialize(flywheel, "flight_labels", NEXT)  # the same delivery imported twice
    assert flywheel.scalar("select count(*) from raw.flight_labels") == 40
    assert flywheel.scalar("select count(*) from raw.quarantine") == 0


def test_bad_deliveries_are_quarantined_and_valid_labels_kept(flywheel):
    land_days(flywheel.zone, [date(2013, 1, 1)])
    flywheel.run("dimension_warehouse_job")
    flywheel.run("daily_warehouse_job", DAY)
    materialize(flywheel, "label_tasks", DAY, {"budget": 10, "audit_share": 0.0})
    store = flywheel.defs.resources["label_store"]
    LabelingService(store, latency_days=1).deliver(date(2013, 1, 2))
    delivered = json.loads(store.read_bytes(f"inbox/{NEXT}/flights-{DAY}.json"))
    answered_again = [delivered[0]]
    unknown = json.loads(json.dumps(delivered[1]))
    unknown["data"]["task_id"] = "T-2013-01-01_ZZ1_EWR"
    delivered[2]["annotations"][0]["result"][0]["value"]["choices"] = ["maybe"]
    store.write_bytes(f"inbox/{NEXT}/flights-{DAY}.json", json.dumps(delivered).encode())
    store.write_bytes(f"inbox/{NEXT}/retry.json", json.dumps([*answered_again, unknown]).encode())
    store.write_bytes(f"inbox/{NEXT}/broken.json", b'[{"id": 1, "data": ')
    materialize(flywheel, "flight_labels", NEXT)
    # Every valid answer is kept: all but the one whose label is outside the set.
    assert flywheel.scalar("select count(*) from raw.flight_labels") == 9
    reasons = [r for (r,) in flywheel.sql("select reason from raw.quarantine order by all")]
    assert len(reasons) == 4, reasons
    assert any("JSON" in r for r in reasons), reasons
    assert any("already labelled" in r for r in reasons), reasons
    assert any("unknown task" in r for r in reasons), reasons
    assert any("'maybe'" in r and "not in" in r for r in reasons), reasons


def test_inbox_sensor_requests_each_delivery_day_once(flywheel):
    store = flywheel.defs.resources["label_store"]
    store.write_bytes(f"inbox/{NEXT}/flights-{DAY}.json", b"[]\n")
    store.write_bytes("inbox/notes.txt", b"hello\n")
    sensor = flywheel.defs.resolve_sensor_def("inbox_sensor")

    def tick(cursor):
        with dg.build_sensor_context(
            cursor=cursor,
            instance=flywheel.instance,
            resources={"label_exchange": flywheel.defs.resources["label_exchange"]},
            definitions=flywheel.defs,
        ) as context:
            return sensor.evaluate_tick(context)

    first = tick(None)
    assert [r.partition_key for r in first.run_requests] == [NEXT]
    assert tick(first.cursor).run_requests == []
    store.write_bytes(f"inbox/{NEXT}/flights-{DAY}.json", b"[ ]\n")  # replaced: import again
    assert [r.partition_key for r in tick(first.cursor).run_requests] == [NEXT]


def test_with_a_champion_the_choice_follows_uncertainty_audit_and_drift(flywheel):
    land_days(flywheel.zone, [date(2013, 1, 1)])
    flywheel.run("dimension_warehouse_job")
    flywheel.run("daily_warehouse_job", DAY)
    with duckdb.connect(str(flywheel.warehouse)) as con:
        con.execute(
            "create table flight_predictions as select flight_id, "
            "(hash(flight_id) % 1000) / 1000.0 as probability, '3' as model_version "
            "from fct_flight_features"
        )
        con.execute(
            "create table drift_flagged_segments as select 'route' as segment_type, "
            "'JFK-LAX' as segment_value, timestamp '2012-12-31' as flagged_at"
        )
    result = materialize(flywheel, "label_tasks", DAY, {"budget": 20, "audit_share": 0.25})
    meta = result.asset_materializations_for_node("flights__label_tasks")[0].metadata
    reasons = meta["reasons"].value
    assert reasons["audit"] == 5
    assert 0 < reasons["drift_segment"] <= 7
    assert sum(reasons.values()) == 20 and "random" not in reasons
    assert meta["drift_flagged_segments"].value == 1
    store = flywheel.defs.resources["label_store"]
    batch = json.loads(store.read_bytes(f"outbox/flights-{DAY}.json"))
    assert all(t["predictions"][0]["model_version"] == "3" for t in batch)
    drift = [t for t in batch if t["meta"]["reason"] == "drift_segment"]
    assert all(t["data"]["route"] == "JFK-LAX" for t in drift)


def test_the_budget_is_the_tasks_unless_a_run_sets_one_and_most_of_a_day_is_warned(flywheel):
    land_days(flywheel.zone, [date(2013, 1, 1)])
    flywheel.run("dimension_warehouse_job")
    flywheel.run("daily_warehouse_job", DAY)

    def exported(config: dict | None) -> tuple[dict, list[str]]:
        result = materialize(flywheel, "label_tasks", DAY, config)
        node = result.asset_materializations_for_node("flights__label_tasks")[0]
        warned = [
            e.user_message
            for e in flywheel.instance.all_logs(result.run_id)
            if e.level == logging.WARNING and "label budget" in e.user_message
        ]
        return {k: v.value for k, v in node.metadata.items()}, warned

    own, warned = exported(None)  # the task's labels.budget: 150 flights a day
    assert own["budget"] == own["dagster/row_count"] == 150 and warned == []
    most, warned = exported({"budget": own["candidates"] - 10})
    assert most["dagster/row_count"] == own["candidates"] - 10
    assert len(warned) == 1
    assert f"of the {own['candidates']} of {DAY}" in warned[0] and "flights.yaml" in warned[0]
