"""A LightningDataModule that keeps every split as tensors on the training device."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch
from torch import Tensor

from ml.config import FeatureConfig
from ml.preprocessing import Preprocessor

Split = pd.DataFrame | str | Path
# Category codes, numeric inputs and labels; and the rows' weights when the features name a
# weight column.
Batch = tuple[Tensor, ...]


class EpochOrder:
    """Deterministic per-epoch row order for one rank, derived from ``seed`` and the epoch.

    Lightning calls ``set_epoch`` on a loader's ``sampler`` at the start of every training epoch,
    including the first epoch after a resume, so a resumed run replays the same batches.

    With ``streams`` above 1 (shuffled only) ``indices`` gives that many orders of the rows, one
    per row of a (streams, rows) tensor, drawn one after the other from the epoch's generator:
    the first is the order one stream would get.
    """

    def __init__(
        self,
        n: int,
        shuffle: bool,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        streams: int = 1,
    ):
        if streams < 1 or (streams > 1 and not shuffle):
            raise ValueError(f"streams must be 1, or more with shuffle, not {streams}")
        self.n, self.shuffle, self.seed = n, shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.streams = streams
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order ``indices`` returns next."""
        self.epoch = epoch

    def __len__(self) -> int:
        if self.world_size == 1:
            return self.n
        if self.shuffle:
            return math.ceil(self.n / self.world_size)
        return len(range(self.rank, self.n, self.world_size))

    def indices(self) -> Tensor | None:
        """Return this rank's row indices for the epoch (a (streams, rows) tensor with several
        streams), or None for all rows in order."""
        if not self.shuffle and self.world_size == 1:
            return None
        if self.shuffle:
            # A CPU generator gives the same order on every device type and every rank.
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.stack(
                [torch.randperm(self.n, generator=gen) for _ in range(self.streams)]
            )
        else:
            order = torch.arange(self.n).unsqueeze(0)
        if self.world_size > 1:
            if self.shuffle:
                # Training shards must be equal so every DDP rank takes the same number of steps.
                padded = self.world_size * len(self)
                order = torch.cat([order, order[:, : padded - self.n]], dim=1)
            order = order[:, self.rank :: self.world_size]
        return order[0] if self.streams == 1 else order


class DeviceBatches:
    """Iterable of batches sliced from device-resident tensors: no workers, no per-row Python."""

    # Lightning inspects the DataLoader-style ``sampler``/``batch_sampler`` pair and calls
    # ``sampler.set_epoch`` each epoch; there is no batch sampler to wrap.
    batch_sampler = None

    def __init__(self, tensors: Batch, batch_size: int, sampler: EpochOrder):
        self.tensors, self.batch_size, self.sampler = tensors, batch_size, sampler

    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        idx = self.sampler.indices()
        if idx is None:
            n = self.tensors[0].shape[0]
            for start in range(0, n, self.batch_size):
                yield tuple(t[start : start + self.batch_size] for t in self.tensors)
            return
        idx = idx.to(self.tensors[0].device)
        if idx.dim() == 2:
            # One order per stream: each tensor of a batch is (streams, rows, ...).
            streams = idx.shape[0]
            for start in range(0, idx.shape[1], self.batch_size):
                sel = idx[:, start : start + self.batch_size].reshape(-1)
                yield tuple(
                    t.index_select(0, sel).unflatten(0, (streams, -1)) for t in self.tensors
                )
            return
        for start in range(0, idx.shape[0], self.batch_size):
            sel = idx[start : start + self.batch_size]
            yield tuple(t.index_select(0, sel) for t in self.tensors)


