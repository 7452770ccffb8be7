"""A task's asset graph by role, and the jobs, sensors and schedule that run it.

`build_definitions` (pipelines/definitions.py) is these three calls and the resources: each asset
group builds its own assets (`pipelines/defs/<group>/`); here they are named by the part they play,
each job selects the assets of its part of the loop, and each sensor watches the assets it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import dagster as dg

from pipelines.defs.datasets.assets import build_dataset_assets
from pipelines.defs.evaluation.assets import build_evaluation_assets
from pipelines.defs.ingestion.assets import build_ingestion_assets
from pipelines.defs.ingestion.sensors import build_landing_sensor
from pipelines.defs.labeling.assets import build_labeling_assets
from pipelines.defs.labeling.triggers import build_labeling_triggers
from pipelines.defs.monitoring.assets import build_monitoring_assets
from pipelines.defs.monitoring.triggers import build_monitoring_triggers
from pipelines.defs.runs.sensors import build_missed_retry_sensor
from pipelines.defs.scoring.assets import build_scoring_assets
from pipelines.defs.training.assets import GPU_TAGS, build_training_assets
from pipelines.defs.warehouse.assets import build_dbt_assets
from pipelines.lib.asset_keys import task_run_config
from pipelines.lib.partitions import landing_partitions
from pipelines.lib.runs import (
    MAX_RUNTIME_S,
    MAX_RUNTIME_TAG,
    RETRAINING_JOB,
    RETRAINING_MAX_RUNTIME_S,
    TASK_TAG,
)
from pipelines.settings import retraining_run_config
from pipelines.task import Task
from pipelines.task.thresholds import Trigger

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition as AssetJob,
    )

Assets = dg.AssetsDefinition


@dataclass(frozen=True)
class AssetGraph:
    """Every asset of a task, by the part it plays in the loop."""

    raw: list[Assets]  # every feed's, in the task's order
    daily_raw: list[Assets]
    dimension_raw: list[Assets]
    daily_dbt: Assets
    dimension_dbt: Assets
    training_dbt: Assets
    predictions: Assets
    feature_drift: Assets
    model_performance: Assets
    excess_loss: Assets
    label_tasks: Assets
    labels: Assets
    datasets: list[Assets]
    training: list[Assets]
    evaluation: list[Assets]  # the champion's asset last

    @property
    def all(self) -> list[Assets]:
        return [
            *self.raw,
            self.daily_dbt,
            self.dimension_dbt,
            self.training_dbt,
            self.label_tasks,
            self.labels,
            *self.datasets,
            *self.training,
            self.predictions,
            self.feature_drift,
            self.model_performance,
            self.excess_loss,
            *self.evaluation,
        ]


def build_asset_graph(task: Task) -> AssetGraph:
    """Each group's assets for `task`."""
    ingestion = {a.key.path[-1]: a for a in build_ingestion_assets(task)}
    daily_dbt, dimension_dbt, training_dbt = build_dbt_assets(task)
    (predictions,) = build_scoring_assets(task)
    feature_drift, model_performance, excess_loss = build_monitoring_assets(task)
    label_tasks, labels = build_labeling_assets(task)
    return AssetGraph(
        raw=list(ingestion.values()),
        daily_raw=[ingestion[f.asset_name] for f in task.daily_feeds],
        dimension_raw=[ingestion[f.asset_name] for f in task.dimension_feeds],
        daily_dbt=daily_dbt,
        dimension_dbt=dimension_dbt,
        training_dbt=training_dbt,
        predictions=predictions,
        feature_drift=feature_drift,
        model_performance=model_performance,
        excess_loss=excess_loss,
        label_tasks=label_tasks,
        labels=labels,
        datasets=build_dataset_assets(task),
        training=build_training_assets(task.name, task.model.features, task.model.time_column),
        evaluation=build_evaluation_assets(task),
    )


@dataclass(frozen=True)
class Jobs:
    """A task's jobs: each part of the loop, a job."""

    daily: AssetJob
    dimension: AssetJob
    label_export: AssetJob
    label_import: AssetJob
    dataset: AssetJob
    retraining: AssetJob

    @property
    def all(self) -> list[AssetJob]:
        return [
            self.daily,
            self.dimension,
            self.label_export,
            self.label_import,
            self.dataset,
            self.retraining,
        ]


