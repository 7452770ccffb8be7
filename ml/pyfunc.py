"""An MLflow pyfunc flavour for training checkpoints: preprocessing and network in one model.

A binary model's ``predict`` returns P(label = 1) per row (a float64 vector). A model of K
classes returns a frame (``ml.labels.output_frame``): ``score``, the expected class index over
K - 1 (what drift monitoring and the predictions table take), then ``p_0`` .. ``p_<K-1>``, the
probability of each class in ``FeatureConfig.classes`` order
(``ml.labels.probabilities_from_output`` turns it back into an (n, K) matrix).

Imported explicitly (it pulls in MLflow); ``import ml`` stays free of tracking libraries.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow.models import ModelSignature, infer_signature
from mlflow.models.model import ModelInfo
from mlflow.pyfunc import PythonModel, PythonModelContext
from mlflow.types import ColSpec, Schema

from ml.config import FeatureConfig
from ml.inference import Predictor, load_predictor
from ml.labels import output_frame

CHECKPOINT_ARTIFACT = "checkpoint"
# The packages ml.inference imports; pinned to this environment so the model loads identically.
RUNTIME_PACKAGES = ("torch", "lightning", "torchmetrics", "numpy", "pandas", "pyarrow")
ML_PACKAGE = Path(__file__).resolve().parent
# Logged as code rather than pickled: loading executes this file with the shipped ml package.
MODEL_CODE = ML_PACKAGE / "pyfunc_model.py"


class CheckpointModel(PythonModel):
    """Scores raw feature tables with the preprocessor and network stored in one checkpoint."""

    def __init__(self) -> None:
        self._predictor: Predictor | None = None

    def load_context(self, context: PythonModelContext) -> None:
        """Rebuild the predictor from the logged checkpoint artifact."""
        self._predictor = load_predictor(context.artifacts[CHECKPOINT_ARTIFACT])

    def predict(
        self, context: PythonModelContext, model_input: pd.DataFrame, params: dict | None = None
    ) -> np.ndarray | pd.DataFrame:
        """Return P(label = 1) for every row of ``model_input`` (for K classes, the frame of
        score and class probabilities that the module describes)."""
        if self._predictor is None:
            self.load_context(context)
        return output_frame(self._predictor.predict_proba(model_input))


def model_input(frame: pd.DataFrame, features: FeatureConfig) -> pd.DataFrame:
    """Return the feature columns of ``frame`` as the model takes them (numerics as float64)."""
    # Integer columns become doubles so that a later batch with missing values still conforms.
    numeric = frame[list(features.numeric)].astype(np.float64)
    return pd.concat([frame[list(features.categorical)], numeric], axis=1)


def model_signature(checkpoint_path: str | Path, example: pd.DataFrame) -> ModelSignature:
    """Infer the signature from ``example`` (model input columns) and its predictions."""
    predictions = output_frame(load_predictor(checkpoint_path).predict_proba(example))
    inferred = infer_signature(example, predictions)
    # Every feature column must be present, even one the example happens to have nulls in:
    # missing values are the preprocessor's business, missing columns are an error.
    inputs = Schema([ColSpec(c.type, c.name, required=True) for c in inferred.inputs.inputs])
    return ModelSignature(inputs, inferred.outputs)


def requirements() -> list[str]:
    """Return the pinned pip requirements of the model's runtime."""
    # Local version labels (torch's "+cpu") name a build, not a release an index serves.
    return [f"{package}=={version(package).split('+')[0]}" for package in RUNTIME_PACKAGES]


def log_model(
    checkpoint_path: str | Path,
    example_frame: pd.DataFrame,
    registered_model_name: str,
    features: FeatureConfig,
    name: str = "model",
    n_examples: int = 5,
    tags: dict[str, str] | None = None,
) -> ModelInfo:
    """Log a checkpoint as a pyfunc model in the active run and register a new version of it.

    The signature is inferred from the first ``n_examples`` rows of ``example_frame`` (feature
    columns only); the ``ml`` package travels with the model as code, so loading it needs only
    the pinned requirements.
    """
    example = model_input(example_frame.head(n_examples), features).reset_index(drop=True)
    signature = model_signature(checkpoint_path, example)
    return mlflow.pyfunc.log_model(
        name=name,
        python_model=str(MODEL_CODE),
        artifacts={CHECKPOINT_ARTIFACT: str(checkpoint_path)},
        code_paths=[str(ML_PACKAGE)],
        signature=signature,
        input_example=example,
        pip_requirements=requirements(),
        registered_model_name=registered_model_name,
        tags=tags,
    )
