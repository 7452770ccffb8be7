"""The code locations: every asset, check, job, sensor and resource of a task.

`defs` serves the task the settings name (FLYWHEEL_TASK, else the default task); an attribute
named like a task (a file `pipelines/tasks/<name>.yaml`) serves that task, so `workspace.yaml`
lists one code location per task, loaded, deployed and failing separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import dagster as dg

from pipelines.defs.datasets.assets import build_dataset_assets
from pipelines.defs.evaluation.assets import build_evaluation_assets
from pipelines.defs.ingestion.assets import build_ingestion_assets
from pipelines.defs.ingestion.sensors import build_landing_sensor
from pipelines.defs.monitoring.assets import build_monitoring_assets
from pipelines.defs.monitoring.triggers import build_monitoring_triggers
from pipelines.defs.runs.retries import retry_outages
from pipelines.defs.runs.sensors import build_missed_retry_sensor
from pipelines.defs.scoring.assets import build_scoring_assets
from pipelines.defs.training.assets import GPU_TAGS, build_training_assets
from pipelines.defs.warehouse.assets import build_dbt_assets
from pipelines.labeling.assets import build_labeling_assets
from pipelines.labeling.triggers import build_labeling_triggers
from pipelines.lib.asset_keys import task_run_config
from pipelines.lib.partitions import landing_partitions
from pipelines.lib.runs import (
    MAX_RUNTIME_S,
    MAX_RUNTIME_TAG,
    RETRAINING_JOB,
    RETRAINING_MAX_RUNTIME_S,
    TASK_TAG,
)
from pipelines.lib.wiring import check_wiring
from pipelines.resources import build_resources, retraining_executor
from pipelines.settings import current_env, retraining_run_config, sensor_interval_s
from pipelines.task import load_task, task_name, task_names
from pipelines.thresholds import Trigger


def build_definitions(
    env: str | None = None,
    task_name: str | None = None,
    resources: Mapping[str, dg.ConfigurableResource] | None = None,
) -> dg.Definitions:
    """Build the definitions of `task_name` (default `pipelines.task.task_name()`) for `env`,
    with `resources` in place of the environment's own where given."""
    task = load_task(task_name)
    check_wiring(task)  # a model, tag or workspace entry missing: each named with its fix
    env = env or current_env()
    interval_s = sensor_interval_s()
    # Several tasks' code locations share one instance: each run says whose it is.
    tags = {TASK_TAG: task.name, MAX_RUNTIME_TAG: str(MAX_RUNTIME_S)}
    ingestion = {a.key.path[-1]: a for a in build_ingestion_assets(task)}
    daily_raw = [ingestion[f.asset_name] for f in task.daily_feeds]
    dimension_raw = [ingestion[f.asset_name] for f in task.dimension_feeds]
    daily_dbt, dimension_dbt, training_dbt = build_dbt_assets(task)
    (predictions,) = build_scoring_assets(task)
    feature_drift, model_performance, excess_loss = build_monitoring_assets(task)

    daily_job = dg.define_asset_job(
        "daily_warehouse_job",
        selection=dg.AssetSelection.assets(*daily_raw, daily_dbt, predictions, feature_drift),
        partitions_def=landing_partitions(task),
        tags=tags,
        description="Ingest landing days, build their models, score their examples, check drift.",
    )
    dimension_job = dg.define_asset_job(
        "dimension_warehouse_job",
        selection=dg.AssetSelection.assets(*dimension_raw, dimension_dbt),
        tags=tags,
        description="Ingest the dimension tables and build the models over them.",
    )
    landing_sensor = build_landing_sensor(
        task,
        daily_job,
        dimension_job,
        daily_downstream=[*daily_dbt.keys, predictions.key, feature_drift.key],
        dimension_downstream=list(dimension_dbt.keys),
        interval_s=interval_s,
    )
    label_tasks, labels = build_labeling_assets(task)
    datasets = build_dataset_assets(task)
    label_export_job = dg.define_asset_job(
        "label_export_job",
        selection=dg.AssetSelection.assets(label_tasks),
        partitions_def=landing_partitions(task),
        tags=tags,
        description="Choose a landing day's examples to label and publish them to annotators.",
    )
    label_import_job = dg.define_asset_job(
        "label_import_job",
        selection=dg.AssetSelection.assets(labels, model_performance, excess_loss),
        partitions_def=landing_partitions(task),
        tags=tags,
        description="Import the labels delivered on a day; measure the champion's performance "
        "and its excess loss.",
    )
    export_sensor, inbox_sensor = build_labeling_triggers(
        label_export_job, label_import_job, feature_drift.key, label_tasks.key, interval_s
    )
    training = build_training_assets(task.name, task.model.features)
    evaluation = build_evaluation_assets(task)
    step_pods = retraining_executor(env)
    retraining_job = dg.define_asset_job(
        RETRAINING_JOB,
        selection=dg.AssetSelection.assets(training_dbt, *datasets, *training, *evaluation),
        # A run queue that limits `flywheel/gpu` (deploy/dagster.stack.yaml) runs one at a time.
        # Where the steps run in the run's process, the run's tags ask a Kubernetes run launcher
        # for a GPU pod; where each step has a pod, the training step's own tags do.
        tags={
            **tags,
            **({} if step_pods else GPU_TAGS),
            "flywheel/gpu": "1",
            MAX_RUNTIME_TAG: str(RETRAINING_MAX_RUNTIME_S),
        },
        executor_def=step_pods,
        description="Cut a dataset from the newest labels, train a challenger, evaluate it and "
        "promote it if it passes the gate.",
        # The deployment's budget and windows (pipelines/settings.py), shown in each run's config.
        config=task_run_config(task, retraining_run_config()),
    )
    champion_model = evaluation[-1]
    alarm_sensors, retraining_schedule = build_monitoring_triggers(
        retraining_job,
        task.monitoring,
        labels.key,
        champion_model.key,
        {
            Trigger.EXCESS_LOSS: excess_loss.key,
            Trigger.DRIFT: feature_drift.key,
            Trigger.PERFORMANCE: model_performance.key,
        },
        interval_s,
        task.cadence,
    )
    dataset_job = dg.define_asset_job(
        "dataset_job",
        selection=dg.AssetSelection.assets(training_dbt, *datasets),
        tags=tags,
        description="Rebuild the labelled-examples mart and cut a new versioned dataset.",
    )
    jobs = [daily_job, dimension_job, label_export_job, label_import_job]
    jobs += [dataset_job, retraining_job]
    return dg.Definitions(
        # Every step rides out an outage of its services (pipelines/defs/runs/retries.py).
        assets=[
            retry_outages(assets)
            for assets in (
                *ingestion.values(),
                daily_dbt,
                dimension_dbt,
                training_dbt,
                label_tasks,
                labels,
                *datasets,
                *training,
                predictions,
                feature_drift,
                model_performance,
                excess_loss,
                *evaluation,
            )
        ],
        jobs=jobs,
        schedules=[retraining_schedule],
        sensors=[
            landing_sensor,
            export_sensor,
            inbox_sensor,
            *alarm_sensors,
            build_missed_retry_sensor(task.name, jobs),
        ],
        resources={**build_resources(env, task.name), **(resources or {})},
        # A run's steps run in the run's own process (a pod on Kubernetes), one after the other:
        # the warehouse pool runs them one at a time anyway, and a process per step would load
        # the code location again before each, seconds of imports for steps that take less.
        executor=dg.in_process_executor,
    )


@cache
def _definitions_of(name: str) -> dg.Definitions:
    return build_definitions(task_name=name)


def __getattr__(name: str) -> dg.Definitions:
    """`defs`, or the definitions of the task `name` (built once, when first asked for)."""
    if name == "defs":
        return _definitions_of(task_name())
    if name in task_names():
        return _definitions_of(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r} (nor task {name!r})")
