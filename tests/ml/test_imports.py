"""ml is a pure library: importing it pulls in no orchestration, tracking or tuning packages."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.ml.conftest import ML_DEPENDENCIES, imports_check

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("dagster", "optuna", "mlflow", "pipelines", "sim")
# (ml's modules, the dependencies they may import first, what they must not import besides).
CASES = {
    "core": (
        "ml, ml.data, ml.models, ml.training, ml.inference, ml.metrics",
        ML_DEPENDENCIES,
        (*SERVICES, "sklearn"),
    ),
    # Evaluation, drift and the gate run beside Dagster assets and sensors: numpy and pandas
    # only, with matplotlib loaded by ml.plots when a figure is drawn, not when it is imported.
    "evaluation": (
        "ml.evaluation, ml.drift, ml.promotion, ml.plots",
        "numpy, pandas",
        (*SERVICES, "matplotlib", "sklearn", "scipy", "torch", "lightning"),
    ),
}


@pytest.mark.parametrize("modules, allowed, forbidden", CASES.values(), ids=CASES.keys())
def test_import_pulls_in_no_heavy_dependencies(
    modules: str, allowed: str, forbidden: tuple[str, ...]
) -> None:
    check = imports_check(allowed, f"import {modules}", forbidden)
    result = subprocess.run(
        [sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
