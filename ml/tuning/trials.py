"""Running trials: the objective (the search space, one training run, pruned by Hyperband
through Lightning) and a worker's loop over the queued trials."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace

import lightning as L
import optuna
from optuna.trial import FrozenTrial, Trial, TrialState
from optuna_integration import PyTorchLightningPruningCallback

from ml.config import ModelConfig, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.training import device_name, train
from ml.tuning.storage import beating, fail_stale, heartbeats
from ml.tuning.study import claim_trial

TrialCallback = Callable[[optuna.Study, FrozenTrial], None]


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
