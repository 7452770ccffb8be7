"""ml is a pure library: importing it pulls in no orchestration, tracking or tuning packages."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECK = (
    "import ml, ml.data, ml.models, ml.training, ml.inference, ml.metrics; import sys; "
    "bad = [m for m in ('dagster', 'optuna', 'mlflow', 'sklearn', 'pipelines', 'sim') "
    "if m in sys.modules]; assert not bad, bad"
)


def test_import_ml_pulls_in_no_heavy_dependencies() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
