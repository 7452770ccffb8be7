"""Monitoring rules and the retraining triggers: thresholds, run keys, cooldown, cursor."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from ml.drift import build_training_profile
from ml.synthetic import FEATURES
from pipelines.defs.monitoring.assets import FLAGS_TABLE, _ensure
from pipelines.defs.monitoring.triggers import build_monitoring_triggers, in_cooldown
from pipelines.lib.runs import TASK_TAG
from pipelines.lib.warehouse import DuckDBWarehouse, replace_rows
from pipelines.monitoring import drift_table, flagged_segments, realized_performance
from pipelines.task.thresholds import MonitoringSpec, Trigger

TASK = "flights"
POLICY = MonitoringSpec(
    retrain_on=tuple(Trigger),
    min_labels=100,
    cooldown_days=7,
    flagged_segment_types=("carrier", "route"),
    exclude_features=("scheduled_month",),
)


def flights(n: int, seed: int, temp_shift: float = 0.0, carrier: str | None = None):
    rng = np.random.default_rng(seed)
    features = FEATURES
    frame = pd.DataFrame(
        {c: rng.choice(["AA", "B6", "DL", "UA"], n) for c in features.categorical}
        | {c: rng.normal(50, 10, n) for c in features.numeric}
    )
    frame["temp"] += temp_shift
    frame["scheduled_month"] = 9.0 if not temp_shift else 12.0
    if carrier:
        frame.loc[: n // 2, "carrier"] = carrier
    return frame


def test_drift_table_flags_shifted_features_and_segments_not_excluded_ones() -> None:
    features = FEATURES
    training = flights(4000, seed=0)
    profile = build_training_profile(training, features.categorical, features.numeric)
    same = drift_table(profile, flights(2000, seed=1), None, features, POLICY)
    assert not same.is_drifted.any(), same[same.is_drifted]
    shifted = drift_table(
        profile, flights(2000, 2, temp_shift=30, carrier="EV"), None, features, POLICY
    )
    drifted = set(shifted.loc[shifted.is_drifted, "feature"])
    assert drifted == {"temp", "carrier"}
    # A calendar feature is excluded by the monitoring settings even though it moved.
    assert "scheduled_month" not in set(shifted.feature)
    segments = flagged_segments(profile, flights(2000, 2, 30, "EV"), shifted, POLICY)
    assert segments.segment_type.tolist()[0] == "carrier"
    assert segments.segment_value.tolist()[0] == "EV"
    assert set(segments.segment_type) == {"carrier"}  # route did not drift


def test_flagged_segments_are_stored_after_days_that_flagged_none(tmp_path) -> None:
    # The table is created by the first day monitored; that day flagged nothing (2013-01-12 of
    # the simulation): its text columns must still take the segments of the days after.
    features = FEATURES
    profile = build_training_profile(flights(4000, seed=0), features.categorical, features.numeric)
    quiet = flights(2000, seed=1)
    none = flagged_segments(
        profile, quiet, drift_table(profile, quiet, None, features, POLICY), POLICY
    )
    drifted = flights(2000, 2, temp_shift=30, carrier="EV")
    some = flagged_segments(
        profile, drifted, drift_table(profile, drifted, None, features, POLICY), POLICY
    )
    assert none.empty and not some.empty
    warehouse = DuckDBWarehouse(path=str(tmp_path / "w.duckdb"))
    for day, flags in (("2013-01-12", none), ("2013-01-13", some)):
        flags = flags.assign(flagged_at=pd.Timestamp(day), model_version="1")
        with warehouse.connect() as con:
            _ensure(con, FLAGS_TABLE, flags)
            replace_rows(con, FLAGS_TABLE, "cast(flagged_at as date)", day, flags)
    with warehouse.connect() as con:
        stored = con.df(f"select segment_type, segment_value from {FLAGS_TABLE}")
        # A row that does not fit fails with its own error, not with the aborted transaction's.
        with pytest.raises(Exception, match="Conversion Error"):
            replace_rows(
                con,
                FLAGS_TABLE,
                "cast(flagged_at as date)",
                "2013-01-14",
                some.assign(flagged_at="not a time", model_version="1"),
            )
    assert stored.values.tolist() == some[["segment_type", "segment_value"]].values.tolist()


def test_realized_performance_needs_enough_labels_and_flags_decay() -> None:
    rng = np.random.default_rng(0)
    y = rng.random(400) < 0.3
    good = np.where(y, 0.7, 0.2) + rng.normal(0, 0.05, 400)
    validation = {"auroc": 0.9, "logloss": 0.40}
    few = realized_performance(
        pd.DataFrame({"label": y[:50], "probability": good[:50]}), validation, POLICY
    )
    assert few["is_decayed"] is False and "too few labels (50 < 100" in few["status"]
    fine = realized_performance(pd.DataFrame({"label": y, "probability": good}), validation, POLICY)
    assert fine["auroc"] > 0.9 - POLICY.max_auroc_drop and fine["is_decayed"] is False
    noise = realized_performance(
        pd.DataFrame({"label": y, "probability": rng.random(400)}), validation, POLICY
    )
    assert noise["auroc"] < 0.7 and noise["is_decayed"] is True


def test_realized_performance_of_several_classes_reads_each_class_probability() -> None:
    rng = np.random.default_rng(0)
    classes = (1.0, 2.0, 3.0)
    y = rng.integers(0, 3, 600)
    sharp = np.full((600, 3), 0.1)
    sharp[np.arange(600), y] = 0.8
    labelled = pd.DataFrame({"label": np.asarray(classes)[y], "probability": 0.5})
    expected = {"auroc": 0.95, "logloss": 0.7}
    columns = [f"p_{k}" for k in range(3)]
    fine = realized_performance(
        labelled.assign(**dict(zip(columns, sharp.T, strict=True))), expected, POLICY, classes
    )
    assert fine["auroc"] == pytest.approx(1.0) and fine["is_decayed"] is False
    assert fine["logloss"] == pytest.approx(-np.log(0.8))
    flat = realized_performance(
        labelled.assign(**dict.fromkeys(columns, 1 / 3)), expected, POLICY, classes
    )
    assert flat["auroc"] == pytest.approx(0.5) and flat["is_decayed"] is True
    with pytest.raises(ValueError, match=r"holds 4\.0"):
        realized_performance(
            labelled.assign(label=4.0, **dict.fromkeys(columns, 1 / 3)), expected, POLICY, classes
        )


@pytest.mark.parametrize(
    ("day", "last", "expected"),
    [
        ("2013-10-08", None, False),
        ("2013-10-08", "2013-10-01", False),
        ("2013-10-07", "2013-10-01", True),
        ("2013-10-01", "2013-10-01", True),
    ],
)
def test_cooldown_counts_monitored_days(day: str, last: str | None, expected: bool) -> None:
    assert in_cooldown(day, last, 7) is expected


# The labels and champion assets, and the monitoring asset of each alarm.
MONITORED = (
    dg.AssetKey("labels"),
    dg.AssetKey("champion_model"),
    {
        Trigger.EXCESS_LOSS: dg.AssetKey("excess_loss"),
        Trigger.DRIFT: dg.AssetKey("feature_drift"),
        Trigger.PERFORMANCE: dg.AssetKey("model_performance"),
    },
)


@pytest.fixture
def triggers():
    job = dg.define_asset_job(
        "retraining_job", selection=dg.AssetSelection.all(), tags={TASK_TAG: TASK}
    )
    sensors, schedule = build_monitoring_triggers(job, POLICY, *MONITORED)
    daily = dg.DailyPartitionsDefinition("2013-01-01")

    @dg.asset(partitions_def=daily)
    def feature_drift() -> None: ...

    @dg.asset(partitions_def=daily)
    def model_performance() -> None: ...

    @dg.asset(partitions_def=daily)
    def excess_loss() -> None: ...

    @dg.asset(partitions_def=daily)
    def labels() -> None: ...

    defs = dg.Definitions(
        assets=[feature_drift, model_performance, excess_loss, labels],
        jobs=[job],
        sensors=sensors,
        schedules=[schedule],
    )
    return defs, defs.resolve_sensor_def("drift_sensor"), schedule


def report(instance: dg.DagsterInstance, day: str, drifted: bool | None) -> None:
    metadata = {"model_version": 3} | ({} if drifted is None else {"is_drifted": drifted})
    instance.report_runless_asset_event(
        dg.AssetMaterialization("feature_drift", partition=day, metadata=metadata)
    )


def tick(defs, sensor, instance, cursor):
    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs) as context:
        return sensor.evaluate_tick(context)


def test_drift_sensor_requests_once_per_event_and_keeps_quiet_in_cooldown(triggers) -> None:
    defs, sensor, _ = triggers
    with dg.instance_for_test() as instance:
        report(instance, "2013-10-01", None)  # no champion yet: nothing judged
        report(instance, "2013-10-02", False)
        report(instance, "2013-10-03", True)
        report(instance, "2013-10-04", True)  # in cooldown after 10-03
        first = tick(defs, sensor, instance, None)
        assert [r.run_key for r in first.run_requests] == ["drift_sensor:2013-10-03"]
        request = first.run_requests[0]
        assert request.tags["flywheel/trigger"] == "drift"
        assert request.tags["flywheel/event_day"] == "2013-10-03"
        assert request.tags["flywheel/champion_version"] == "3"
        # The cursor moves past every event read: nothing is requested twice.
        assert tick(defs, sensor, instance, first.cursor).run_requests == []
        report(instance, "2013-10-09", True)
        report(instance, "2013-10-10", True)
        later = tick(defs, sensor, instance, first.cursor)
        assert [r.run_key for r in later.run_requests] == ["drift_sensor:2013-10-10"]
        assert json.loads(later.cursor)["last_trigger_day"] == "2013-10-10"


@pytest.mark.parametrize(
    ("trigger", "asset", "flag"),
    [
        (Trigger.PERFORMANCE, "model_performance", "is_decayed"),
        (Trigger.EXCESS_LOSS, "excess_loss", "is_alarm"),
    ],
    ids=str,
)
def test_an_alarm_sensor_requests_once_on_its_event_with_its_trigger_tag(
    triggers, trigger: Trigger, asset: str, flag: str
) -> None:
    defs, *_ = triggers
    sensor = defs.resolve_sensor_def(trigger.definition_name)
    with dg.instance_for_test() as instance:
        for day, event in (("2013-10-02", False), ("2013-10-03", True)):
            instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    asset, partition=day, metadata={"model_version": 3, flag: event}
                )
            )
        first = tick(defs, sensor, instance, None)
        assert tick(defs, sensor, instance, first.cursor).run_requests == []
    assert [r.run_key for r in first.run_requests] == [f"{trigger.definition_name}:2013-10-03"]
    assert first.run_requests[0].tags["flywheel/trigger"] == str(trigger)


def played(excess: list[float], start: str) -> list[dict[str, object]]:
    """The alarm's verdict on each day of `excess` from `start`, as the daily asset gives them."""
    from pipelines.monitoring import replay_alarm

    days = pd.Series(pd.date_range(start, periods=len(excess), freq="D").date)
    return replay_alarm(days, pd.Series(excess), ALARM).to_dict("records")


