"""Where a study lives: a journal file for a path, an RDB database for a URL, and the RDB
storage's heartbeats, which fail (and queue again) the trials of killed workers."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.storages import (
    BaseStorage,
    RDBStorage,
    RetryHeartbeatStaleTrialCallback,
    fail_stale_trials,
)
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import Trial

from ml.config import TuneConfig


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
    """Fail the running trials whose heartbeat stopped (queuing their retries)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        fail_stale_trials(study)


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
