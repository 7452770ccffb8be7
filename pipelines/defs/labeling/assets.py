"""Labeling assets: export a day's chosen examples to annotators, import the labels returned."""

import dagster as dg

from pipelines.ingestion import ensure_raw_tables
from pipelines.labeling.export_import import export_day, import_day
from pipelines.lib.asset_keys import task_key, task_prefix
from pipelines.lib.label_exchange import LabelExchange
from pipelines.lib.partitions import landing_partitions
from pipelines.lib.warehouse import WAREHOUSE_POOL, Warehouse
from pipelines.task import Task

GROUP = "labeling"


class LabelSelectionConfig(dg.Config):
    """How many of a day's examples go to labeling, and what share of them is a random audit."""

    # Examples per partition; unset, the task's own budget (`labels.budget` in its YAML).
    budget: int | None = None
    # The audit share is the unbiased sample evaluation, performance monitoring, the excess-loss
    # alarm and recalibration rely on. The whole budget by default: replayed over April to
    # December with ten seeds, no targeted choice (the least sure, the margin of the calibrated
    # score, members' disagreement, p(1-p) sampling) beat uniform labels (docs/benchmarks.md).
    audit_share: float = 1.0
    # Another seed draws other audit and random samples of the same days (a policy comparison's
    # seeds); 0 draws the samples of every play so far.
    seed: int = 0


def build_labeling_assets(task: Task) -> list[dg.AssetsDefinition]:
    """The label-task export (by landing day) and the label import (by delivery day)."""
    spec, labeling = task.model, task.labeling

    @dg.asset(
        name=task.label_tasks_table,
        key_prefix=task_prefix(task),
        group_name=GROUP,
        partitions_def=landing_partitions(task),
        deps=[task_key(task, spec.features_table)],
        pool=WAREHOUSE_POOL,
        kinds={"sql", "json"},
    )
    def label_tasks(
        context: dg.AssetExecutionContext,
        config: LabelSelectionConfig,
        warehouse: Warehouse,
        label_exchange: LabelExchange,
    ) -> dg.MaterializeResult:
        """Choose the day's examples to label and publish them as a Label Studio batch."""
        with warehouse.connect() as con:
            ensure_raw_tables(con, task)
            report = export_day(
                con,
                label_exchange,
                task,
                spec,
                labeling,
                context.partition_key,
                config.budget,
                config.audit_share,
                config.seed,
            )
        if report.candidates and report.budget > report.candidates / 2:
            context.log.warning(
                f"the label budget, {report.budget} examples, is more than half of the "
                f"{report.candidates} of {context.partition_key}: a label choice and the "
                "same-budget reference say little when most examples are labelled; set a "
                f"smaller labels.budget in {task.path.name}"
            )
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": sum(report.reasons.values()),
                "batch_id": report.batch_id,
                "published_to": report.where,
                "candidates": report.candidates,
                "budget": report.budget,
                "scored_candidates": report.scored,
                "drift_flagged_segments": report.flagged_segments,
                "reasons": report.reasons,
            }
        )

    @dg.asset(
        name=task.labels_table,
        key_prefix=task_prefix(task),
        group_name=GROUP,
        partitions_def=landing_partitions(task),
        # No edge from label_tasks: the import only looks exported tasks up to validate answers.
        # Labels feed the features that choose later tasks, a loop in time that the asset graph
        # cannot draw; the labels themselves come from the inbox.
        pool=WAREHOUSE_POOL,
        kinds={"sql", "json"},
    )
    def labels(
        context: dg.AssetExecutionContext, warehouse: Warehouse, label_exchange: LabelExchange
    ) -> dg.MaterializeResult:
        """Import the day's delivered labels: validated, first answer wins, bad ones quarantined."""
        with warehouse.connect() as con:
            ensure_raw_tables(con, task)
            report = import_day(con, label_exchange, task, labeling, context.partition_key)
        if report.rejected:
            context.log.warning(f"{report.rejected} label items quarantined: {report.reasons}")
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": report.accepted,
                "files": report.files,
                "items_quarantined": report.rejected,
                "quarantine_reasons": report.reasons,
            }
        )

    return [label_tasks, labels]
