"""Runs whose process died: marked failed with the reason, their pool slots freed, retried.

The daemon's run monitoring does this for the runs a run launcher started, and its run retries
re-execute them. A run executed in process (the embedded driver) has no launcher to ask, so it
carries the host, pid and start time of the process executing it (`process_tags`), and
`fail_dead_runs` checks them: a run whose process is gone stays STARTED forever otherwise, and
keeps its claim on a pool slot that every later run of that pool waits for.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Mapping

import dagster as dg
import psutil

HOST_TAG = "flywheel/host"
PID_TAG = "flywheel/pid"
PID_STARTED_TAG = "flywheel/pid_started"
# The subprocesses a run started (dbt), as "pid@start time" separated by spaces: a SIGKILL of
# the run's process leaves them running, holding what the run held (the warehouse's lock).
CHILDREN_TAG = "flywheel/child_processes"
PROCESS_TAGS = (HOST_TAG, PID_TAG, PID_STARTED_TAG, CHILDREN_TAG)
UNFINISHED = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
# Dagster's own retry tags, as its run-retry daemon writes them.
MAX_RETRIES_TAG = "dagster/max_retries"
RETRY_NUMBER_TAG = "dagster/retry_number"
PARENT_RUN_TAG = "dagster/parent_run_id"
ROOT_RUN_TAG = "dagster/root_run_id"


class PoolWaitTimeoutError(RuntimeError):
    """A pool stayed full for longer than the wait limit; the message names the holding runs."""


# The job the sensors and the schedule request: the simulator and its report find its runs by it.
RETRAINING_JOB = "retraining_job"
# Every run of a task's jobs carries the task's name: the code locations of several tasks share
# one instance, and their jobs' names.
TASK_TAG = "flywheel/task"
# The longest a run of each job may go on (Dagster's `dagster/max_runtime` tag, in seconds): the
# daemon's run monitoring fails a run still running after it, which run_retries then retries
# once, so a hung run (a lost connection that never times out, a deadlock) costs an hour, not
# the days behind it. Far above what each takes (docs/benchmarks.md: seconds to minutes for a
# day's jobs; a retraining's tuning from minutes on the defaults to hours with many trials).
# A run launched from the UI may set its own tag. The embedded path has no daemon: its driver
# waits for each run as it goes.
MAX_RUNTIME_TAG = "dagster/max_runtime"
MAX_RUNTIME_S = 3600
RETRAINING_MAX_RUNTIME_S = 6 * 3600


def task_of(defs: dg.Definitions) -> str:
    """The task whose code location `defs` is: the tag its retraining job gives its runs."""
    return defs.resolve_job_def(RETRAINING_JOB).tags[TASK_TAG]


def task_runs(task_name: str, job_name: str | None = None, **filters: object) -> dg.RunsFilter:
    """The runs of `task_name`'s jobs (of `job_name` only, if given) that also match `filters`
    (`dg.RunsFilter`'s fields; `tags` are added to the task's)."""
    tags = {**filters.pop("tags", {}), TASK_TAG: task_name}  # type: ignore[dict-item]
    return dg.RunsFilter(job_name=job_name, tags=tags, **filters)  # type: ignore[arg-type]


def process_tags() -> dict[str, str]:
    """Tags naming this process, for a run it executes in process."""
    me = psutil.Process()
    return {
        HOST_TAG: socket.gethostname(),
        PID_TAG: str(me.pid),
        PID_STARTED_TAG: f"{me.create_time():.2f}",
    }


def record_child_process(instance: dg.DagsterInstance, run_id: str, pid: int) -> None:
    """Name subprocess `pid` in run `run_id`'s tags, so that if the run's own process is killed,
    `fail_dead_runs` ends the subprocess before the run's retry needs what it holds."""
    run = instance.get_run_by_id(run_id)
    if run is None or run.tags.get(HOST_TAG) != socket.gethostname():
        return  # not a run executed in process here: its launcher owns its processes
    try:
        started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return  # already ended
    children = f"{run.tags.get(CHILDREN_TAG, '')} {pid}@{started:.2f}".strip()
    instance.add_run_tags(run_id, {CHILDREN_TAG: children})


def live_process(pid: int, started: float) -> psutil.Process | None:
    """The process `pid` if it still is the one started at `started` (pids are reused)."""
    try:
        process = psutil.Process(pid)
        if abs(process.create_time() - started) > 0.05:
            return None
        return None if process.status() == psutil.STATUS_ZOMBIE else process
    except psutil.NoSuchProcess:
        return None


def process_is_gone(tags: Mapping[str, str]) -> bool:
    """Whether the process that `tags` name has ended; False if they name none or another host."""
    if tags.get(HOST_TAG) != socket.gethostname() or PID_TAG not in tags:
        return False
    return live_process(int(tags[PID_TAG]), float(tags.get(PID_STARTED_TAG, "0"))) is None


