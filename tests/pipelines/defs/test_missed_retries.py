"""A failed run that Dagster tagged `will_retry=true` and never retried gets its retry, once."""

from __future__ import annotations

import time

import dagster as dg
import pytest

from pipelines.defs.runs import sensors
from pipelines.defs.runs.sensors import (
    AUTO_RETRY_RUN_TAG,
    WILL_RETRY_TAG,
    build_missed_retry_sensor,
    missed_retries,
)
from pipelines.lib.runs import PARENT_RUN_TAG, RETRY_NUMBER_TAG, ROOT_RUN_TAG, TASK_TAG

PARTITIONS = dg.DailyPartitionsDefinition(start_date="2013-01-01")


@dg.op(config_schema={"fail": bool})
def load_day(context) -> None:
    if context.op_config["fail"]:
        raise RuntimeError("killed mid-step")


@dg.job(partitions_def=PARTITIONS, tags={"flywheel/kind": "daily", TASK_TAG: "flights"})
def day_job() -> None:
    load_day()


def failed_run(instance: dg.DagsterInstance, day: str, **tags: str) -> dg.DagsterRun:
    """A run of `day` that failed, tagged as Dagster tags a run it will retry."""
    result = day_job.execute_in_process(
        instance=instance,
        partition_key=day,
        run_config={"ops": {"load_day": {"config": {"fail": True}}}},
        tags={"dagster/run_key": f"landing:{day}", "dagster/sensor_name": "landing_sensor", **tags},
        raise_on_error=False,
    )
    assert not result.success
    instance.add_run_tags(result.run_id, {WILL_RETRY_TAG: "true"})
    return instance.get_run_by_id(result.run_id)


@pytest.fixture
def instance():
    overrides = {"run_retries": {"enabled": True, "max_retries": 1}}
    with dg.instance_for_test(overrides=overrides) as instance:
        yield instance


def tick(instance: dg.DagsterInstance) -> list[dg.RunRequest]:
    sensor = build_missed_retry_sensor("flights", [day_job])
    with dg.build_sensor_context(instance=instance, sensor_name=sensor.name) as context:
        return list(sensor(context) or [])


def test_a_promised_retry_that_never_came_is_requested_once(instance, monkeypatch):
    run = failed_run(instance, "2013-01-02")
    # Within the grace period, Dagster's own retry may still come.
    assert tick(instance) == []
    monkeypatch.setattr(sensors, "GRACE_S", 0.0)

    (request,) = tick(instance)

    assert request.job_name == "day_job" and request.partition_key == "2013-01-02"
    assert request.run_key == f"missed_retry:{run.run_id}"
    assert request.run_config == run.run_config
    assert request.tags[PARENT_RUN_TAG] == request.tags[ROOT_RUN_TAG] == run.run_id
    assert request.tags[RETRY_NUMBER_TAG] == "1" and request.tags["flywheel/kind"] == "daily"
    # Not the failed run's bookkeeping, nor the sensor that asked for it.
    assert not {WILL_RETRY_TAG, "dagster/run_key", "dagster/sensor_name"} & set(request.tags)

    # Once the retry exists (whoever launched it), nothing is missing.
    day_job.execute_in_process(
        instance=instance,
        partition_key="2013-01-02",
        run_config={"ops": {"load_day": {"config": {"fail": False}}}},
        tags=request.tags,
    )
    assert tick(instance) == []


def test_retried_spent_or_old_runs_are_left_alone(instance, monkeypatch):
    monkeypatch.setattr(sensors, "GRACE_S", 0.0)
    failed_run(instance, "2013-01-03", **{AUTO_RETRY_RUN_TAG: "launched-by-dagster"})
    # Its one retry already ran and failed too: max_retries is spent.
    failed_run(instance, "2013-01-04", **{RETRY_NUMBER_TAG: "1"})
    assert tick(instance) == []
    # A failure older than the lookback is not looked at.
    recent = failed_run(instance, "2013-01-05")
    # Another task's run is its own code location's to retry (the same job name there or not).
    other = failed_run(instance, "2013-01-06", **{TASK_TAG: "movielens"})
    missed = {run.run_id for run in missed_retries(instance, time.time(), "flights")}
    assert recent.run_id in missed and other.run_id not in missed
    later = time.time() + sensors.LOOKBACK_S + 60
    assert list(missed_retries(instance, later, "flights")) == []


def test_a_retry_that_dagster_failed_to_launch_is_requested_at_once(instance):
    """With the code server gone, Dagster's run-retry daemon records that it failed to retry
    the run and tags it will_retry=false, for good: the sensor requests the retry once the code
    location is back (it runs there), without a grace period."""
    gave_up = failed_run(instance, "2013-01-07")
    instance.report_engine_event(sensors.RETRY_FAILED_MESSAGE, gave_up)
    instance.add_run_tags(gave_up.run_id, {WILL_RETRY_TAG: "false"})
    # Not to be retried by the policy (the embedded instance's step failures), no attempt made.
    refused = failed_run(instance, "2013-01-08")
    instance.add_run_tags(refused.run_id, {WILL_RETRY_TAG: "false"})
    # The daemon failed to launch a retry whose run had spent its retries.
    spent = failed_run(instance, "2013-01-09", **{RETRY_NUMBER_TAG: "1"})
    instance.report_engine_event(sensors.RETRY_FAILED_MESSAGE, spent)
    instance.add_run_tags(spent.run_id, {WILL_RETRY_TAG: "false"})

    (request,) = tick(instance)

    assert request.partition_key == "2013-01-07" and request.tags[PARENT_RUN_TAG] == gave_up.run_id
    assert request.run_key == f"missed_retry:{gave_up.run_id}"
    day_job.execute_in_process(
        instance=instance,
        partition_key="2013-01-07",
        run_config={"ops": {"load_day": {"config": {"fail": False}}}},
        tags=request.tags,
    )
    assert tick(instance) == []
