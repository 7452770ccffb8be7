"""Fixtures: the synthetic splits (tests/conftest.py) as Parquet files; a killed run; the check
of what ml imports."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest


@pytest.fixture()
def parquet_splits(tmp_path: Path, splits: dict[str, pd.DataFrame]) -> dict[str, Path]:
    """The same splits written as one Parquet file each."""
    paths = {}
    for name, frame in splits.items():
        paths[name] = tmp_path / f"{name}.parquet"
        frame.to_parquet(paths[name])
    return paths


REPO = Path(__file__).resolve().parents[2]
# What ml trains with. What they import themselves is theirs: on a machine whose Lightning pulls
# in scikit-learn (the GPU image's does), ml importing Lightning is still all right.
ML_DEPENDENCIES = "torch, lightning, numpy, pandas, pyarrow"


def imports_check(dependencies: str, code: str, forbidden: tuple[str, ...]) -> str:
    """Python source that imports `dependencies`, runs `code` and fails if `code` imported any
    of `forbidden` beyond what the dependencies had."""
    return (
        f"import sys; import {dependencies}; before = set(sys.modules); {code}; "
        f"bad = [m for m in {forbidden!r} if m in set(sys.modules) - before]; "
        "assert not bad, f'imported {bad}'"
    )


def run_until_killed(script: str, splits: dict[str, Path], out: Path) -> None:
    """Run `script` in a fresh interpreter with (train, val, out) as arguments; it must end by
    SIGKILL, as a preempted worker would."""
    args = [str(splits["train"]), str(splits["val"]), str(out)]
    child = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=REPO, capture_output=True, timeout=300
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
