"""A tuning worker pod's entry point (`python -m pipelines.tuning_pod`): fetch the dataset
version named in `FLYWHEEL_TUNING_SPEC` by its DVC hash, build the datamodule the training step
built, and run the study's queued trials (pipelines/lib/tuning_workers.py starts the pods)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ml.tuning import run_worker
from pipelines.lib.tuning_workers import (
    INDEX_VARIABLE,
    SPEC_VARIABLE,
    DatasetRef,
    datamodule_for,
)
from pipelines.resources import dataset_store
from pipelines.settings import OPTUNA_STORAGE, Setting
from pipelines.task import load_task


def pod_main(environ: Mapping[str, str] | None = None) -> None:
    """A worker pod: fetch the dataset by its hash, build the datamodule, run queued trials."""
    payload: dict[str, Any] = json.loads(Setting(SPEC_VARIABLE).value(environ))
    dataset = DatasetRef(**payload["dataset"])
    folder = dataset_store().fetch(dataset.dvc_hash)
    features = load_task(dataset.task).model.features
    datamodule = datamodule_for(folder, features, dataset.seed, dataset.min_steps_per_epoch)
    # The spec leaves the storage out: its URL holds a password, the pod's Secret gives it.
    study = payload["study"]
    study["tune"]["storage"] = OPTUNA_STORAGE.required(environ)
    run_worker(study, datamodule, int(Setting(INDEX_VARIABLE).value(environ)))


if __name__ == "__main__":
    pod_main()
