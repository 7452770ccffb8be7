"""The daemon driver's reading of the instance, without a stack: a webserver stand-in whose
submitted runs the instance records as finished at once (what the daemon would do, quickly)."""

from __future__ import annotations

import time
import uuid
from datetime import date

import dagster as dg
import pytest

import sim.driver.daemon
from pipelines.defs.runs.sensors import RETRY_FAILED_MESSAGE
from pipelines.lib.runs import RETRAINING_JOB, TASK_TAG
from sim.driver.daemon import DaemonDriver
from sim.driver.executor import RunFailedError
from sim.driver.in_process import RETRAINING_SCHEDULE


class FinishingWebserver:
    """Records every submitted run in `instance` with the status given (SUCCESS by default)."""

    def __init__(self, instance: dg.DagsterInstance):
        self.instance = instance
        self.status = dg.DagsterRunStatus.SUCCESS

    def launch(self, job: str, tags: dict[str, str], run_config: dict) -> str:
        run = dg.DagsterRun(job_name=job, run_id=str(uuid.uuid4()), status=self.status, tags=tags)
        self.instance.add_run(run)
        return run.run_id

    def start_sensor(self, name: str) -> None:
        pass  # no daemon here: nothing would tick it


@pytest.fixture
def driver():
    @dg.op
    def nothing() -> None:
        pass

    @dg.job(name=RETRAINING_JOB, tags={TASK_TAG: "flights"})
    def retraining() -> None:
        nothing()

    schedule = dg.ScheduleDefinition(
        name=RETRAINING_SCHEDULE, job=retraining, cron_schedule="@weekly"
    )
    defs = dg.Definitions(jobs=[retraining], schedules=[schedule])
    # The stack's retry policy: one retry of a failed run.
    retries = {"run_retries": {"enabled": True, "max_retries": 1}}
    with dg.instance_for_test(overrides=retries) as instance:
        webserver = FinishingWebserver(instance)
        yield DaemonDriver(defs, instance, webserver, land=print, deliver_labels=print)


def test_each_poll_reads_only_the_runs_since_the_last_idle_moment(driver, monkeypatch):
    monkeypatch.setattr(sim.driver.daemon, "CLOCK_MARGIN_S", 0.0)
    first = driver.retrain("drift", date(2013, 3, 4))
    assert first[0] == RETRAINING_JOB
    time.sleep(1.1)  # SQLite records creation times to the second
    second = driver.webserver.launch(RETRAINING_JOB, {}, {})
    # The first run, finished and reported before the pipeline was idle, is no longer read.
    assert [r.dagster_run.run_id for r in driver._records()] == [second]
    assert [run[3] for run in driver.react().runs] == [second]
    assert driver._records() == []


def test_within_the_clock_margin_a_reported_run_is_read_but_not_reported_again(driver):
    first = driver.retrain("drift", date(2013, 3, 4))
    second = driver.retrain("drift", date(2013, 3, 11))
    assert [r.dagster_run.run_id for r in driver._records()] == [first[3], second[3]]
    assert driver.react().runs == []


def test_a_failed_run_that_will_not_be_retried_stops_the_drive(driver):
    driver.webserver.status = dg.DagsterRunStatus.FAILURE
    with pytest.raises(RunFailedError, match="will not be retried"):
        driver.retrain("drift", date(2013, 3, 4))


def test_a_failed_run_whose_retry_dagster_failed_to_launch_is_still_pending(driver):
    # The code server was down when Dagster's run-retry daemon tried: it recorded so and gave
    # up on the run; the missed-retry sensor will ask for the retry once the location is back.
    driver.webserver.status = dg.DagsterRunStatus.FAILURE
    run_id = driver.webserver.launch(RETRAINING_JOB, {}, {})
    run = driver.instance.get_run_by_id(run_id)
    driver.instance.report_engine_event(RETRY_FAILED_MESSAGE, run)
    driver.instance.add_run_tags(run_id, {"dagster/will_retry": "false"})
    [pending] = driver._pending(driver._records())
    assert pending.startswith(f"the missed retry of failed run {run_id}")