ALARM = MonitoringSpec(
    alarm_min_excess_loss=0.04,
    alarm_history_days=60,
    alarm_recent_days=7,
    alarm_min_history_days=20,
    alarm_run_length=30,
)


def test_the_excess_loss_alarm_arms_on_enough_reference_days_and_fires_on_a_step() -> None:
    rng = np.random.default_rng(0)
    quiet = list(rng.normal(0.01, 0.05, 27))
    # Fewer than 20 reference days before the recent 7: not armed, whatever the day's loss.
    early = played([*quiet[:25], 5.0], "2013-06-01")
    assert not any(v["is_alarm"] for v in early)
    assert early[-1]["status"].startswith("not armed: 18 of 20")
    # Armed from day 27 on; a step of 0.3 nats from that day: the CUSUM crosses within days.
    verdicts = played([*quiet, *[0.31] * 10], "2013-06-01")
    fired = [k for k, v in enumerate(verdicts) if v["is_alarm"]]
    assert fired and 27 <= fired[0] <= 30, [v["status"] for v in verdicts[25:]]
    assert verdicts[27]["reference_days"] == 20
    assert verdicts[27]["reference_mean"] == pytest.approx(np.mean(quiet[:20]))
    # After an alarm the sum starts again from 0: the next day holds one day's excess.
    after = verdicts[fired[0] + 1]
    assert after["cusum"] == pytest.approx(0.31 - after["reference_mean"] - 0.02)
    # Days below the level bring the sum back to 0 once the step ends.
    ended = played([*quiet, *[0.31] * 2, *[-0.2] * 3], "2013-06-01")
    assert ended[28]["cusum"] > 0 and ended[-1]["cusum"] == 0.0 and not ended[-1]["is_alarm"]