class TabularDataModule(L.LightningDataModule):
    """Fits the preprocessor of ``features`` on train (or takes a fitted ``preprocessor`` and
    its features), then serves all splits from tensors on the device."""

    def __init__(
        self,
        train: Split,
        val: Split,
        test: Split | None = None,
        features: FeatureConfig | None = None,
        batch_size: int = 1024,
        eval_batch_size: int | None = None,
        seed: int = 0,
        preprocessor: Preprocessor | None = None,
        min_steps_per_epoch: int = 1,
    ):
        super().__init__()
        if preprocessor is not None:
            features = preprocessor.features
        elif features is None:
            raise ValueError("give the features, or a fitted preprocessor that holds them")
        frames = {"train": train, "val": val} | ({"test": test} if test is not None else {})
        frames = {name: _read(split, features) for name, split in frames.items()}
        self.preprocessor = preprocessor or Preprocessor.fit(frames["train"], features)
        self.requested_batch_size = batch_size
        self.min_steps_per_epoch = min_steps_per_epoch
        self.batch_size = training_batch_size(len(frames["train"]), batch_size, min_steps_per_epoch)
        self.eval_batch_size = eval_batch_size or 4 * batch_size
        self.seed = seed
        self.splits: dict[str, Batch] = {k: self._tensors(f, k) for k, f in frames.items()}
        # The rows as read, for a data module with more of them in training.
        self.frames = frames
        self._on_device: dict[str, Batch] = {}

    def with_validation_in_training(self) -> TabularDataModule:
        """A data module whose training split is this one's training and validation rows, its
        preprocessor fitted on both (categories first seen in validation get embeddings), with
        the same validation and test rows and settings: the final fit of what was chosen on
        validation."""
        train = pd.concat([self.frames["train"], self.frames["val"]], ignore_index=True)
        return TabularDataModule(
            train,
            self.frames["val"],
            self.frames.get("test"),
            features=self.preprocessor.features,
            batch_size=self.requested_batch_size,
            eval_batch_size=self.eval_batch_size,
            seed=self.seed,
            min_steps_per_epoch=self.min_steps_per_epoch,
        )

    def _tensors(self, frame: pd.DataFrame, split: str) -> Batch:
        categorical, numeric = self.preprocessor.transform(frame)
        labels = self.preprocessor.labels(frame)
        tensors = torch.from_numpy(categorical), torch.from_numpy(numeric), torch.from_numpy(labels)
        weights = self.preprocessor.weights(frame)
        if weights is None:
            return tensors
        if split == "train" and len(weights):
            # Mean 1 over the training rows: a step's mean weighted loss keeps the scale (and
            # the learning rate its meaning) of an unweighted one. Evaluation splits keep their
            # weights as they are: their metrics divide by the weights' sum.
            weights = weights / weights.mean(dtype=np.float64)
        return (*tensors, torch.from_numpy(weights.astype(np.float32)))

    def setup(self, stage: str | None = None) -> None:
        """Copy every split once to the device the trainer's strategy placed this rank on."""
        device = self.trainer.strategy.root_device if self.trainer else torch.device("cpu")
        self._on_device = {k: tuple(t.to(device) for t in v) for k, v in self.splits.items()}

    def _loader(self, split: str, shuffle: bool, streams: int = 1) -> DeviceBatches:
        tensors = self._on_device.get(split) or self.splits[split]
        rank, world = (
            (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        )
        order = EpochOrder(tensors[0].shape[0], shuffle, self.seed, rank, world, streams)
        return DeviceBatches(tensors, self.batch_size if shuffle else self.eval_batch_size, order)

    def train_dataloader(self) -> DeviceBatches:
        """Shuffled training batches, one seeded permutation per epoch; for a module that asks
        for several (``row_orders``: an ensemble's members), one per stream, each batch tensor
        (streams, rows, ...)."""
        module = self.trainer.lightning_module if self.trainer else None
        return self._loader("train", shuffle=True, streams=getattr(module, "row_orders", 1))

    def val_dataloader(self) -> DeviceBatches:
        """Validation batches in row order."""
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DeviceBatches:
        """Test batches in row order (requires a test split)."""
        return self._loader("test", shuffle=False)

    @property
    def cardinalities(self) -> list[int]:
        """Embedding table sizes of the fitted preprocessor."""
        return self.preprocessor.cardinalities

    @property
    def n_numeric_inputs(self) -> int:
        """Numeric input width of the fitted preprocessor."""
        return self.preprocessor.n_numeric_inputs


def training_batch_size(rows: int, batch_size: int, min_steps_per_epoch: int = 1) -> int:
    """The batch size that gives an epoch of ``rows`` at least ``min_steps_per_epoch`` steps,
    ``batch_size`` at most. A small dataset (a bootstrap's 900 training rows) at a batch of
    1,024 would give one step an epoch, and a tuning budget counted in epochs would leave its
    network barely trained."""
    if min_steps_per_epoch < 1:
        raise ValueError(f"min_steps_per_epoch must be 1 or more, not {min_steps_per_epoch}")
    return max(1, min(batch_size, math.ceil(rows / min_steps_per_epoch)))


def _read(split: Split, features: FeatureConfig) -> pd.DataFrame:
    if isinstance(split, pd.DataFrame):
        return split
    columns = [*features.categorical, *features.numeric, features.label]
    if features.weight is not None:
        if features.weight not in pq.read_schema(split).names:
            raise ValueError(f"weight column {features.weight!r} is not in the table {split}")
        columns.append(features.weight)
    return pd.read_parquet(split, columns=columns)