def kill_orphans(tags: Mapping[str, str], timeout_s: float = 30.0) -> list[int]:
    """SIGKILL the subprocesses (and their descendants) that a dead run left running; their
    pids. Waits until they are gone, so what they held (a file lock) is released."""
    orphans = []
    for entry in tags.get(CHILDREN_TAG, "").split():
        pid, _, started = entry.partition("@")
        process = live_process(int(pid), float(started))
        if process is None:
            continue
        try:
            family = [*process.children(recursive=True), process]
        except psutil.NoSuchProcess:
            continue
        for member in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
        orphans.extend(family)
    _gone, alive = psutil.wait_procs(orphans, timeout=timeout_s)
    if alive:
        raise RuntimeError(
            f"processes {[p.pid for p in alive]} of a dead run survived SIGKILL for {timeout_s}s"
        )
    return [p.pid for p in orphans]


def fail_dead_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    """Mark failed every unfinished run whose process is gone and free its pool slots; also free
    the slots that finished runs still hold. Returns the runs it failed."""
    failed = []
    for record in instance.get_run_records(dg.RunsFilter(statuses=UNFINISHED)):
        run = record.dagster_run
        if not process_is_gone(run.tags):
            continue
        orphans = kill_orphans(run.tags)
        ended = f"; its subprocesses {orphans} ended" if orphans else ""
        instance.report_run_failed(
            run,
            f"run worker gone: process {run.tags[PID_TAG]} on {run.tags[HOST_TAG]} ended "
            f"without finishing run {run.run_id} (killed: SIGKILL, the OOM killer, a lost "
            f"machine); marked failed and its pool slots freed{ended}",
        )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        failed.append(instance.get_run_by_id(run.run_id))
    _free_slots_of_finished_runs(instance)
    return failed


def _free_slots_of_finished_runs(instance: dg.DagsterInstance) -> None:
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return
    holders = storage.get_concurrency_run_ids()
    if not holders:
        return
    finished = instance.get_run_records(dg.RunsFilter(run_ids=list(holders), statuses=FINISHED))
    for record in finished:
        storage.free_concurrency_slots_for_run(record.dagster_run.run_id)


def earlier_attempts(instance: dg.DagsterInstance, run: dg.DagsterRun | None) -> list[str]:
    """The ids of the runs that `run` retries (its parent, its parent's...), nearest first: by
    Dagster's own retries, or by those requested with `retry_tags` (which name only the tag)."""
    attempts = []
    while run is not None and (parent := run.parent_run_id or run.tags.get(PARENT_RUN_TAG)):
        attempts.append(parent)
        run = instance.get_run_by_id(parent)
    return attempts


def retry_tags(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dict[str, str] | None:
    """The tags of `run`'s retry under the instance's `run_retries` settings, None if none is due.

    As Dagster's run-retry daemon does: the retry keeps the run's tags (its run key among them,
    so the sensor that requested it does not request it again) and names its parent and root.
    """
    if not instance.run_retries_enabled:
        return None
    allowed = int(run.tags.get(MAX_RETRIES_TAG, instance.run_retries_max_retries))
    number = int(run.tags.get(RETRY_NUMBER_TAG, "0"))
    if number >= allowed:
        return None
    tags = {k: v for k, v in run.tags.items() if k not in PROCESS_TAGS}
    return tags | {
        PARENT_RUN_TAG: run.run_id,
        ROOT_RUN_TAG: run.root_run_id or run.run_id,
        RETRY_NUMBER_TAG: str(number + 1),
    }


def full_pool_holders(instance: dg.DagsterInstance) -> dict[str, set[str]]:
    """Each pool whose slots are all claimed, with the runs that hold them."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return {}
    keys = storage.get_concurrency_keys()
    full = {}
    for key, info in storage.get_concurrency_infos(list(keys)).items():
        limit = info.limit if info.limit is not None else info.slot_count
        if limit and info.active_slot_count >= limit:
            full[key] = info.active_run_ids
    return full


def wait_for_pools(
    instance: dg.DagsterInstance,
    timeout_s: float,
    poll_s: float = 0.5,
    recover: Callable[[], object] | None = None,
) -> None:
    """Wait until no pool is full; PoolWaitTimeoutError naming the holding runs after `timeout_s`.

    Dead holders are failed and freed on every poll (by `recover`, which may also retry them;
    default `fail_dead_runs`), so only a live run can make this wait.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if recover is None:
            fail_dead_runs(instance)
        else:
            recover()
        full = full_pool_holders(instance)
        if not full:
            return
        if time.monotonic() >= deadline:
            raise PoolWaitTimeoutError(
                f"waited {timeout_s:.0f}s for a pool slot: "
                + "; ".join(
                    f"pool {pool!r} is held by {_describe_runs(instance, holders)}"
                    for pool, holders in sorted(full.items())
                )
                + " (cancel or terminate the holder in the Dagster UI, or raise the wait limit)"
            )
        time.sleep(poll_s)


def _describe_runs(instance: dg.DagsterInstance, run_ids: set[str]) -> str:
    parts = []
    for run_id in sorted(run_ids):
        run = instance.get_run_by_id(run_id)
        if run is None:
            parts.append(f"run {run_id} (not in this instance)")
            continue
        partition = run.tags.get("dagster/partition")
        where = f", pid {run.tags[PID_TAG]} on {run.tags[HOST_TAG]}" if PID_TAG in run.tags else ""
        parts.append(
            f"run {run_id} ({run.job_name}{f' {partition}' if partition else ''}, "
            f"{run.status.value}{where})"
        )
    return ", ".join(parts)
