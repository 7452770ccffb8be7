"""Models-from-code entry point: MLflow runs this file to build the checkpoint pyfunc model."""

from mlflow.models import set_model

from ml.pyfunc import CheckpointModel

set_model(CheckpointModel())