def test_the_excess_loss_of_a_day_reads_each_class_probability() -> None:
    from pipelines.monitoring import daily_excess_loss

    binary = daily_excess_loss(pd.DataFrame({"label": [True, False], "probability": [0.8, 0.8]}))
    loss = -(np.log(0.8) + np.log(0.2)) / 2
    entropy = -(0.8 * np.log(0.8) + 0.2 * np.log(0.2))
    assert binary["labels"] == 2
    assert binary["excess_loss"] == pytest.approx(loss - entropy)
    three = pd.DataFrame({"label": ["b"], "p_0": [0.2], "p_1": [0.5], "p_2": [0.3]})
    many = daily_excess_loss(three, ("a", "b", "c"))
    h = -(0.2 * np.log(0.2) + 0.5 * np.log(0.5) + 0.3 * np.log(0.3))
    assert many["excess_loss"] == pytest.approx(-np.log(0.5) - h)
    assert np.isnan(daily_excess_loss(three.iloc[:0], ("a", "b", "c"))["excess_loss"])


def add_retraining(
    instance: dg.DagsterInstance,
    event_day: str,
    started: bool = False,
    trigger: str = "schedule",
    task: str = TASK,
) -> None:
    """Record a finished retraining run of `task` that trained on data up to `event_day`
    (`started`: with its start and success events, timed now)."""
    run = instance.add_run(
        dg.DagsterRun(
            job_name="retraining_job",
            run_id=f"retraining-{event_day}" + ("" if task == TASK else f"-{task}"),
            status=dg.DagsterRunStatus.NOT_STARTED if started else dg.DagsterRunStatus.SUCCESS,
            tags={"flywheel/event_day": event_day, "flywheel/trigger": trigger, TASK_TAG: task},
        )
    )
    if started:
        for kind in (dg.DagsterEventType.RUN_START, dg.DagsterEventType.RUN_SUCCESS):
            instance.report_dagster_event(dg.DagsterEvent(kind.value, run.job_name), run.run_id)


