"""A checkpoint logged as a pyfunc model scores like the in-memory predictor after registration."""

from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow.models import Model

from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.inference import load_predictor
from ml.pyfunc import log_model, model_input
from ml.synthetic import FEATURES
from ml.training import train

NAME = "flywheel-flights"


@pytest.fixture(scope="module")
def checkpoint(splits: dict[str, pd.DataFrame], tmp_path_factory: pytest.TempPathFactory) -> str:
    datamodule = TabularDataModule(
        splits["train"], splits["val"], features=FEATURES, batch_size=512
    )
    directory = tmp_path_factory.mktemp("checkpoints")
    config = TrainConfig(max_epochs=1, batch_size=512, checkpoint_dir=str(directory))
    result = train(datamodule, ModelConfig(width=16, depth=1), config)
    assert result.best_checkpoint is not None
    return result.best_checkpoint


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    """A fresh SQLite tracking store and registry with artifacts in tmp_path."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # Through the environment, so no process-wide setting outlives the test.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    experiment = client.create_experiment("test", (tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment)
    return client


def test_registered_model_scores_like_the_checkpoint(
    checkpoint: str, splits: dict[str, pd.DataFrame], store: MlflowClient
) -> None:
    frame = splits["val"]
    with mlflow.start_run():
        first = log_model(checkpoint, frame, NAME, FEATURES)
        second = log_model(checkpoint, frame, NAME, FEATURES)

    assert (first.registered_model_version, second.registered_model_version) == (1, 2)
    assert sorted(v.version for v in store.search_model_versions(f"name='{NAME}'")) == [1, 2]

    loaded = mlflow.pyfunc.load_model(f"models:/{NAME}/1")
    expected = load_predictor(checkpoint).predict_proba(frame)
    # Only feature columns go in; the model carries its own preprocessing.
    predicted = loaded.predict(model_input(frame, FEATURES))
    np.testing.assert_allclose(np.asarray(predicted, dtype=np.float64), expected, atol=1e-6)
    assert expected.std() > 0

    signature = loaded.metadata.signature
    assert signature.inputs.input_names() == [*FEATURES.categorical, *FEATURES.numeric]
    assert signature.outputs is not None
    local = mlflow.artifacts.download_artifacts(f"models:/{NAME}/1")
    example = Model.load(local).load_input_example(local)
    assert list(example.columns) == signature.inputs.input_names() and len(example) == 5


def test_model_input_makes_numerics_double(splits: dict[str, pd.DataFrame]) -> None:
    frame = splits["train"].head(3).assign(scheduled_hour=[5, 6, 7])
    out = model_input(frame, FEATURES)
    assert out["scheduled_hour"].dtype == np.float64
    assert "is_late" not in out and "row_id" not in out
