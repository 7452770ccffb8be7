"""Train a TabularClassifier with resumable, atomic checkpoints; returns a TrainResult."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import Logger

from ml.callbacks import AtomicCheckpointIO, EpochSeed, MetricHistory
from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.models import TabularClassifier

LAST_CHECKPOINT = "last.ckpt"
log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """Outcome of one training run; ``wall_seconds`` covers this process, not earlier attempts."""

    best_metrics: dict[str, float]
    best_epoch: int | None
    best_checkpoint: str | None
    epochs_run: int
    optimizer_steps: int
    wall_seconds: float
    device: str
    precision: str
    resumed_from: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)


def share_cores(workers: int) -> int:
    """Give this process its share of the machine's cores for torch's CPU threads, as one of
    `workers` processes training at once; returns the threads set.

    On a GPU too: each step's Python, data loading and kernel launches run on the host, and K
    processes that each start a thread per core contend for the cores, so K workers on one GPU
    tune more trials an hour with their share than with every core each
    (bench.trials_per_gpu_hour; figures in docs/benchmarks.md).
    """
    # The cores this process may run on (a cpuset, taskset), else the machine's.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = max(1, (cores or 1) // max(1, workers))
    torch.set_num_threads(threads)
    return threads


def resolve_precision(precision: str, accelerator: str = "auto") -> str:
    """Map "auto" to bf16-mixed on bf16-capable CUDA devices and 32-true everywhere else."""
    if precision != "auto":
        return precision
    on_cuda = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "bf16-mixed" if on_cuda and torch.cuda.is_bf16_supported() else "32-true"


def resolve_strategy(strategy: str, devices: int | str | Sequence[int]) -> str:
    """Use DDP when "auto" meets more than one explicitly requested device."""
    if strategy != "auto":
        return strategy
    n = len(devices) if isinstance(devices, Sequence) and not isinstance(devices, str) else devices
    return "ddp" if isinstance(n, int) and n > 1 else "auto"


def plain_step_reason(config: TrainConfig) -> str | None:
    """Why "auto" trains with Lightning's plain step rather than a graphed one (None: it does
    not). A CUDA graph replays one device's fixed work: no DDP, no accumulation, no loss scaler;
    asking for "graphed" with one of them is an error."""
    if config.step == "plain":
        return "the training config asks for the plain step"
    conflict = _graph_conflict(config)
    if config.step == "graphed":
        if conflict is not None:
            raise ValueError(
                f'TrainConfig(step="graphed") cannot train with {conflict}: '
                'use step="auto" or "plain"'
            )
        return None
    on_cuda = config.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return conflict if on_cuda else "no CUDA device"


def _graph_conflict(config: TrainConfig) -> str | None:
    strategy = resolve_strategy(config.strategy, config.devices)
    if strategy != "auto":
        return f"strategy {strategy}"
    if config.accumulate_grad_batches != 1:
        return "gradient accumulation"
    if resolve_precision(config.precision, config.accelerator) in ("16-mixed", "16"):
        return "fp16 loss scaling"
    return None


def device_name(device: torch.device) -> str:
    """Return a human-readable name of the device a run used."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def build_module(
    datamodule: TabularDataModule, model_config: ModelConfig, train_config: TrainConfig
) -> TabularClassifier:
    """Create a classifier sized for the datamodule's fitted preprocessor (and its label's
    classes: one output for binary, K for K classes)."""
    module = TabularClassifier(
        datamodule.cardinalities,
        datamodule.n_numeric_inputs,
        model=model_config,
        lr=train_config.lr,
        weight_decay=train_config.weight_decay,
        preprocessor=datamodule.preprocessor.to_dict(),
        n_outputs=datamodule.preprocessor.features.n_outputs,
    )
    reason = plain_step_reason(train_config)
    if reason is None:
        module.use_manual_step(clip=train_config.gradient_clip_val)
    else:
        log.info("training step: plain (%s)", reason)
    return module


