"""Where a study lives: a journal file for a path, an RDB database for a URL, and the RDB
storage's heartbeats, which fail (and queue again) the trials of killed workers."""

from __future__ import annotations

import copy
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import sqlalchemy
from optuna.exceptions import ExperimentalWarning
from optuna.storages import (
    BaseStorage,
    RDBStorage,
    RetryHeartbeatStaleTrialCallback,
    fail_stale_trials,
)
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import Trial, TrialState

from ml.config import TuneConfig

# The trials that ever recorded a heartbeat (Optuna's schema).
BEATEN = "select trial_id from trial_heartbeats"


def make_storage(storage: str, config: TuneConfig | None = None) -> BaseStorage:
    """A journal-file storage for a path; an RDB storage for a URL (``scheme://...``).

    An RDB storage records a heartbeat for every running trial: a trial whose worker was killed
    is failed once silent for the grace period, and retried
    (``RetryHeartbeatStaleTrialCallback``).
    """
    config = config or TuneConfig()
    if "://" in storage:
        # Heartbeats are still flagged experimental (since Optuna 2.8); said once per storage.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            return RDBStorage(
                storage,
                heartbeat_interval=config.heartbeat_interval_s,
                grace_period=config.grace_period_s,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                    max_retry=config.max_retry
                ),
            )
    path = Path(storage)
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def heartbeats(study: optuna.Study) -> bool:
    """Whether the study's storage fails (and retries) the trials of killed workers: an RDB
    storage with a heartbeat interval (Optuna wraps it in a cache that answers the same)."""
    storage = study._storage  # Optuna exposes no public accessor
    interval = getattr(storage, "get_heartbeat_interval", None)
    return interval is not None and interval() is not None


def fail_stale(study: optuna.Study) -> None:
    """Fail the running trials whose heartbeat stopped, and those that never beat (queuing
    their retries)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        fail_stale_trials(study)
    fail_never_beaten(study)


def fail_never_beaten(study: optuna.Study) -> list[int]:
    """Fail (and queue again) the running trials that started longer than the grace period ago
    and never recorded a heartbeat; their numbers.

    A worker claims a trial, then records its first heartbeat: one that dies in between (killed,
    or its database lost mid-call) leaves a trial running with no heartbeat, which Optuna's
    `fail_stale_trials` never takes for stale, and every other worker then waits for it for
    ever. Started longer ago than the grace period, such a trial's worker is gone.
    """
    storage = study._storage  # Optuna exposes no public accessor
    rdb = getattr(storage, "_backend", storage)  # under Optuna's cache, if any
    if not isinstance(rdb, RDBStorage) or rdb.heartbeat_interval is None:
        return []
    grace_s = rdb.grace_period if rdb.grace_period is not None else 2 * rdb.heartbeat_interval
    cutoff = datetime.now() - timedelta(seconds=grace_s)  # as Optuna sets datetime_start
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if not running:
        return []
    with rdb.engine.connect() as con:
        beaten = {row[0] for row in con.execute(sqlalchemy.text(BEATEN))}
    failed = []
    for trial in running:
        started = trial.datetime_start
        if trial._trial_id in beaten or started is None or started > cutoff:
            continue
        try:
            if storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                failed.append(trial)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # told or failed by another process first
    retry = storage.get_heartbeat_stale_trial_callback()
    for trial in failed:
        if retry is not None:
            retry(study, copy.deepcopy(storage.get_trial(trial._trial_id)))
    return [t.number for t in failed]


@contextmanager
def beating(study: optuna.Study, trial: Trial, interval_s: float) -> Iterator[None]:
    """Record the trial's heartbeat every ``interval_s`` while inside (RDB storage only)."""
    if not heartbeats(study):
        yield
        return
    storage = study._storage
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval_s):
            storage.record_heartbeat(trial._trial_id)

    storage.record_heartbeat(trial._trial_id)
    thread = threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
