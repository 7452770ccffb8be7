"""The code location: every asset, check, job, sensor and resource of the flywheel."""

from __future__ import annotations

import os

import dagster as dg

from pipelines.contracts import load_task
from pipelines.defs.datasets.assets import build_dataset_assets
from pipelines.defs.ingestion.assets import build_ingestion_assets
from pipelines.defs.ingestion.sensors import build_landing_sensor
from pipelines.defs.labeling.assets import build_labeling_assets
from pipelines.defs.labeling.triggers import build_labeling_triggers
from pipelines.defs.training.assets import GPU_TAGS, build_training_assets
from pipelines.defs.warehouse.assets import build_dbt_assets
from pipelines.lib.partitions import daily_partitions
from pipelines.resources import build_resources


def build_definitions(env: str | None = None, task_name: str | None = None) -> dg.Definitions:
    """Build the definitions of `task_name` (FLYWHEEL_TASK, default flights) for `env`."""
    task = load_task(task_name or os.environ.get("FLYWHEEL_TASK", "flights"))
    ingestion = {a.key.path[-1]: a for a in build_ingestion_assets(task)}
    daily_raw = [ingestion[f.asset_name] for f in task.daily_feeds]
    reference_raw = [ingestion[f.asset_name] for f in task.reference_feeds]
    daily_dbt, reference_dbt, training_dbt = build_dbt_assets(task)

    daily_job = dg.define_asset_job(
        "daily_warehouse_job",
        selection=dg.AssetSelection.assets(*daily_raw, daily_dbt),
        partitions_def=daily_partitions(task),
        description="Ingest landing days and build their warehouse models.",
    )
    reference_job = dg.define_asset_job(
        "reference_warehouse_job",
        selection=dg.AssetSelection.assets(*reference_raw, reference_dbt),
        description="Ingest reference data and build the models over it.",
    )
    landing_sensor = build_landing_sensor(
        task,
        daily_job,
        reference_job,
        daily_downstream=list(daily_dbt.keys),
        reference_downstream=list(reference_dbt.keys),
    )
    label_tasks, labels = build_labeling_assets(task)
    datasets = build_dataset_assets(task)
    label_export_job = dg.define_asset_job(
        "label_export_job",
        selection=dg.AssetSelection.assets(label_tasks),
        partitions_def=daily_partitions(task),
        description="Choose a landing day's flights to label and export them to the outbox.",
    )
    label_import_job = dg.define_asset_job(
        "label_import_job",
        selection=dg.AssetSelection.assets(labels),
        partitions_def=daily_partitions(task),
        description="Import the labels delivered to the inbox on a day.",
    )
    export_schedule, inbox_sensor = build_labeling_triggers(label_export_job, label_import_job)
    training = build_training_assets(task.name)
    training_job = dg.define_asset_job(
        "training_job",
        selection=dg.AssetSelection.assets(*training),
        # The run's tags ask a Kubernetes run launcher for a GPU pod.
        tags=GPU_TAGS,
        description="Tune, refit and register a challenger model on the latest dataset.",
    )
    dataset_job = dg.define_asset_job(
        "dataset_job",
        selection=dg.AssetSelection.assets(training_dbt, *datasets),
        description="Rebuild the labelled-examples mart and cut a new versioned dataset.",
    )
    return dg.Definitions(
        assets=[
            *ingestion.values(),
            daily_dbt,
            reference_dbt,
            training_dbt,
            label_tasks,
            labels,
            *datasets,
            *training,
        ],
        jobs=[
            daily_job,
            reference_job,
            label_export_job,
            label_import_job,
            dataset_job,
            training_job,
        ],
        schedules=[export_schedule],
        sensors=[landing_sensor, inbox_sensor],
        resources=build_resources(env),
    )


defs = build_definitions()