def test_no_request_when_a_retraining_already_covers_the_day(triggers) -> None:
    defs, sensor, _ = triggers
    with dg.instance_for_test() as instance:
        add_retraining(instance, "2013-10-06")
        report(instance, "2013-10-05", True)
        assert tick(defs, sensor, instance, None).run_requests == []


def test_another_tasks_retraining_covers_nothing(triggers) -> None:
    """Code locations of two tasks share the instance and their jobs' names: a retraining of the
    other task neither covers this task's day nor starts its cooldown."""
    defs, sensor, _ = triggers
    with dg.instance_for_test() as instance:
        add_retraining(instance, "2013-10-06", trigger="drift", task="movielens")
        report(instance, "2013-10-05", True)
        assert [r.run_key for r in tick(defs, sensor, instance, None).run_requests] == [
            "drift_sensor:2013-10-05"
        ]


def test_the_sensors_share_one_cooldown_and_a_schedule_run_starts_none(triggers) -> None:
    defs, sensor, _ = triggers
    with dg.instance_for_test() as instance:
        add_retraining(instance, "2013-10-01", trigger="schedule")
        add_retraining(instance, "2013-10-03", trigger="performance")
        report(instance, "2013-10-04", True)  # 1 day after the performance sensor's run
        report(instance, "2013-10-09", True)  # 6 days after
        first = tick(defs, sensor, instance, None)
        assert first.run_requests == []
        report(instance, "2013-10-10", True)  # 7 days after: the cooldown is over
        later = tick(defs, sensor, instance, first.cursor)
    assert [r.run_key for r in later.run_requests] == ["drift_sensor:2013-10-10"]


