"""Tuning trials per hour on one study in Optuna's RDB storage: 1 worker against N.

The same budget on the same synthetic data with the same search space, once in the calling
process (1 worker) and once fanned out over worker processes (`TuneConfig.workers`), each on a
fresh study in PostgreSQL (a scratch server of the distribution's package, or --storage).
Pruning is off, so both run every trial to its last epoch and only the throughput differs.

Run: python -m bench.tuning_workers --rows 200000 --trials 12 --max-epochs 6 --workers 1 2
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import optuna
import torch

from bench import quiet_lightning
from ml.config import ModelConfig, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES, make_table
from ml.tuning import tune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--max-epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", default="auto", help="Lightning accelerator: auto, cpu, gpu")
    parser.add_argument("--storage", help="an RDB URL with a database (default: a scratch server)")
    args = parser.parse_args()
    # Progress here; the libraries' own lines stay out of the table's way.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet_lightning(logging.WARNING)

    print(f"{os.cpu_count()} CPUs, CUDA: {torch.cuda.is_available()}", flush=True)
    dm = TabularDataModule(
        make_table(args.rows, seed=1),
        make_table(args.rows // 4, seed=2),
        features=FEATURES,
        batch_size=1024,
    )
    train = TrainConfig(
        max_epochs=args.max_epochs,
        batch_size=args.batch_size,
        accelerator=args.device,
        early_stopping_patience=None,
    )
    with ExitStack() as stack:
        storage = args.storage
        if storage is None:
            from deploy.stack.postgres import scratch_server

            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-pg-")))
            home.chmod(0o711)
            storage = stack.enter_context(scratch_server(home)) + "/optuna"
        rows = []
        for workers in args.workers:
            config = TuneConfig(
                n_trials=args.trials,
                storage=storage,
                study_name=f"bench-workers-{workers}-{uuid.uuid4().hex[:8]}",
                pruning=False,
                workers=workers,
            )
            print(f"{workers} worker(s): {args.trials} trials ...", flush=True)
            began = time.monotonic()
            result = tune(dm, config, ModelConfig(), train)
            seconds = time.monotonic() - began
            rows.append((workers, result.n_complete, seconds, result.total_compute_seconds))

    print(f"\n{args.rows:,} rows, {args.max_epochs} epochs a trial, no pruning\n")
    print("| workers | trials | wall s | trials per hour | trial s (mean, in its worker) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for workers, done, seconds, compute in rows:
        print(
            f"| {workers} | {done} | {seconds:.1f} | {3600 * done / seconds:.0f} | "
            f"{compute / max(done, 1):.1f} |"
        )


if __name__ == "__main__":
    main()
