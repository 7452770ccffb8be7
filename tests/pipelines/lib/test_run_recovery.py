"""Dead runs are failed and freed; a live holder makes a pool wait fail naming it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import dagster as dg
import duckdb
import psutil
import pytest

from pipelines.lib.runs import (
    HOST_TAG,
    PID_STARTED_TAG,
    PID_TAG,
    PoolWaitTimeoutError,
    earlier_attempts,
    fail_dead_runs,
    full_pool_holders,
    process_tags,
    record_child_process,
    retry_tags,
    wait_for_pools,
)
from pipelines.lib.tracking import tracker_resource
from tests.pipelines.killing import DAGSTER_YAML, instance_at, lock_holder


@pytest.fixture
def instance(tmp_path):
    shutil.copy(DAGSTER_YAML, tmp_path / "dagster.yaml")
    with instance_at(str(tmp_path)) as instance:
        yield instance


def started_run(
    instance: dg.DagsterInstance, tags: dict[str, str], claim: bool = True
) -> dg.DagsterRun:
    """A STARTED run, holding the `warehouse` pool's one slot if `claim`."""
    run = dg.DagsterRun(
        job_name="daily_warehouse_job",
        run_id=str(uuid.uuid4()),
        status=dg.DagsterRunStatus.STARTED,
        tags={"dagster/partition": "2013-01-02", **tags},
    )
    instance.add_run(run)
    if claim:
        storage = instance.event_log_storage
        storage.initialize_concurrency_limit_to_default("warehouse")
        status = storage.claim_concurrency_slot("warehouse", run.run_id, "raw_flights")
        assert status.is_claimed
    return run


def ended_process_tags() -> dict[str, str]:
    """The tags a run executed by a process that has ended would carry."""
    script = "import json; from pipelines.lib.runs import process_tags as t; print(json.dumps(t()))"
    child = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(child.stdout)


