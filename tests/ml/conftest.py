"""Fixtures: small synthetic flights splits, as frames and as Parquet files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ml.synthetic import make_flights


@pytest.fixture(scope="session")
def splits() -> dict[str, pd.DataFrame]:
    """Small train/val/test splits; val and test contain unseen categories."""
    return {
        "train": make_flights(3000, seed=1),
        "val": make_flights(1000, seed=2, unseen=True),
        "test": make_flights(1000, seed=3, unseen=True),
    }


@pytest.fixture()
def parquet_splits(tmp_path: Path, splits: dict[str, pd.DataFrame]) -> dict[str, Path]:
    """The same splits written as one Parquet file each."""
    paths = {}
    for name, frame in splits.items():
        paths[name] = tmp_path / f"{name}.parquet"
        frame.to_parquet(paths[name])
    return paths
