"""Training samples/s on one device through five paths, by batch size and precision.

(a) this project's in-device data module with Lightning's plain step, (e) the same data module
with the graphed step (``TrainConfig.step="graphed"``, the default on one CUDA device), (b) a
plain PyTorch loop over device tensors (fused AdamW on CUDA), (c) Lightning with
DataLoader(TensorDataset), (d) Lightning with a per-row Dataset. Each row gives the GPU's busy
share sampled through NVML while the path trained and the peak memory torch allocated.

Needs only ``ml/``, torch, lightning, numpy, pandas, pyarrow (and the NVML bindings for the busy
share), so it runs as is on a GPU machine:

    python -m bench.train_throughput --rows 1000000 --batch-sizes 1024 4096 16384 65536
    python -m bench.train_throughput --device cpu --rows 200000 --batch-sizes 4096 --precisions fp32
"""

from __future__ import annotations

import argparse
import logging
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from bench import quiet_lightning
from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.models import TabularNet
from ml.synthetic import FEATURES, make_table
from ml.training import build_module

Window = tuple[float, float]
PRECISIONS = {"bf16": "bf16-mixed", "fp32": "32-true"}
PATHS = ("a", "e", "b", "c", "d")
NAMES = {
    "a": "(a) data module, plain step",
    "e": "(e) data module, graphed step",
    "b": "(b) plain PyTorch loop",
    "c": "(c) Lightning + TensorDataset",
    "d": "(d) Lightning + per-row Dataset",
}


@dataclass
class Row:
    """One measurement: a path at one batch size and precision."""

    path: str
    precision: str
    batch: int
    samples_per_s: float
    busy_percent: float | None
    peak_mib: float | None
    note: str = ""


class EpochTimer(L.Callback):
    """(start, end) of every training epoch (device work included), and how the steps ran."""

    def __init__(self, sync: Callable[[], None]):
        self.sync, self.windows, self._start = sync, [], 0.0
        self.note = ""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.sync()
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.sync()
        self.windows.append((self._start, time.perf_counter()))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = getattr(pl_module, "step", None)
        if step is not None:
            self.note = f"{step.replays} replays, {step.eager_steps} eager steps"
            if step.eager_reason:
                self.note += f" ({step.eager_reason})"


class RowDataset(Dataset):
    """The naive per-row Dataset: one Python call and one collate entry per sample."""

    def __init__(self, tensors: tuple[torch.Tensor, ...]):
        self.tensors = tensors

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        return tuple(t[i] for t in self.tensors)


class BusySampler:
    """Samples the GPU's utilisation through NVML every 20 ms while inside ``sampling()``, as
    (``clock()``, busy %) pairs."""

    def __init__(self, device: str, clock: Callable[[], float] = time.perf_counter):
        self.handle, self.clock = None, clock
        if device != "gpu":
            return
        try:
            import pynvml
        except ImportError:
            logging.getLogger(__name__).warning("no NVML bindings: GPU busy share not sampled")
            return
        pynvml.nvmlInit()
        index = torch.cuda.current_device()
        self.handle, self.nvml = pynvml.nvmlDeviceGetHandleByIndex(index), pynvml

    @contextmanager
    def sampling(self) -> Iterator[list[tuple[float, float]]]:
        samples: list[tuple[float, float]] = []
        if self.handle is None:
            yield samples
            return
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.02):
                busy = self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
                samples.append((self.clock(), float(busy)))

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield samples
        finally:
            stop.set()
            thread.join()


def lightning_epochs(
    dm: TabularDataModule, loader: DataLoader | None, args: argparse.Namespace, config: TrainConfig
) -> tuple[list[Window], str]:
    """Fit with the project's module on ``loader`` (None: the data module); each epoch's time."""
    timer = EpochTimer(_sync(args.device))
    module = build_module(dm, _model(args), config)
    trainer = L.Trainer(
        accelerator=args.device,
        devices=1,
        precision=config.precision,
        max_epochs=args.epochs,
        # The project's clipping: in the graph for the graphed step, Lightning's otherwise.
        gradient_clip_val=config.gradient_clip_val if module.automatic_optimization else None,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    if loader is None:
        trainer.fit(module, datamodule=dm)
    else:
        trainer.fit(module, train_dataloaders=loader)
    return timer.windows, timer.note


def plain_loop_epochs(
    dm: TabularDataModule, args: argparse.Namespace, config: TrainConfig
) -> tuple[list[Window], str]:
    """A hand-written loop over device tensors: the floor for per-batch overhead."""
    device = torch.device("cuda" if args.device == "gpu" else args.device)
    cat, num, y = (t.to(device) for t in dm.splits["train"])
    net = TabularNet(dm.cardinalities, dm.n_numeric_inputs, _model(args)).to(device)
    fused = device.type == "cuda"
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=fused or None)
    bf16 = config.precision == "bf16-mixed"
    sync, windows = _sync(args.device), []
    for epoch in range(args.epochs):
        sync()
        start = time.perf_counter()
        order = torch.randperm(y.shape[0], generator=torch.Generator().manual_seed(epoch))
        for sel in order.to(device).split(config.batch_size):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = net(cat[sel], num[sel]).float()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y[sel])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
        sync()
        windows.append((start, time.perf_counter()))
    return windows, "fused AdamW" if fused else ""