def standard_callbacks(config: TrainConfig, extra: Sequence[L.Callback] = ()) -> list[L.Callback]:
    """Seeding, metric history, the caller's callbacks, early stopping and checkpointing."""
    callbacks: list[L.Callback] = [EpochSeed(config.seed), MetricHistory(config.monitor), *extra]
    if config.early_stopping_patience is not None:
        callbacks.append(
            EarlyStopping(config.monitor, patience=config.early_stopping_patience, mode="min")
        )
    if config.checkpoint_dir is not None:
        callbacks.append(
            ModelCheckpoint(
                dirpath=config.checkpoint_dir,
                # Metric names hold "/", which a filename template would turn into folders.
                filename="epoch{epoch:03d}",
                auto_insert_metric_name=False,
                monitor=config.monitor,
                mode="min",
                save_top_k=1,
                save_last=True,
                enable_version_counter=False,
            )
        )
    return callbacks


def build_trainer(
    config: TrainConfig,
    callbacks: Sequence[L.Callback] = (),
    logger: Logger | bool = False,
    enable_progress_bar: bool = False,
) -> L.Trainer:
    """Create the Trainer for ``config``; checkpointing is on when ``checkpoint_dir`` is set.

    A graphed step clips its own gradients (inside the graph): Lightning's clipping is off then.
    """
    manual = plain_step_reason(config) is None
    return L.Trainer(
        accelerator=config.accelerator,
        devices=config.devices,
        strategy=resolve_strategy(config.strategy, config.devices),
        precision=resolve_precision(config.precision, config.accelerator),
        max_epochs=config.max_epochs,
        accumulate_grad_batches=config.accumulate_grad_batches,
        gradient_clip_val=None if manual else config.gradient_clip_val,
        deterministic=config.deterministic,
        callbacks=standard_callbacks(config, callbacks),
        logger=logger,
        enable_checkpointing=config.checkpoint_dir is not None,
        enable_progress_bar=enable_progress_bar,
        enable_model_summary=False,
        # Data is already in memory and validated by the preprocessor; skip the sanity pass.
        num_sanity_val_steps=0,
        default_root_dir=config.checkpoint_dir,
        plugins=[AtomicCheckpointIO()] if config.checkpoint_dir is not None else None,
    )


def train(
    datamodule: TabularDataModule,
    model_config: ModelConfig | None = None,
    train_config: TrainConfig | None = None,
    *,
    callbacks: Sequence[L.Callback] = (),
    logger: Logger | bool = False,
    enable_progress_bar: bool = False,
) -> TrainResult:
    """Fit a classifier, resuming from ``last.ckpt`` in the checkpoint dir when one exists."""
    model_config = model_config or ModelConfig()
    config = train_config or TrainConfig()
    start = time.perf_counter()
    L.seed_everything(config.seed, verbose=False)
    module = build_module(datamodule, model_config, config)
    trainer = build_trainer(config, callbacks, logger, enable_progress_bar)
    resume = _last_checkpoint(config.checkpoint_dir)
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
    history = next(c for c in trainer.callbacks if isinstance(c, MetricHistory))
    best = history.best()
    checkpoint = trainer.checkpoint_callback if config.checkpoint_dir is not None else None
    return TrainResult(
        best_metrics={k: v for k, v in best.items() if k != "epoch"},
        best_epoch=int(best["epoch"]) if best else None,
        best_checkpoint=(checkpoint.best_model_path or None) if checkpoint else None,
        epochs_run=trainer.current_epoch,
        optimizer_steps=trainer.global_step,
        wall_seconds=time.perf_counter() - start,
        device=device_name(trainer.strategy.root_device),
        precision=str(trainer.precision),
        resumed_from=resume,
        history=list(history.records),
    )


def _last_checkpoint(checkpoint_dir: str | None) -> str | None:
    if checkpoint_dir is None:
        return None
    last = Path(checkpoint_dir) / LAST_CHECKPOINT
    return str(last) if last.exists() else None
