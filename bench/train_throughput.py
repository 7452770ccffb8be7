"""Training samples/s for one model on one device through four data paths.

(a) this project's in-device datamodule, (b) a plain PyTorch loop over device tensors,
(c) Lightning with DataLoader(TensorDataset), (d) Lightning with a per-row Dataset.
Run: python -m bench.train_throughput --rows 200000 --epochs 3 --device cpu
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.models import TabularNet
from ml.synthetic import make_flights
from ml.training import build_module, resolve_precision


class EpochTimer(L.Callback):
    """Wall time of every training epoch (device work included)."""

    def __init__(self, sync: Callable[[], None]):
        self.sync, self.seconds, self._start = sync, [], 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.sync()
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.sync()
        self.seconds.append(time.perf_counter() - self._start)


class RowDataset(Dataset):
    """The naive per-row Dataset: one Python call and one collate entry per sample."""

    def __init__(self, tensors: tuple[torch.Tensor, ...]):
        self.tensors = tensors

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        return tuple(t[i] for t in self.tensors)


def lightning_epochs(dm: TabularDataModule, loader: object, args: argparse.Namespace) -> list:
    """Fit with a Lightning Trainer on ``loader`` (None: the datamodule) and time each epoch."""
    timer = EpochTimer(_sync(args.device))
    trainer = L.Trainer(
        accelerator=args.device,
        devices=1,
        precision=resolve_precision("auto", args.device),
        max_epochs=args.epochs,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    module = build_module(dm, _model(args), TrainConfig(batch_size=args.batch_size))
    if loader is None:
        trainer.fit(module, datamodule=dm)
    else:
        trainer.fit(module, train_dataloaders=loader)
    return timer.seconds


def plain_loop_epochs(dm: TabularDataModule, args: argparse.Namespace) -> list[float]:
    """A hand-written loop over device tensors: the floor for per-batch overhead."""
    device = torch.device("cuda" if args.device == "gpu" else args.device)
    cat, num, y = (t.to(device) for t in dm.splits["train"])
    net = TabularNet(dm.cardinalities, dm.n_numeric_inputs, _model(args)).to(device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    bf16 = resolve_precision("auto", args.device) == "bf16-mixed"
    sync, seconds = _sync(args.device), []
    for epoch in range(args.epochs):
        sync()
        start = time.perf_counter()
        order = torch.randperm(y.shape[0], generator=torch.Generator().manual_seed(epoch))
        for sel in order.to(device).split(args.batch_size):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = net(cat[sel], num[sel]).float()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y[sel])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        sync()
        seconds.append(time.perf_counter() - start)
    return seconds


def _model(args: argparse.Namespace) -> ModelConfig:
    return ModelConfig(arch="resmlp", width=args.width, depth=args.depth)


def _sync(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device in ("gpu", "cuda") else lambda: None


def _rate(rows: int, seconds: list[float]) -> float:
    # The first epoch pays for warm-up (allocations, kernel selection), so it is left out.
    steady = seconds[1:] or seconds
    return rows / statistics.median(steady)


def main() -> None:
    """Parse arguments, run every data path and print samples/s."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--per-row-rows", type=int, default=50_000, help="rows for path (d)")
    args = parser.parse_args()
    args.device = "gpu" if args.device == "cuda" else args.device
    frame = make_flights(args.rows, seed=0)
    dm = TabularDataModule(frame, frame.head(1000), batch_size=args.batch_size)
    tensors = dm.splits["train"]
    small = tuple(t[: args.per_row_rows] for t in tensors)
    paths = {
        "(a) in-device datamodule": (args.rows, lambda: lightning_epochs(dm, None, args)),
        "(b) plain torch loop": (args.rows, lambda: plain_loop_epochs(dm, args)),
        "(c) Lightning + TensorDataset": (
            args.rows,
            lambda: lightning_epochs(dm, _loader(TensorDataset(*tensors), args), args),
        ),
        "(d) Lightning + per-row Dataset": (
            len(small[0]),
            lambda: lightning_epochs(dm, _loader(RowDataset(small), args), args),
        ),
    }
    device = torch.cuda.get_device_name() if args.device == "gpu" else args.device
    print(f"device={device} rows={args.rows} batch={args.batch_size} epochs={args.epochs}")
    for name, (rows, run) in paths.items():
        print(f"{name:34s} {_rate(rows, run()):>12,.0f} samples/s  (rows={rows})", flush=True)


def _loader(dataset: Dataset, args: argparse.Namespace) -> DataLoader:
    return DataLoader(dataset, batch_size=args.batch_size, shuffle=True)


if __name__ == "__main__":
    main()