def measure(
    path: str, dm: TabularDataModule, args: argparse.Namespace, config: TrainConfig
) -> tuple[int, list[Window], str]:
    """Run one path; the rows it trained on, its epochs' (start, end) and a note.

    Only (e) takes the graphed step; the Lightning baselines take Lightning's plain one.
    """
    tensors = dm.splits["train"]
    rows = tensors[0].shape[0]
    if path == "e":
        return rows, *lightning_epochs(dm, None, args, replace(config, step="graphed"))
    config = replace(config, step="plain")
    if path == "a":
        return rows, *lightning_epochs(dm, None, args, config)
    if path == "b":
        return rows, *plain_loop_epochs(dm, args, config)
    if path == "c":
        loader = _loader(TensorDataset(*tensors), config.batch_size)
        return rows, *lightning_epochs(dm, loader, args, config)
    small = tuple(t[: args.per_row_rows] for t in tensors)
    loader = _loader(RowDataset(small), config.batch_size)
    windows, _ = lightning_epochs(dm, loader, args, config)
    return small[0].shape[0], windows, f"on its first {small[0].shape[0]:,} rows"


def _model(args: argparse.Namespace) -> ModelConfig:
    return ModelConfig(arch="resmlp", width=args.width, depth=args.depth, dropout=0.1)


def _sync(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device == "gpu" else lambda: None


def _steady(windows: list[Window]) -> list[Window]:
    # The first epoch pays for warm-up (allocations, kernel selection, graph capture): left out.
    return windows[1:] or windows


def _rate(rows: int, windows: list[Window]) -> float:
    return rows / statistics.median(end - start for start, end in _steady(windows))


def _busy(samples: list[tuple[float, float]], windows: list[Window]) -> float | None:
    inside = [v for t, v in samples if any(a <= t <= b for a, b in _steady(windows))]
    return statistics.fmean(inside) if inside else None


def _loader(dataset: Dataset, batch_size: int) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def table(rows: list[Row], device: str, args: argparse.Namespace) -> str:
    """The measurements as a Markdown table, with each row's ratio to the plain loop."""
    best_loop = {(r.precision, r.batch): r.samples_per_s for r in rows if r.path == "b"}
    lines = [
        f"device={device} rows={args.rows:,} epochs={args.epochs} "
        f"model=resmlp {args.width}x{args.depth}",
        "",
        "| path | precision | batch | samples/s | x plain loop | GPU busy % | peak MiB | note |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        loop = best_loop.get((r.precision, r.batch))
        ratio = f"{r.samples_per_s / loop:.2f}" if loop else ""
        busy = f"{r.busy_percent:.0f}" if r.busy_percent is not None else "n/a"
        peak = f"{r.peak_mib:,.0f}" if r.peak_mib is not None else "n/a"
        lines.append(
            f"| {NAMES[r.path]} | {r.precision} | {r.batch:,} | {r.samples_per_s:,.0f} | "
            f"{ratio} | {busy} | {peak} | {r.note} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, run every path at every batch size and precision, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=None)
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--device", default="gpu" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--per-row-rows", type=int, default=50_000, help="rows for path (d)")
    args = parser.parse_args()
    args.device = "gpu" if args.device in ("cuda", "gpu") else args.device
    if args.precisions is None:
        args.precisions = ["bf16", "fp32"] if args.device == "gpu" else ["fp32"]
    logging.basicConfig(level=logging.WARNING)
    quiet_lightning()
    frame = make_table(args.rows, seed=0)
    dm = TabularDataModule(frame, frame.head(1000), features=FEATURES)
    sampler = BusySampler(args.device)
    device = torch.cuda.get_device_name() if args.device == "gpu" else args.device
    rows: list[Row] = []
    for precision in args.precisions:
        for batch in args.batch_sizes:
            dm.batch_size = batch
            config = TrainConfig(
                batch_size=batch, precision=PRECISIONS[precision], accelerator=args.device
            )
            for path in args.paths:
                if args.device == "gpu":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                with sampler.sampling() as busy:
                    n, windows, note = measure(path, dm, args, config)
                peak = torch.cuda.max_memory_allocated() / 2**20 if args.device == "gpu" else None
                row = Row(
                    path,
                    precision,
                    batch,
                    _rate(n, windows),
                    _busy(busy, windows),
                    peak,
                    note,
                )
                rows.append(row)
                print(
                    f"{NAMES[path]:32s} {precision} batch {batch:>6,}: "
                    f"{row.samples_per_s:>12,.0f} samples/s {note}",
                    flush=True,
                )
    print()
    print(table(rows, device, args))


if __name__ == "__main__":
    main()
