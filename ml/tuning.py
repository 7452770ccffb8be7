"""Hyperparameter search with Optuna: TPE sampling, Hyperband pruning, resumable storage."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import lightning as L
import optuna
from optuna.storages import BaseStorage
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, Trial, TrialState
from optuna_integration import PyTorchLightningPruningCallback

from ml.config import ModelConfig, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.training import device_name, train

TrialCallback = Callable[[optuna.Study, FrozenTrial], None]
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


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


def make_storage(storage: str) -> str | BaseStorage:
    """Return a journal-file storage for a path, or pass an RDB URL (``scheme://...``) through."""
    if "://" in storage:
        return storage
    path = Path(storage)
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def create_study(config: TuneConfig, max_epochs: int) -> optuna.Study:
    """Create or load the study named in ``config`` (Hyperband's max resource is max_epochs)."""
    pruner: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
    if config.pruning:
        pruner = optuna.pruners.HyperbandPruner(
            min_resource=config.min_resource,
            max_resource=max_epochs,
            reduction_factor=config.reduction_factor,
        )
    study = optuna.create_study(
        study_name=config.study_name,
        storage=make_storage(config.storage),
        pruner=pruner,
        direction="minimize",
        load_if_exists=True,
    )
    # Offsetting the seed by the trials already stored keeps a resumed study from replaying the
    # random start-up suggestions of its first run.
    study.sampler = optuna.samplers.TPESampler(seed=config.sampler_seed + len(study.trials))
    return study


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
) -> TuneResult:
    """Run (or continue) a study until ``n_trials`` trials finished or ``timeout_s`` elapsed.

    Complete and pruned trials already in the storage count against ``n_trials``, so a crashed
    study continues where it stopped; several processes may call this on the same storage.
    """
    config = config or TuneConfig()
    train_config = train_config or TrainConfig()
    if config.n_trials is None and config.timeout_s is None:
        raise ValueError("set n_trials or timeout_s, or the study never ends")
    study = create_study(config, max_epochs=train_config.max_epochs)
    callbacks: list[TrialCallback] = []
    remaining = None
    if config.n_trials is not None:
        remaining = max(0, config.n_trials - len(study.get_trials(states=FINISHED)))
        # Stops this worker when other workers on the same storage have used up the budget.
        callbacks.append(MaxTrialsCallback(config.n_trials, states=FINISHED))
    if trial_callback is not None:
        callbacks.append(trial_callback)
    if remaining != 0:
        objective = make_objective(datamodule, config, model_config or ModelConfig(), train_config)
        study.optimize(
            objective,
            n_trials=remaining,
            timeout=config.timeout_s,
            n_jobs=config.n_jobs,
            callbacks=callbacks,
        )
    return summarize(study)


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
    )
