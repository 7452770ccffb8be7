"""Print, as JSON, what the stack's stores hold, each read back: every object of its bucket (with
its ETag), every dataset version of the training dataset's materializations fetched from the DVC
remote (its files and their sizes), and every registered model version loaded from MLflow.

Run as `python -m tests.deploy.store_inventory <scratch folder>` with the stack's settings, so a
test can compare the stores before and after a crash.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import dagster as dg

from pipelines.lib.registry import load_model, registered_name, versions
from pipelines.lib.tracking import tracker_resource
from pipelines.resources import dataset_store, per_task
from pipelines.settings import current_env, flywheel_home
from pipelines.task import load_task


def objects() -> dict[str, str]:
    """Every object of the stack's bucket: its key and ETag."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["FLYWHEEL_S3_ENDPOINT_URL"])
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=os.environ["FLYWHEEL_LANDING_BUCKET"]
    ):
        found.update({item["Key"]: item["ETag"] for item in page.get("Contents", [])})
    return found


def datasets(instance: dg.DagsterInstance) -> dict[str, dict[str, int]]:
    """Each training dataset version, fetched from the remote into an empty cache: its files."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey([load_task().name, "training_dataset"])),
        limit=1000,
    ).records
    store = dataset_store()
    fetched = {}
    for record in records:
        dvc_hash = str(record.asset_materialization.metadata["dvc_hash"].value)
        folder = store.fetch(dvc_hash)
        fetched[dvc_hash] = {p.name: p.stat().st_size for p in sorted(folder.iterdir())}
    return fetched


def models() -> dict[int, str]:
    """Each registered version, loaded: its version and the class of the loaded model."""
    resource = tracker_resource(current_env(), flywheel_home(), per_task())
    with resource.process_config_and_initialize_cm() as tracker:
        return {
            version.version: type(load_model(tracker, version).unwrap_python_model()).__name__
            for version in versions(tracker, registered_name(load_task().name))
        }


if __name__ == "__main__":
    os.environ["FLYWHEEL_DATASET_CACHE"] = str(Path(sys.argv[1]) / "fetched")
    with dg.DagsterInstance.get() as instance:
        print(
            json.dumps({"objects": objects(), "datasets": datasets(instance), "models": models()})
        )
