"""The retries Dagster promised and did not launch.

When a run fails and the instance's `run_retries` allow another attempt, Dagster tags it
`dagster/will_retry=true`, and its daemon launches the retry and tags the run
`dagster/auto_retry_run_id`. Once, on the stack, a run killed by SIGKILL was failed by run
monitoring and tagged `will_retry=true`, and no retry ever came: that partition's day would be
missing for good, since the sensor that asked for it does not ask twice (its run key is spent).

The daemon also gives up on a retry it tried to launch and could not: with the code server
gone (SIGKILLed while it launched the run, which failed for it), the retry fails to reach the
code location; the daemon records "Failed to retry run" on the failed run, retags it
`will_retry=false`, and never tries again, though the run had its retry left.

`missed_retry_sensor` looks for both: failed runs with `will_retry=true`, no retry run and no
`auto_retry_run_id` after `GRACE_S`; and failed runs whose retry the daemon failed to launch,
with no retry run, at once (the sensor runs on the code server, so it is back). It requests the
retry Dagster would have: the same job, partition and config, with the retry's parent, root and
number tags, once per run (its run key), if the run's retries are not spent. A run is a
partition's whole work, written atomically, so running it again is safe.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import dagster as dg

from pipelines.lib.runs import (
    MAX_RETRIES_TAG,
    PARENT_RUN_TAG,
    RETRY_NUMBER_TAG,
    ROOT_RUN_TAG,
    retry_tags,
    task_runs,
)

WILL_RETRY_TAG = "dagster/will_retry"
AUTO_RETRY_RUN_TAG = "dagster/auto_retry_run_id"
PARTITION_TAG = "dagster/partition"
# Dagster's retry is launched within seconds of the failure; after this it is not coming.
GRACE_S = 300.0
# What Dagster's run-retry daemon records on a run whose retry it could not launch.
RETRY_FAILED_MESSAGE = "Failed to retry run"
# Failed runs older than this are left to people.
LOOKBACK_S = 2 * 86400.0
# The tags a retry keeps: the run's own (not Dagster's bookkeeping of the failed run or of the
# sensor that asked for it), plus the retry's.
KEPT_DAGSTER_TAGS = (PARTITION_TAG, MAX_RETRIES_TAG)


def missed_retries(
    instance: dg.DagsterInstance, now: float, task_name: str
) -> Iterator[dg.DagsterRun]:
    """Failed runs of `task_name` that Dagster said it would retry and has not, `GRACE_S` after
    their end; and those whose retry Dagster failed to launch."""
    for run in _failed(instance, now, task_name, "true", GRACE_S):
        if AUTO_RETRY_RUN_TAG not in run.tags and not _retried(instance, run):
            yield run
    for run in _failed(instance, now, task_name, "false", 0.0):
        if retry_launch_failed(instance, run):
            yield run


def retry_launch_failed(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether `run` failed, has retries left and no retry, and Dagster failed to launch its
    retry: the missed-retry sensor asks for it."""
    # Retries spent (the retry of a bad file fails too), the usual case, is read first.
    if retry_tags(instance, run) is None or _retried(instance, run):
        return False
    return _retry_failed(instance, run)


def _failed(
    instance: dg.DagsterInstance, now: float, task_name: str, will_retry: str, grace_s: float
) -> Iterator[dg.DagsterRun]:
    """Failed runs of `task_name` tagged `will_retry`, updated within the lookback and not within
    the last `grace_s`."""
    records = instance.get_run_records(
        task_runs(
            task_name,
            statuses=[dg.DagsterRunStatus.FAILURE],
            tags={WILL_RETRY_TAG: will_retry},
            updated_after=datetime.fromtimestamp(now - LOOKBACK_S, tz=UTC),
        )
    )
    for record in records:
        if record.update_timestamp.timestamp() <= now - grace_s:
            yield record.dagster_run


def _retried(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether a retry of `run` exists (launched by Dagster or by this sensor)."""
    return bool(instance.get_run_records(dg.RunsFilter(tags={PARENT_RUN_TAG: run.run_id}), limit=1))


def _retry_failed(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether Dagster's run-retry daemon recorded on `run` that it failed to launch its retry."""
    records = instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, ascending=False
    ).records
    return any(
        r.event_log_entry.dagster_event is not None
        and r.event_log_entry.dagster_event.message == RETRY_FAILED_MESSAGE
        for r in records
    )


def retry_request(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dg.RunRequest | None:
    """The retry of `run` as a run request, or None when its retries are spent."""
    tags = retry_tags(instance, run)
    if tags is None:
        return None
    kept = {
        key: value
        for key, value in tags.items()
        if not key.startswith("dagster/")
        or key in (*KEPT_DAGSTER_TAGS, PARENT_RUN_TAG, ROOT_RUN_TAG, RETRY_NUMBER_TAG)
    }
    return dg.RunRequest(
        run_key=f"missed_retry:{run.run_id}",
        job_name=run.job_name,
        run_config=run.run_config,
        tags=kept,
        partition_key=run.tags.get(PARTITION_TAG),
    )


def build_missed_retry_sensor(task_name: str, jobs: Sequence[object]) -> dg.SensorDefinition:
    """The sensor over `jobs` (every job of `task_name` whose runs Dagster may retry), on by
    default."""

    @dg.sensor(
        name="missed_retry_sensor",
        jobs=list(jobs),
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Launch the retry of a failed run that Dagster tagged will_retry=true but "
        f"never retried ({GRACE_S:.0f} s after it failed), or whose retry Dagster failed to "
        "launch.",
    )
    def missed_retry_sensor(context: dg.SensorEvaluationContext) -> Iterator[dg.RunRequest]:
        for run in missed_retries(context.instance, time.time(), task_name):
            request = retry_request(context.instance, run)
            if request is not None:
                context.log.warning(
                    f"run {run.run_id} ({run.job_name}) failed and Dagster's retry of it never "
                    "came or failed to launch: requesting its retry"
                )
                yield request

    return missed_retry_sensor
