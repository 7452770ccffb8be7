"""Hyperparameter search with Optuna: TPE sampling, Hyperband pruning, resumable storage.

The trial budget is queued in the study up front; one or several worker processes claim queued
trials one at a time, so the budget holds exactly across workers. On an RDB storage running
trials beat a heartbeat: a killed worker's trial is failed and queued again for the others.

One module per concern: ``storage`` (journal file or RDB, heartbeats), ``hyperband`` (slots and
their brackets), ``study`` (create, queue, claim, summarize), ``trials`` (the objective and a
worker's loop), ``workers`` (launchers and the worker process), ``search`` (``tune``). The names
below are the package's interface.
"""

from ml.tuning.hyperband import FINISHED, SLOT, SlotHyperband, slot, slot_seed
from ml.tuning.search import tune
from ml.tuning.storage import make_storage
from ml.tuning.study import TuneResult, claim_trial, create_study, plan_trials, start_params
from ml.tuning.trials import TrialCallback, TrialRecorder, make_objective
from ml.tuning.workers import (
    ProcessLauncher,
    WorkerError,
    WorkerLauncher,
    WorkersOutcome,
    run_worker,
    run_workers,
    worker_spec,
)

__all__ = [
    "FINISHED",
    "SLOT",
    "ProcessLauncher",
    "SlotHyperband",
    "TrialCallback",
    "TrialRecorder",
    "TuneResult",
    "WorkerError",
    "WorkerLauncher",
    "WorkersOutcome",
    "claim_trial",
    "create_study",
    "make_objective",
    "make_storage",
    "plan_trials",
    "run_worker",
    "run_workers",
    "slot",
    "slot_seed",
    "start_params",
    "tune",
    "worker_spec",
]
