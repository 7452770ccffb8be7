"""Epochs and wall time to the best validation logloss: Hyperband pruning vs no pruning.

Both studies run the same number of trials with the same TPE seed on the same synthetic data.
Run: python -m bench.tuning_pruning --rows 200000 --trials 12 --max-epochs 9
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import optuna
import torch

from ml.config import ModelConfig, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.synthetic import make_flights
from ml.tuning import create_study, tune


def run_study(
    dm: TabularDataModule, pruning: bool, storage: Path, args: argparse.Namespace
) -> dict[str, float]:
    """Run one study and return its cost in epochs and seconds, in total and up to its best."""
    config = TuneConfig(
        n_trials=args.trials,
        storage=str(storage),
        study_name="bench",
        pruning=pruning,
        min_resource=args.min_resource,
        reduction_factor=args.reduction_factor,
    )
    train_config = TrainConfig(
        max_epochs=args.max_epochs,
        batch_size=args.batch_size,
        accelerator=args.device,
        early_stopping_patience=None,
    )
    start = time.perf_counter()
    result = tune(dm, config, ModelConfig(), train_config)
    wall = time.perf_counter() - start
    trials = sorted(create_study(config, args.max_epochs).trials, key=lambda t: t.number)
    epochs = [t.user_attrs["epochs_run"] for t in trials]
    seconds = [t.user_attrs["wall_seconds"] for t in trials]
    upto = result.best_trial + 1
    return {
        "best_logloss": result.best_value,
        "complete": result.n_complete,
        "pruned": result.n_pruned,
        "epochs_total": sum(epochs),
        "epochs_to_best": sum(epochs[:upto]),
        "seconds_total": wall,
        "seconds_to_best": sum(seconds[:upto]),
    }


def main() -> None:
    """Parse arguments, run both studies and print their costs side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--max-epochs", type=int, default=9)
    parser.add_argument("--min-resource", type=int, default=1)
    parser.add_argument("--reduction-factor", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--device", default="gpu" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n_val = max(args.rows // 5, 1000)
    dm = TabularDataModule(
        make_flights(args.rows, seed=0),
        make_flights(n_val, seed=1, unseen=True),
        batch_size=args.batch_size,
    )
    with tempfile.TemporaryDirectory() as tmp:
        rows = {
            "hyperband": run_study(dm, True, Path(tmp) / "hyperband.journal", args),
            "no pruning": run_study(dm, False, Path(tmp) / "nop.journal", args),
        }
    print(f"rows={args.rows} trials={args.trials} max_epochs={args.max_epochs}", end=" ")
    print(f"device={args.device}")
    keys = list(next(iter(rows.values())))
    print(f"{'':12s}" + "".join(f"{k:>16s}" for k in keys))
    for name, row in rows.items():
        print(f"{name:12s}" + "".join(f"{row[k]:>16.4g}" for k in keys))


if __name__ == "__main__":
    main()