def decide(instance: dg.DagsterInstance, event_day: str, decision: str) -> None:
    """The gate's decision on the retraining run of `event_day` (see add_retraining)."""
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData

    materialization = dg.AssetMaterialization("champion_model", metadata={"decision": decision})
    event = DagsterEvent(
        DagsterEventType.ASSET_MATERIALIZATION.value,
        "retraining_job",
        event_specific_data=StepMaterializationData(materialization),
    )
    instance.report_dagster_event(event, f"retraining-{event_day}")


@pytest.mark.parametrize(
    ("trained", "decision", "skip"),
    [
        # the champion is 5 days old
        (
            "2013-10-01",
            "promoted",
            "the champion was trained on data up to 2013-10-01, within 7 days",
        ),
        # the champion (09-20) is older, but the gate rejected a challenger 5 days ago
        (
            "2013-10-01",
            "rejected",
            "a retraining on data up to 2013-10-01, within 7 days, kept the champion trained on "
            "data up to 2013-09-20",
        ),
        ("2013-09-29", "promoted", None),  # 7 days old: the cooldown is over
        ("2013-09-29", "rejected", None),  # and the rejected one's too
    ],
)
def test_weekly_schedule_waits_while_the_champion_or_the_last_retraining_is_within_the_cooldown(
    triggers, trained: str, decision: str, skip: str | None
) -> None:
    *_, schedule = triggers
    moment = datetime(2013, 10, 7, 4, tzinfo=UTC)  # its data up to Sunday 10-06
    with dg.instance_for_test() as instance:
        add_retraining(instance, "2013-09-20", trigger="schedule")
        decide(instance, "2013-09-20", "promoted")
        add_retraining(instance, trained, trigger="drift")
        decide(instance, trained, decision)
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=moment) as ctx:
            data = schedule.evaluate_tick(ctx)
    if skip is None:
        assert [r.tags["flywheel/event_day"] for r in data.run_requests] == ["2013-10-06"]
    else:
        assert not data.run_requests
        assert data.skip_message == skip


def test_weekly_schedule_retries_within_the_cooldown_while_there_is_no_champion(triggers) -> None:
    """The first model was rejected (it did not beat the baselines' floor): nothing scores
    production, so the next tick tries again whenever the last attempt was."""
    *_, schedule = triggers
    moment = datetime(2013, 10, 7, 4, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        add_retraining(instance, "2013-10-05", trigger="bootstrap")
        decide(instance, "2013-10-05", "rejected")
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=moment) as ctx:
            data = schedule.evaluate_tick(ctx)
    assert [r.tags["flywheel/event_day"] for r in data.run_requests] == ["2013-10-06"]


def test_weekly_schedule_counts_no_failed_retraining(triggers) -> None:
    *_, schedule = triggers
    moment = datetime(2013, 10, 7, 4, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        add_retraining(instance, "2013-09-20")
        decide(instance, "2013-09-20", "promoted")
        instance.add_run(
            dg.DagsterRun(
                job_name="retraining_job",
                run_id="failed-2013-10-03",
                status=dg.DagsterRunStatus.FAILURE,
                tags={
                    "flywheel/event_day": "2013-10-03",
                    "flywheel/trigger": "drift",
                    TASK_TAG: TASK,
                },
            )
        )
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=moment) as ctx:
            data = schedule.evaluate_tick(ctx)
    assert [r.tags["flywheel/event_day"] for r in data.run_requests] == ["2013-10-06"]


def import_labels(instance: dg.DagsterInstance, day: str) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization("labels", partition=day))


def test_no_request_before_a_label_came_in_since_the_last_retraining(triggers) -> None:
    defs, sensor, schedule = triggers
    with dg.instance_for_test() as instance:
        import_labels(instance, "2013-10-01")
        add_retraining(instance, "2013-10-01", started=True)  # the first model, on every label
        report(instance, "2013-10-02", True)  # drift the next morning, no new label yet
        first = tick(defs, sensor, instance, None)
        assert first.run_requests == []
        # The event is read (the cursor moved), and no cooldown started.
        assert json.loads(first.cursor)["last_trigger_day"] is None
        moment = datetime(2013, 10, 7, 4, tzinfo=UTC)
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=moment) as ctx:
            skipped = schedule.evaluate_tick(ctx)
        assert not skipped.run_requests
        assert skipped.skip_message == "no label came in since run retraining-2013-10-01"

        import_labels(instance, "2013-10-02")
        report(instance, "2013-10-03", True)
        later = tick(defs, sensor, instance, first.cursor)
        assert [r.run_key for r in later.run_requests] == ["drift_sensor:2013-10-03"]


