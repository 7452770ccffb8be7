"""Hyperparameter search with Optuna: TPE sampling, Hyperband pruning, resumable storage.

The trial budget is queued in the study up front; one or several worker processes claim queued
trials one at a time, so the budget holds exactly across workers. On an RDB storage running
trials beat a heartbeat: a killed worker's trial is failed and queued again for the others.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import lightning as L
import optuna
import torch
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.storages import (
    BaseStorage,
    RDBStorage,
    RetryHeartbeatStaleTrialCallback,
    fail_stale_trials,
)
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import FrozenTrial, Trial, TrialState
from optuna_integration import PyTorchLightningPruningCallback

from ml.config import (
    ModelConfig,
    SearchSpace,
    TrainConfig,
    TuneConfig,
    config_from_dict,
    config_to_dict,
)
from ml.data import TabularDataModule
from ml.training import device_name, share_cores, train

TrialCallback = Callable[[optuna.Study, FrozenTrial], None]
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# Seconds the workers of an interrupted tuning get to exit on SIGTERM, together, before SIGKILL.
STOP_WAIT_S = 10.0


@dataclass
class TuneResult:
    """Best trial and bookkeeping of a (possibly resumed) study."""

    best_params: dict[str, object]
    best_value: float
    best_trial: int
    n_complete: int
    n_pruned: int
    n_failed: int
    total_compute_seconds: float
    study_name: str
    # The best trial's validation metrics per epoch (``val/*``, with ``epoch``).
    best_history: list[dict[str, float]] = field(default_factory=list)
    # Worker processes that died without a word (SIGKILL, OOM): their trials were retried.
    workers_lost: list[int] = field(default_factory=list)


class TrialRecorder(L.Callback):
    """Remembers the device, the validated epochs and their val/* metrics, even when pruned."""

    def __init__(self) -> None:
        self.device = "unknown"
        self.epochs = 0
        self.history: list[dict[str, float]] = []

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Record the device the trial runs on."""
        self.device = device_name(trainer.strategy.root_device)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Count a finished epoch and keep its validation metrics."""
        if not trainer.sanity_checking:
            self.epochs = trainer.current_epoch + 1
            metrics = {
                k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")
            }
            self.history.append({"epoch": float(trainer.current_epoch), **metrics})


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


SLOT = "slot"  # a queued trial's place in the budget (a user attribute): what it draws from


def slot(trial: FrozenTrial) -> int:
    """The trial's place in the budget: 0 for the first trial, 1 for the second... A trial
    queued again for a killed one takes its slot, so it draws and runs as that one would have.
    (A trial queued before slots existed: its number.)"""
    return int(trial.user_attrs.get(SLOT, trial.number))


def slot_seed(config: TuneConfig, place: int) -> int:
    """The sampler's seed for the trial in slot ``place``: the study's name (studies of other
    datasets draw other configurations), the configured seed and the slot, never the order in
    which trials ran or which worker ran them."""
    return (zlib.crc32(config.study_name.encode()) + config.sampler_seed + place) % 2**32


class SlotHyperband(optuna.pruners.HyperbandPruner):
    """Hyperband whose brackets follow the trials' slots, not their numbers.

    Optuna puts trial ``n`` in the bracket a hash of the study's name and ``n`` gives. A trial
    queued again for one killed mid-run gets a new number, so it would land in another bracket
    and meet other competitors. Here it lands in its slot's bracket, and the killed trial
    (superseded: a newer trial holds its slot) leaves every bracket, with the values it
    reported before it died: the rungs see what an uninterrupted study's would have.
    """

    def _get_bracket_id(self, study: optuna.Study, trial: FrozenTrial) -> int:
        if len(self._pruners) == 0 or SLOT not in trial.user_attrs:
            return super()._get_bracket_id(study, trial)
        place = slot(trial)
        # A complete or pruned trial is counted, so its slot is never queued again: only a
        # running or failed one (the one being pruned, a killed one) needs the others read.
        if trial.state not in FINISHED:
            trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
            if any(t.number > trial.number and slot(t) == place for t in trials):
                return -1  # superseded: in no bracket
        assert self._n_brackets is not None
        n = zlib.crc32(f"{study.study_name}_{place}".encode()) % self._total_trial_allocation_budget
        for bracket_id in range(self._n_brackets):
            n -= self._trial_allocation_budgets[bracket_id]
            if n < 0:
                return bracket_id
        raise AssertionError("the allocation budgets sum to their total")


def create_study(config: TuneConfig, max_epochs: int, worker: int = 0) -> optuna.Study:
    """Create or load the study named in ``config`` (Hyperband's max resource is max_epochs).

    A queued trial draws its configuration from its slot's seed (``claim_trial`` gives the sampler
    it): whichever worker runs it, and when a killed trial is queued again, the same draw. A
    study bounded by time alone (``study.optimize``) has no slots: each worker process samples
    with its own seed, offset by the trials already stored so a resumed study does not replay
    its first run's draws. Both seeds include the study's name, so that studies of different
    datasets draw different configurations (with the same seed every new study would try the
    same ones).
    """
    pruner: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
    if config.pruning:
        pruner = SlotHyperband(
            min_resource=config.min_resource,
            max_resource=max_epochs,
            reduction_factor=config.reduction_factor,
        )
    study = optuna.create_study(
        study_name=config.study_name,
        storage=make_storage(config.storage, config),
        pruner=pruner,
        direction="minimize",
        load_if_exists=True,
    )
    seed = slot_seed(config, 1000 * worker + len(study.trials))
    study.sampler = optuna.samplers.TPESampler(seed=seed)
    return study


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


def start_params(space: SearchSpace, model: ModelConfig, train: TrainConfig) -> dict | None:
    """The hyperparameters of ``model`` and ``train`` as a trial's parameters, or None when one
    lies outside ``space`` (a trial cannot try it)."""
    params: dict[str, object] = {
        "arch": model.arch,
        "width": model.width,
        "depth": model.depth,
        "dropout": model.dropout,
        "lr": train.lr,
        "weight_decay": train.weight_decay,
    }
    inside = (
        model.arch in space.arch
        and model.width in space.width
        and space.depth[0] <= model.depth <= space.depth[1]
        and space.dropout[0] <= model.dropout <= space.dropout[1]
        and space.lr[0] <= train.lr <= space.lr[1]
        and space.weight_decay[0] <= train.weight_decay <= space.weight_decay[1]
    )
    return params if inside else None


def plan_trials(study: optuna.Study, n_trials: int, first: dict | None = None) -> int:
    """Queue trials until the finished, running and queued ones make ``n_trials``; how many.

    Each queued trial holds a slot (``SLOT``), the lowest one no counted trial holds: a trial
    queued in place of a killed one takes its slot, so it draws the killed one's configuration
    and runs before the later slots, as in a study never interrupted. ``first`` (parameters) is
    slot 0's: the configuration known to be good, which the sampled ones must beat.

    Workers only run queued trials, each claimed by exactly one of them, so the budget counts
    finished trials across workers exactly: a failed trial's retry takes its place (and its
    slot) in the queue. Without heartbeats a RUNNING trial may belong to a worker that died;
    it is not counted, and its place is queued again.
    """
    counted = (*FINISHED, TrialState.WAITING)
    if heartbeats(study):
        fail_stale(study)
        counted = (*counted, TrialState.RUNNING)
    held = {slot(t) for t in study.get_trials(deepcopy=False, states=counted)}
    missing = max(0, n_trials - len(held))
    free = (place for place in range(n_trials + len(held)) if place not in held)
    for place in itertools.islice(free, missing):
        params = first if place == 0 and first is not None else {}
        study.enqueue_trial(params, user_attrs={SLOT: place})
    return missing


def claim_trial(study: optuna.Study, config: TuneConfig) -> Trial | None:
    """Take a queued trial for this worker (None when the queue is empty), the lowest slot
    first.

    The storage moves a trial from WAITING to RUNNING for one caller only: a row lock in a
    database, the journal's order of records in a file.
    """
    storage = study._storage
    waiting_trials = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    for waiting in sorted(waiting_trials, key=lambda t: (slot(t), t.number)):
        try:
            if storage.set_trial_state_values(waiting._trial_id, state=TrialState.RUNNING):
                # Its configuration is drawn from its slot, whoever runs it and whenever.
                study.sampler = optuna.samplers.TPESampler(seed=slot_seed(config, slot(waiting)))
                return Trial(study, waiting._trial_id)
        except UpdateFinishedTrialError:
            continue
    return None


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


def work(
    study: optuna.Study,
    objective: Callable[[Trial], float],
    config: TuneConfig,
    callbacks: list[TrialCallback],
    worker: int = 0,
    poll_s: float = 1.0,
) -> None:
    """Run queued trials until none is queued or running, or ``timeout_s`` passed.

    With heartbeats, a worker waits while other workers' trials run: one of them may be
    killed, failed as stale and queued again. An exception from a trial marks it FAIL and is
    raised; a pruned trial is told PRUNED.
    """
    deadline = None if config.timeout_s is None else time.monotonic() + config.timeout_s
    while deadline is None or time.monotonic() < deadline:
        if heartbeats(study):
            fail_stale(study)
        trial = claim_trial(study, config)
        if trial is None:
            running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if running and heartbeats(study):
                time.sleep(poll_s)
                continue
            return
        # Which worker ran it, and its process: what a kill of a worker is traced by.
        trial.set_user_attr("worker", worker)
        trial.set_user_attr("pid", os.getpid())
        with beating(study, trial, config.heartbeat_interval_s):
            try:
                value = objective(trial)
            except optuna.TrialPruned:
                frozen = study.tell(trial, state=TrialState.PRUNED)
            except BaseException:
                study.tell(trial, state=TrialState.FAIL)
                raise
            else:
                frozen = study.tell(trial, value)
        for callback in callbacks:
            callback(study, frozen)


def make_objective(
    datamodule: TabularDataModule, config: TuneConfig, model: ModelConfig, base: TrainConfig
) -> Callable[[Trial], float]:
    """Return objective(trial): the search space, one training run, the best monitored value."""
    space = config.search_space

    def objective(trial: Trial) -> float:
        model_config = replace(
            model,
            arch=trial.suggest_categorical("arch", list(space.arch)),
            width=trial.suggest_categorical("width", list(space.width)),
            depth=trial.suggest_int("depth", *space.depth),
            dropout=trial.suggest_float("dropout", *space.dropout),
        )
        train_config = replace(
            base,
            lr=trial.suggest_float("lr", *space.lr, log=True),
            weight_decay=trial.suggest_float("weight_decay", *space.weight_decay, log=True),
            # Trials are compared by their metrics; only the final model needs checkpoints.
            checkpoint_dir=None,
        )
        pruning = PyTorchLightningPruningCallback(trial, monitor=train_config.monitor)
        # The recorder goes first: the pruning callback raises in the same hook.
        recorder = TrialRecorder()
        start = time.perf_counter()
        try:
            result = train(datamodule, model_config, train_config, callbacks=[recorder, pruning])
            # Under DDP the callback stops training instead of raising; this re-raises it.
            pruning.check_pruned()
        finally:
            trial.set_user_attr("wall_seconds", time.perf_counter() - start)
            trial.set_user_attr("device", recorder.device)
            trial.set_user_attr("epochs_run", recorder.epochs)
            trial.set_user_attr("history", recorder.history)
        return result.best_metrics[train_config.monitor]

    return objective


def tune(
    datamodule: TabularDataModule,
    config: TuneConfig | None = None,
    model_config: ModelConfig | None = None,
    train_config: TrainConfig | None = None,
    trial_callback: TrialCallback | None = None,
    launcher: WorkerLauncher | None = None,
) -> TuneResult:
    """Run (or continue) a study until ``n_trials`` trials finished or ``timeout_s`` elapsed.

    Complete and pruned trials already in the storage count against ``n_trials``, so a crashed
    study continues where it stopped. With ``workers`` above 1 the trials run in that many
    workers on the same storage (an RDB URL, for heartbeats), started by ``launcher`` (default:
    processes on this machine), and ``trial_callback`` sees each finished trial here once they
    are done, in trial order.
    """
    config = config or TuneConfig()
    train_config = train_config or TrainConfig()
    model_config = model_config or ModelConfig()
    if config.n_trials is None and config.timeout_s is None:
        raise ValueError("set n_trials or timeout_s, or the study never ends")
    if config.workers > 1 and config.n_trials is None:
        raise ValueError("parallel workers share a trial budget: set n_trials")
    study = create_study(config, max_epochs=train_config.max_epochs)
    first = (
        start_params(config.search_space, model_config, train_config)
        if config.defaults_first
        else None
    )
    if config.n_trials is None:
        if first is not None and not study.get_trials(deepcopy=False):
            study.enqueue_trial(first)
        objective = make_objective(datamodule, config, model_config, train_config)
        callbacks = [trial_callback] if trial_callback else []
        study.optimize(objective, timeout=config.timeout_s, callbacks=callbacks)
        return summarize(study)
    plan_trials(study, config.n_trials, first)
    if config.workers == 1:
        objective = make_objective(datamodule, config, model_config, train_config)
        work(study, objective, config, [trial_callback] if trial_callback else [])
        return summarize(study)
    before = {t.number for t in study.get_trials(deepcopy=False, states=FINISHED)}
    lost = run_workers(
        datamodule, config, model_config, train_config, launcher or ProcessLauncher()
    )
    if trial_callback is not None:
        for trial in study.get_trials(deepcopy=False, states=FINISHED):
            if trial.number not in before:
                trial_callback(study, trial)
    return replace(summarize(study), workers_lost=lost)


class WorkerError(RuntimeError):
    """A tuning worker failed; the message holds its exit status and log's end."""


@dataclass
class WorkersOutcome:
    """How a launcher's workers ended: those lost (killed by a signal, the OOM killer, an
    eviction: their trials are retried by the others) and the messages of those that failed."""

    lost: list[int] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


class WorkerLauncher(Protocol):
    """Runs ``workers`` workers on one study somewhere and waits until all of them ended.

    A worker runs ``run_worker(spec, datamodule, index)`` with this spec and an equal
    datamodule (where it runs, it may rebuild it from the same data). Interrupted (the run was
    cancelled), no worker outlives the call. Processes here (``ProcessLauncher``); the pods of
    a Kubernetes Job in the pipelines (``pipelines.lib.tuning_workers``).
    """

    def run(
        self, spec: dict[str, object], datamodule: TabularDataModule, workers: int
    ) -> WorkersOutcome:
        """Start the workers, wait for them; how they ended."""
        ...


class ProcessLauncher:
    """Workers as processes on this machine (``python -m ml.tuning work SPEC INDEX``)."""

    def run(
        self, spec: dict[str, object], datamodule: TabularDataModule, workers: int
    ) -> WorkersOutcome:
        """Start the processes and wait for them; SIGTERM then SIGKILL any left on the way out."""
        with tempfile.TemporaryDirectory(prefix="tuning-") as folder:
            spec_dir = Path(folder)
            torch.save(datamodule, spec_dir / "datamodule.pt")
            (spec_dir / "configs.json").write_text(json.dumps(spec))
            processes = []
            for worker in range(workers):
                log = (spec_dir / f"worker-{worker}.log").open("w")
                command = [sys.executable, "-m", "ml.tuning", "work", str(spec_dir), str(worker)]
                process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
                processes.append((process, log))
            outcome = WorkersOutcome()
            try:
                for worker, (process, log) in enumerate(processes):
                    status = process.wait()
                    log.close()
                    if status < 0:
                        outcome.lost.append(worker)
                    elif status != 0:
                        tail = (spec_dir / f"worker-{worker}.log").read_text()[-3000:]
                        outcome.failed.append(
                            f"tuning worker {worker} exited with status {status}:\n{tail}"
                        )
            finally:
                # Interrupted (the run was cancelled): no worker outlives the step. Their running
                # trials stop beating and are retried when the study resumes. All are asked at
                # once and waited for together (a busy machine must not multiply the wait by the
                # workers); one still running after STOP_WAIT_S is killed.
                running = [process for process, _ in processes if process.poll() is None]
                for process in running:
                    process.terminate()
                deadline = time.monotonic() + STOP_WAIT_S
                for process in running:
                    try:
                        process.wait(timeout=max(0.0, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
                for _, log in processes:
                    log.close()
            return outcome


def worker_spec(
    config: TuneConfig, model_config: ModelConfig, train_config: TrainConfig
) -> dict[str, object]:
    """What a worker needs besides the data: the three configs, as JSON-ready dicts."""
    return {
        "tune": config_to_dict(config),
        "model": config_to_dict(model_config),
        "train": config_to_dict(train_config),
    }


def run_workers(
    datamodule: TabularDataModule,
    config: TuneConfig,
    model_config: ModelConfig,
    train_config: TrainConfig,
    launcher: WorkerLauncher,
) -> list[int]:
    """Run ``config.workers`` workers on the study through ``launcher``; the lost ones.

    A worker killed by a signal (SIGKILL, the OOM killer) is lost: its running trial is failed
    by the heartbeat and retried by the others. A worker that exits with an error raises
    WorkerError (after the others finished). If no trial is left to run while the budget is not
    spent, that is a WorkerError too.
    """
    spec = worker_spec(config, model_config, train_config)
    outcome = launcher.run(spec, datamodule, config.workers)
    if outcome.failed:
        raise WorkerError("\n\n".join(outcome.failed))
    study = create_study(config, max_epochs=train_config.max_epochs)
    done = len(study.get_trials(deepcopy=False, states=FINISHED))
    if done < (config.n_trials or 0):
        raise WorkerError(
            f"study {config.study_name}: {done} of {config.n_trials} trials finished and no "
            f"worker is left (lost: {outcome.lost}); run it again to continue"
        )
    return outcome.lost


def run_worker(spec: dict[str, object], datamodule: TabularDataModule, worker: int) -> None:
    """One worker: run queued trials of the spec's study until none is left."""
    configs = copy.deepcopy(spec)  # the configs are popped apart below
    space = config_from_dict(SearchSpace, configs["tune"].pop("search_space"))
    tune_config = replace(config_from_dict(TuneConfig, configs["tune"]), search_space=space)
    model_config = config_from_dict(ModelConfig, configs["model"])
    train_config = config_from_dict(TrainConfig, configs["train"])
    share_cores(tune_config.workers)  # on a GPU too: the step's host work needs the cores
    study = create_study(tune_config, max_epochs=train_config.max_epochs, worker=worker)
    objective = make_objective(datamodule, tune_config, model_config, train_config)
    work(study, objective, tune_config, [], worker=worker)


def worker_main(spec_dir: Path, worker: int) -> None:
    """The worker process ``ProcessLauncher`` starts: its spec and datamodule from files."""
    spec = json.loads((spec_dir / "configs.json").read_text())
    run_worker(spec, torch.load(spec_dir / "datamodule.pt", weights_only=False), worker)


def summarize(study: optuna.Study) -> TuneResult:
    """Return the best trial and trial counts of a study."""
    trials = study.get_trials(deepcopy=False)
    count = {state: sum(t.state == state for t in trials) for state in TrialState}
    best = study.best_trial
    return TuneResult(
        best_params=dict(best.params),
        best_value=float(best.value),
        best_trial=best.number,
        n_complete=count[TrialState.COMPLETE],
        n_pruned=count[TrialState.PRUNED],
        n_failed=count[TrialState.FAIL],
        total_compute_seconds=sum(float(t.user_attrs.get("wall_seconds", 0.0)) for t in trials),
        study_name=study.study_name,
        best_history=list(best.user_attrs.get("history", [])),
    )


def main(argv: list[str] | None = None) -> None:
    """``python -m ml.tuning work SPEC WORKER``: the worker process ``ProcessLauncher`` starts."""
    parser = argparse.ArgumentParser(prog="python -m ml.tuning")
    commands = parser.add_subparsers(dest="command", required=True)
    work_parser = commands.add_parser("work", help="run queued trials of a study")
    work_parser.add_argument("spec", type=Path)
    work_parser.add_argument("worker", type=int)
    args = parser.parse_args(argv)
    worker_main(args.spec, args.worker)


if __name__ == "__main__":
    main()
