"""Select a challenger: tune on validation, then fit the best on training and validation rows."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from ml.baselines import FittedBaselines, evaluate_baselines, fit_baselines
from ml.callbacks import MetricHistory
from ml.config import ModelConfig, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.training import LAST_CHECKPOINT, TrainResult, train
from ml.tuning import TrialCallback, TuneResult, WorkerLauncher, tune

# The validation scores a trial records each epoch, besides the loss it trains on.
VALIDATION_METRICS = ("val/auroc", "val/logloss")


@dataclass
class Challenger:
    """The tuned model, fitted once more on train and validation: its checkpoint, its configs,
    and the validation scores it was chosen on beside the baselines' (``fitted_baselines``,
    fitted on the train split, score the test split in the evaluation without a second fit)."""

    tuning: TuneResult
    fit: TrainResult
    checkpoint: str
    model_config: ModelConfig
    train_config: TrainConfig
    metrics: dict[str, float]
    baselines: dict[str, dict[str, float]]
    fitted_baselines: FittedBaselines


def configs_from_params(
    params: dict[str, Any], model: ModelConfig, train: TrainConfig
) -> tuple[ModelConfig, TrainConfig]:
    """Apply a trial's parameters (named after config fields) to the base configs."""
    model_fields = {f.name for f in fields(ModelConfig)}
    train_fields = {f.name for f in fields(TrainConfig)}
    unknown = set(params) - model_fields - train_fields
    if unknown:
        raise ValueError(f"parameters {sorted(unknown)} match no ModelConfig/TrainConfig field")
    model = replace(model, **{k: v for k, v in params.items() if k in model_fields})
    train = replace(train, **{k: v for k, v in params.items() if k in train_fields})
    return model, train


def best_epoch(history: list[dict[str, float]], monitor: str) -> dict[str, float]:
    """The record of the epoch a trial was scored by, picked as the trial's own history picks."""
    records = MetricHistory(monitor)
    records.load_state_dict({"records": history})
    best = records.best()
    if not best:
        raise RuntimeError(f"the best trial recorded no {monitor} for any epoch")
    return best


def fit_challenger(
    datamodule: TabularDataModule,
    tune_config: TuneConfig,
    model_config: ModelConfig,
    train_config: TrainConfig,
    checkpoint_dir: str,
    trial_callback: TrialCallback | None = None,
    launcher: WorkerLauncher | None = None,
    members: int | None = None,
) -> Challenger:
    """Tune on the train split, selecting on validation; then train the best parameters once
    more, with checkpoints in ``checkpoint_dir``, on the train and validation rows together for
    the best trial's number of epochs (its best epoch's): the challenger is that last epoch.

    The newest labelled days before the test split are the validation days: a challenger that
    never learned from them would be two held-out windows behind production, and a small
    dataset (a bootstrap's first weeks) would train on a third of its labels. ``metrics`` are
    the best trial's validation scores (it had not seen those rows), the baselines' are on the
    same split. Parallel workers (``tune_config.workers``) are started by ``launcher``.

    With ``members`` (default: ``model_config.members``) above 1 the final fit trains that many
    networks of the best configuration side by side, each from its own initialisation, and the
    challenger is their ensemble (``ml.models.TabularEnsemble``); the trials train one network
    each.
    """
    members = model_config.members if members is None else members
    if members < 1:
        raise ValueError(f"members must be at least 1, not {members}")
    single = replace(model_config, members=1)
    tuning = tune(datamodule, tune_config, single, train_config, trial_callback, launcher)
    best_model, best_train = configs_from_params(tuning.best_params, single, train_config)
    best_model = replace(best_model, members=members)
    chosen = best_epoch(tuning.best_history, train_config.monitor)
    best_train = replace(
        best_train,
        max_epochs=int(chosen["epoch"]) + 1,
        early_stopping_patience=None,
        checkpoint_dir=checkpoint_dir,
    )
    fit = train(datamodule.with_validation_in_training(), best_model, best_train)
    checkpoint = Path(checkpoint_dir) / LAST_CHECKPOINT
    if not checkpoint.exists():
        raise RuntimeError(f"the final fit of trial {tuning.best_trial} wrote no checkpoint")
    metrics = {k.removeprefix("val/"): v for k, v in chosen.items() if k in VALIDATION_METRICS}
    fitted = fit_baselines(datamodule, seed=train_config.seed)
    return Challenger(
        tuning=tuning,
        fit=fit,
        checkpoint=str(checkpoint),
        model_config=best_model,
        train_config=best_train,
        metrics=metrics,
        baselines=evaluate_baselines(datamodule, "val", fitted=fitted),
        fitted_baselines=fitted,
    )