def test_a_run_whose_process_ended_is_failed_freed_and_due_a_retry(instance) -> None:
    dead = started_run(instance, {**ended_process_tags(), "dagster/run_key": "k"})
    alive = started_run(instance, process_tags(), claim=False)
    assert full_pool_holders(instance) == {"warehouse": {dead.run_id}}
    (failed,) = fail_dead_runs(instance)
    assert failed.run_id == dead.run_id and failed.status == dg.DagsterRunStatus.FAILURE
    (event,) = instance.all_logs(dead.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert f"process {dead.tags[PID_TAG]} on {dead.tags[HOST_TAG]} ended" in event.message
    assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
    assert full_pool_holders(instance) == {}
    tags = retry_tags(instance, failed)
    assert tags["dagster/parent_run_id"] == dead.run_id
    assert tags["dagster/retry_number"] == "1" and tags["dagster/run_key"] == "k"
    assert PID_TAG not in tags and PID_STARTED_TAG not in tags
    # max_retries: 1 in the deployed dagster.yaml: the retry of a retry is not due.
    assert retry_tags(instance, failed.with_tags(tags)) is None


def test_a_run_without_process_tags_is_left_to_the_daemon(instance) -> None:
    run = started_run(instance, {})
    assert fail_dead_runs(instance) == []
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED


def test_a_reused_pid_is_not_mistaken_for_the_run_process(instance) -> None:
    tags = process_tags() | {PID_STARTED_TAG: "12.00"}  # this pid, started at another time
    run = started_run(instance, tags)
    assert [r.run_id for r in fail_dead_runs(instance)] == [run.run_id]


def test_waiting_for_a_slot_held_by_a_live_run_fails_naming_it(instance) -> None:
    holder = started_run(instance, process_tags())
    with pytest.raises(PoolWaitTimeoutError) as error:
        wait_for_pools(instance, timeout_s=0.3, poll_s=0.1)
    message = str(error.value)
    assert f"pool 'warehouse' is held by run {holder.run_id}" in message
    assert f"daily_warehouse_job 2013-01-02, STARTED, pid {os.getpid()}" in message
    instance.event_log_storage.free_concurrency_slots_for_run(holder.run_id)
    wait_for_pools(instance, timeout_s=0.3, poll_s=0.1)


def test_waiting_for_a_slot_held_by_a_dead_run_frees_it(instance) -> None:
    dead = started_run(instance, ended_process_tags())
    wait_for_pools(instance, timeout_s=0.3, poll_s=0.1)
    assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE


def test_the_subprocess_a_dead_run_left_holding_the_warehouse_is_ended(instance, tmp_path):
    database = tmp_path / "warehouse.duckdb"
    with lock_holder(database) as holder:
        with pytest.raises(duckdb.IOException, match="lock"):
            duckdb.connect(str(database))
        dead = started_run(instance, ended_process_tags())
        record_child_process(instance, dead.run_id, holder.pid)
        assert [r.run_id for r in fail_dead_runs(instance)] == [dead.run_id]
        (event,) = instance.all_logs(dead.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert f"its subprocesses [{holder.pid}] ended" in event.message
        assert not psutil.pid_exists(holder.pid)  # killed and reaped before the run was failed
        duckdb.connect(str(database)).close()  # the lock went with the subprocess


def test_a_subprocess_of_a_live_run_is_left_alone(instance) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        run = started_run(instance, process_tags())
        record_child_process(instance, run.run_id, child.pid)
        assert fail_dead_runs(instance) == []
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_dead_holder_found_while_waiting_for_a_slot_is_retried_before_the_wait_ends(
    instance,
) -> None:
    dead = started_run(instance, ended_process_tags())
    retried = []

    def recover() -> None:
        retried.extend(run.run_id for run in fail_dead_runs(instance))

    wait_for_pools(instance, timeout_s=0.3, poll_s=0.1, recover=recover)
    assert retried == [dead.run_id]


def test_the_mlflow_runs_a_killed_attempt_left_running_are_ended_by_its_retry(
    instance, tmp_path
) -> None:
    """A SIGKILLed attempt never ends its MLflow runs; its retry's challenger step ends them
    (pipelines/defs/training/assets.py), and nobody else's."""
    from mlflow.entities import RunStatus

    # The first attempt; its retry by Dagster's run-retry daemon; the retry's, as the embedded
    # driver and missed_retry_sensor request it (tags only).
    attempts = [dg.DagsterRun(job_name="retraining_job", run_id=str(uuid.uuid4()))]
    attempts.append(
        dg.DagsterRun(
            job_name="retraining_job",
            run_id=str(uuid.uuid4()),
            parent_run_id=attempts[0].run_id,
            root_run_id=attempts[0].run_id,
        )
    )
    attempts.append(
        dg.DagsterRun(
            job_name="retraining_job",
            run_id=str(uuid.uuid4()),
            tags=retry_tags(instance, attempts[1]) or {},
        )
    )
    for attempt in attempts:
        instance.add_run(attempt)
    first, second, third = (run.run_id for run in attempts)
    assert earlier_attempts(instance, attempts[2]) == [second, first]
    assert earlier_attempts(instance, attempts[0]) == []

    tracker = tracker_resource("local", tmp_path / "home")
    client, experiment_id = tracker.client(), tracker.experiment_id()

    def run(dagster_run_id: str, ended: bool = False) -> str:
        created = client.create_run(experiment_id, tags={"dagster.run_id": dagster_run_id})
        if ended:
            client.set_terminated(created.info.run_id, "FINISHED")
        return created.info.run_id

    # The first attempt's run and a trial's, both left RUNNING by the kill; the second
    # attempt's, ended; the retry's own and another Dagster run's, running.
    killed = {run(first), run(first)}
    finished, own, other = run(second, ended=True), run(third), run(str(uuid.uuid4()))

    assert set(tracker.end_abandoned(earlier_attempts(instance, attempts[2]))) == killed
    status = {r: client.get_run(r).info.status for r in [*killed, finished, own, other]}
    killed_status = RunStatus.to_string(RunStatus.KILLED)
    assert {status[r] for r in killed} == {killed_status}
    assert [status[finished], status[own], status[other]] == ["FINISHED", "RUNNING", "RUNNING"]
    assert tracker.end_abandoned([first, second]) == []
