"""Compute to reach the no-pruning study's best validation logloss: Hyperband vs no pruning.

Both studies run their trials one after another (the same number unless ``--hyperband-trials``
gives the pruned study more: what pruning buys is more configurations for the same compute), with
the same TPE seed on the same data: a synthetic table (``ml.synthetic``), or with ``--dataset`` a
training dataset the flywheel wrote for the task of the settings (FLYWHEEL_TASK, else the default
task). A study's compute to a target is the sum of its trials' seconds (and epochs) in trial order
up to the first complete trial at or below it; the target is the no-pruning study's best (plus
``--tolerance``). ``ratio`` is Hyperband's compute to the target over the no-pruning study's; with
several ``--seeds`` (a pair of studies each), their median (a Hyperband study that never reaches
the target counts as infinite).
Run: python -m bench.tuning_pruning --rows 50000 --trials 30 --max-epochs 9 --seeds 0 1 2
     python -m bench.tuning_pruning --dataset .flywheel/checkout/data/datasets/flights \
         --trials 30 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import optuna
import pandas as pd
import torch
from optuna.trial import FrozenTrial, TrialState

from ml.config import ModelConfig, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES, make_table
from ml.tuning import create_study, tune


def run_study(
    dm: TabularDataModule, pruning: bool, storage: Path, seed: int, args: argparse.Namespace
) -> dict[str, object]:
    """Run one study; its best, its counts, its total cost and its trials."""
    config = TuneConfig(
        n_trials=args.hyperband_trials if pruning else args.trials,
        storage=str(storage),
        study_name="bench",
        pruning=pruning,
        sampler_seed=seed,
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
    return {
        "best_logloss": result.best_value,
        "complete": result.n_complete,
        "pruned": result.n_pruned,
        "epochs_total": sum(t.user_attrs["epochs_run"] for t in trials),
        "seconds_total": wall,
        "trials": trials,
    }


def write_trials(rows: dict[str, dict[str, object]], path: Path) -> None:
    """One CSV line per trial of each study: its state, value, epochs, seconds and params."""
    records = [
        {
            "study": name,
            "number": t.number,
            "state": t.state.name,
            "value": t.value,
            "epochs": t.user_attrs["epochs_run"],
            "seconds": t.user_attrs["wall_seconds"],
            **t.params,
        }
        for name, row in rows.items()
        for t in row["trials"]
    ]
    pd.DataFrame(records).to_csv(path, index=False)


def compute_to(trials: list[FrozenTrial], target: float) -> tuple[float, int, int] | None:
    """Seconds and epochs of the trials up to the first complete one at or below ``target``,
    and its number; None if none reached it."""
    seconds = epochs = 0
    for trial in trials:
        seconds += trial.user_attrs["wall_seconds"]
        epochs += trial.user_attrs["epochs_run"]
        if trial.state == TrialState.COMPLETE and trial.value <= target:
            return seconds, epochs, trial.number
    return None


def main() -> None:
    """Parse arguments, run both studies and print their costs side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument(
        "--hyperband-trials", type=int, help="trials of the Hyperband study (default: --trials)"
    )
    parser.add_argument("--max-epochs", type=int, default=9)
    parser.add_argument("--min-resource", type=int, default=1)
    parser.add_argument("--reduction-factor", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--device", default="gpu" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0], help="TPE seeds: a pair of studies each"
    )
    parser.add_argument("--tolerance", type=float, default=0.0, help="logloss above the best")
    parser.add_argument(
        "--dataset", type=Path, help="a folder with train.parquet and validation.parquet"
    )
    parser.add_argument("--trials-csv", type=Path, help="write every trial of both studies here")
    args = parser.parse_args()
    args.hyperband_trials = args.hyperband_trials or args.trials
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.dataset:
        # A training dataset the flywheel wrote: datasets/<task>/ of its DVC repository
        # (.flywheel/checkout/data after `make flywheel`).
        from pipelines.task import load_task

        features = load_task().model.features
        train_split, val_split = args.dataset / "train.parquet", args.dataset / "validation.parquet"
        args.rows = len(pd.read_parquet(train_split, columns=[features.label]))
    else:
        features = FEATURES
        n_val = max(args.rows // 5, 1000)
        train_split = make_table(args.rows, seed=0)
        val_split = make_table(n_val, seed=1, unseen=True)
    dm = TabularDataModule(train_split, val_split, features=features, batch_size=args.batch_size)
    print(
        f"rows={args.rows:,} trials={args.trials} (hyperband: {args.hyperband_trials}) "
        f"max_epochs={args.max_epochs} "
        f"reduction_factor={args.reduction_factor} tolerance={args.tolerance} "
        f"device={args.device}\n"
    )
    print(
        "| seed | study | best val logloss | complete | pruned | epochs | s | trial reaching "
        "the target | epochs to it | s to it | compute ratio (s) |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    ratios = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            rows = {
                "hyperband": run_study(dm, True, Path(tmp) / "hyperband.journal", seed, args),
                "no pruning": run_study(dm, False, Path(tmp) / "nop.journal", seed, args),
            }
        if args.trials_csv:
            write_trials(rows, args.trials_csv.with_suffix(f".seed{seed}.csv"))
        target = rows["no pruning"]["best_logloss"] + args.tolerance
        reference = compute_to(rows["no pruning"]["trials"], target)
        assert reference is not None  # its best trial reaches its own best
        for name, row in rows.items():
            reached = compute_to(row["trials"], target)
            cells = ["not reached", "", "", ""]
            if reached is not None:
                seconds, epochs, number = reached
                ratio = seconds / reference[0]
                cells = [str(number), str(epochs), f"{seconds:.1f}", f"{ratio:.2f}"]
            if name == "hyperband":
                ratios.append(ratio if reached is not None else float("inf"))
            print(
                f"| {seed} | {name} | {row['best_logloss']:.4f} | {row['complete']} | "
                f"{row['pruned']} | {row['epochs_total']} | {row['seconds_total']:.1f} | "
                + " | ".join(cells)
                + " |",
                flush=True,
            )
    shown = ", ".join("not reached" if r == float("inf") else f"{r:.2f}" for r in ratios)
    print(f"\nHyperband's compute to the target over no pruning's, by seed: {shown}")
    print(f"median: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
