"""Select a challenger: tune, keep or refit the best trial's checkpoint, score it and baselines."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from ml.baselines import evaluate_baselines
from ml.config import ModelConfig, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.inference import load_predictor
from ml.metrics import binary_metrics
from ml.training import TrainResult, train
from ml.tuning import KeptTrials, TrialCallback, TuneResult, WorkerLauncher, tune


@dataclass
class Challenger:
    """The tuned model: its checkpoint, configs and validation scores beside baselines."""

    tuning: TuneResult
    fit: TrainResult
    checkpoint: str
    model_config: ModelConfig
    train_config: TrainConfig
    metrics: dict[str, float]
    baselines: dict[str, dict[str, float]]


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


def evaluate_checkpoint(
    checkpoint: str, datamodule: TabularDataModule, split: str = "val"
) -> dict[str, float]:
    """Score a checkpoint on a datamodule split with the metrics the baselines use."""
    module = load_predictor(checkpoint).module
    categorical, numeric, labels = datamodule.splits[split]
    batch = datamodule.eval_batch_size
    probs = [
        module.predict_proba(categorical[i : i + batch], numeric[i : i + batch]).cpu().numpy()
        for i in range(0, labels.shape[0], batch)
    ]
    return binary_metrics(labels.numpy(), np.concatenate(probs))


def fit_challenger(
    datamodule: TabularDataModule,
    tune_config: TuneConfig,
    model_config: ModelConfig,
    train_config: TrainConfig,
    checkpoint_dir: str,
    trial_callback: TrialCallback | None = None,
    launcher: WorkerLauncher | None = None,
) -> Challenger:
    """Tune, keep the best trial's checkpoint, score it on val beside the baselines.

    Trials run in this process checkpoint their best epoch (under ``checkpoint_dir``), and the
    best one's is the challenger. A best trial that ran elsewhere (a worker process or pod, or an
    earlier attempt of a resumed study) is trained once more with the same seed and data, with
    checkpoints in ``checkpoint_dir``. Parallel workers (``tune_config.workers``) are started by
    ``launcher`` (default: processes).
    """
    kept = KeptTrials(Path(checkpoint_dir) / "trials")
    tuning = tune(
        datamodule, tune_config, model_config, train_config, trial_callback, launcher, kept
    )
    best_model, best_train = configs_from_params(tuning.best_params, model_config, train_config)
    fit = kept.results.get(tuning.best_trial)
    if fit is not None and fit.best_checkpoint is not None:
        best_train = replace(best_train, checkpoint_dir=kept.checkpoint_dir(tuning.best_trial))
    else:
        best_train = replace(best_train, checkpoint_dir=checkpoint_dir)
        fit = train(datamodule, best_model, best_train)
    if fit.best_checkpoint is None:
        raise RuntimeError(f"refit of trial {tuning.best_trial} wrote no checkpoint")
    return Challenger(
        tuning=tuning,
        fit=fit,
        checkpoint=fit.best_checkpoint,
        model_config=best_model,
        train_config=best_train,
        metrics=evaluate_checkpoint(fit.best_checkpoint, datamodule),
        baselines=evaluate_baselines(datamodule, "val", seed=train_config.seed),
    )