def build_jobs(task: Task, graph: AssetGraph, step_pods: dg.ExecutorDefinition | None) -> Jobs:
    """The jobs of `graph`; the retraining's steps on `step_pods` where each step has a pod."""
    # Several tasks' code locations share one instance: each run says whose it is.
    tags = {TASK_TAG: task.name, MAX_RUNTIME_TAG: str(MAX_RUNTIME_S)}
    partitions = landing_partitions(task)

    def job(name: str, assets: list[Assets], description: str, **more) -> AssetJob:
        selection = dg.AssetSelection.assets(*assets)
        more = {"tags": tags, **more}
        return dg.define_asset_job(name, selection, description=description, **more)

    g = graph
    return Jobs(
        daily=job(
            "daily_warehouse_job",
            [*g.daily_raw, g.daily_dbt, g.predictions, g.feature_drift],
            "Ingest landing days, build their models, score their examples, check drift.",
            partitions_def=partitions,
        ),
        dimension=job(
            "dimension_warehouse_job",
            [*g.dimension_raw, g.dimension_dbt],
            "Ingest the dimension tables and build the models over them.",
        ),
        label_export=job(
            "label_export_job",
            [g.label_tasks],
            "Choose a landing day's examples to label and publish them to annotators.",
            partitions_def=partitions,
        ),
        label_import=job(
            "label_import_job",
            [g.labels, g.model_performance, g.excess_loss],
            "Import the labels delivered on a day; measure the champion's performance and its "
            "excess loss.",
            partitions_def=partitions,
        ),
        dataset=job(
            "dataset_job",
            [g.training_dbt, *g.datasets],
            "Rebuild the labelled-examples mart and cut a new versioned dataset.",
        ),
        retraining=job(
            RETRAINING_JOB,
            [g.training_dbt, *g.datasets, *g.training, *g.evaluation],
            "Cut a dataset from the newest labels, train a challenger, evaluate it and promote "
            "it if it passes the gate.",
            # A run queue that limits `flywheel/gpu` (deploy/dagster.stack.yaml) runs one at a
            # time. Where the steps run in the run's process, the run's tags ask a Kubernetes run
            # launcher for a GPU pod; where each step has a pod, the training step's own tags do.
            tags={
                **tags,
                **({} if step_pods else GPU_TAGS),
                "flywheel/gpu": "1",
                MAX_RUNTIME_TAG: str(RETRAINING_MAX_RUNTIME_S),
            },
            executor_def=step_pods,
            # The deployment's budget and windows (pipelines/settings.py), in each run's config.
            config=task_run_config(task, retraining_run_config()),
        ),
    )


def build_automation(
    task: Task, graph: AssetGraph, jobs: Jobs, interval_s: int
) -> tuple[list[dg.SensorDefinition], list[dg.ScheduleDefinition]]:
    """The sensors that start each job when what it reads changes, and the retraining
    schedule."""
    g = graph
    landing = build_landing_sensor(
        task,
        jobs.daily,
        jobs.dimension,
        daily_downstream=[*g.daily_dbt.keys, g.predictions.key, g.feature_drift.key],
        dimension_downstream=list(g.dimension_dbt.keys),
        interval_s=interval_s,
    )
    export, inbox = build_labeling_triggers(
        jobs.label_export, jobs.label_import, g.feature_drift.key, g.label_tasks.key, interval_s
    )
    alarms, schedule = build_monitoring_triggers(
        jobs.retraining,
        task.monitoring,
        g.labels.key,
        g.evaluation[-1].key,
        {
            Trigger.EXCESS_LOSS: g.excess_loss.key,
            Trigger.DRIFT: g.feature_drift.key,
            Trigger.PERFORMANCE: g.model_performance.key,
        },
        interval_s,
        task.cadence,
    )
    missed = build_missed_retry_sensor(task.name, jobs.all)
    return [landing, export, inbox, *alarms, missed], [schedule]