def test_weekly_schedule_keys_runs_by_their_tick(triggers) -> None:
    *_, schedule = triggers
    moment = datetime(2013, 10, 7, 4, tzinfo=UTC)  # a Monday
    with (
        dg.instance_for_test() as instance,
        dg.build_schedule_context(instance=instance, scheduled_execution_time=moment) as ctx,
    ):
        (request,) = schedule.evaluate_tick(ctx).run_requests
    assert schedule.cron_schedule == "0 4 * * 1"
    assert request.run_key == f"retraining_schedule:{moment.isoformat()}"
    assert request.tags["flywheel/trigger"] == "schedule"
    assert request.tags["flywheel/event_day"] == "2013-10-06"


def test_weekly_schedule_skips_days_a_sensor_retraining_covered(triggers) -> None:
    *_, schedule = triggers
    moment = datetime(2013, 10, 7, 4, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        add_retraining(instance, "2013-10-06")
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=moment) as ctx:
            data = schedule.evaluate_tick(ctx)
    assert not data.run_requests
    assert "already retrains on data up to 2013-10-06" in data.skip_message


def test_a_schedule_tick_in_the_simulator_leaves_no_instance_open(triggers) -> None:
    """A schedule's evaluation context opens its own instance from ours. Left open, that
    instance stays Dagster's current one, and its eventual garbage collection resets that state
    under whatever code runs then (a later test failed that way, now and then)."""
    # Internal to Dagster: where the current instance's definitions-state storage is kept.
    from dagster._core.storage.defs_state.base import DefsStateStorage

    from sim.driver.in_process import ScheduleTicker

    defs, *_ = triggers
    with dg.instance_for_test() as instance:
        add_retraining(instance, "2013-10-06")  # the tick requests nothing: no run to execute
        current = DefsStateStorage.get()
        assert current is instance.defs_state_storage
        requests = ScheduleTicker(defs, instance, "retraining_schedule").requests(
            datetime(2013, 10, 7, 4, tzinfo=UTC)
        )
        assert DefsStateStorage.get() is current
    assert requests == []


def test_a_trigger_retrain_on_leaves_out_watches_and_requests_nothing(monkeypatch) -> None:
    from dataclasses import replace

    from pipelines.task import load_task

    job = dg.define_asset_job(
        "retraining_job", selection=dg.AssetSelection.all(), tags={TASK_TAG: TASK}
    )
    watching = replace(POLICY, retrain_on=("performance",))
    sensors, schedule = build_monitoring_triggers(job, watching, *MONITORED)
    drift = next(s for s in sensors if s.name == "drift_sensor")

    @dg.asset(partitions_def=dg.DailyPartitionsDefinition("2013-01-01"))
    def feature_drift() -> None: ...

    defs = dg.Definitions(assets=[feature_drift], jobs=[job], sensors=[drift])
    with dg.instance_for_test() as instance:
        report(instance, "2013-10-03", True)
        assert tick(defs, drift, instance, None).run_requests == []
        moment = datetime(2013, 10, 7, 4, tzinfo=UTC)
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=moment) as ctx:
            data = schedule.evaluate_tick(ctx)
    assert not data.run_requests and "leaves the schedule out" in data.skip_message
    # The task file's setting, overridden by FLYWHEEL_RETRAIN_ON; an unknown trigger is named.
    assert load_task("flights").monitoring.retrain_on
    monkeypatch.setenv("FLYWHEEL_RETRAIN_ON", "performance,schedule")
    assert load_task("flights").monitoring.retrain_on == ("performance", "schedule")
    monkeypatch.setenv("FLYWHEEL_RETRAIN_ON", "none")
    assert load_task("flights").monitoring.retrain_on == ()
    monkeypatch.setenv("FLYWHEEL_RETRAIN_ON", "drift,weather")
    with pytest.raises(ValueError, match=r"unknown triggers \['weather'\]"):
        load_task("flights")
