"""The GPU benchmarks run as they would on a GPU machine, here on CPU with tiny sizes.

They must stay runnable with ``ml/`` and torch, lightning, numpy, pandas, pyarrow alone (what a
GPU machine has); each prints a table whose rows are the paths and settings asked for.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.ml.conftest import ML_DEPENDENCIES, REPO, imports_check

FORBIDDEN = ("dagster", "optuna", "mlflow", "sklearn", "pipelines", "sim")


def _run(*args: str) -> str:
    run = (
        "import runpy; sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__')"
    )
    check = imports_check(ML_DEPENDENCIES, run, FORBIDDEN)
    result = subprocess.run(
        [sys.executable, "-c", check, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_train_throughput_measures_every_path_at_every_batch_size() -> None:
    out = _run(
        "bench.train_throughput",
        *("--device", "cpu", "--rows", "4000", "--epochs", "2", "--per-row-rows", "1000"),
        *("--batch-sizes", "256", "1024", "--width", "16", "--depth", "1"),
    )
    rows = [line for line in out.splitlines() if line.startswith("| (")]
    assert [(r.split(" | ")[0], r.split(" | ")[2]) for r in rows] == [
        (f"| {name}", batch)
        for batch in ("256", "1,024")
        for name in (
            "(a) data module, plain step",
            "(e) data module, graphed step",
            "(b) plain PyTorch loop",
            "(c) Lightning + TensorDataset",
            "(d) Lightning + per-row Dataset",
        )
    ]
    for row in rows:
        samples_per_s = float(row.split(" | ")[3].replace(",", ""))
        assert samples_per_s > 0
    # On CPU the graphed step says that it ran eagerly, and why.
    graphed = [r for r in rows if "(e)" in r]
    assert graphed and all("0 replays" in r and "on a CUDA device" in r for r in graphed)


def test_trials_per_gpu_hour_runs_the_same_trials_for_every_k() -> None:
    out = _run(
        "bench.trials_per_gpu_hour",
        *("--device", "cpu", "--k", "1", "2", "--trials", "4", "--rows", "3000", "--epochs", "1"),
    )
    table = re.findall(r"^\| (\d) \| (\d+) \| ([\d.]+) \| ([\d,]+) \| ([\d.]+) \|", out, re.M)
    assert [(k, trials) for k, trials, *_ in table] == [("1", "4"), ("2", "4")]
    assert table[0][4] == "1.00"
    assert "worker start-up" in out
