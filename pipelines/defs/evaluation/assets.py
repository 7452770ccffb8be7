"""Evaluation of the challenger against the champion and baselines, and the promotion gate."""

import json

import dagster as dg
import pandas as pd

from ml.promotion import GateInputs, decide, gate_inputs_of
from pipelines.defs.evaluation.challenger_evaluation import evaluate_challenger
from pipelines.defs.evaluation.publishing import evaluation_metadata, log_evaluation
from pipelines.defs.training.assets import latest_dataset
from pipelines.lib.asset_keys import task_key, task_prefix
from pipelines.lib.datasets import DvcDatasetStore
from pipelines.lib.registry import champion, model_version, record_decision, registered_name
from pipelines.lib.tracking import MlflowTracker
from pipelines.lib.warehouse import WAREHOUSE_POOL, Warehouse
from pipelines.task import Task

GROUP = "evaluation"


def latest_metadata(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, object]:
    """The metadata values of an asset's latest materialization; a Failure if there is none."""
    event = instance.get_latest_materialization_event(key)
    if event is None or event.asset_materialization is None:
        raise dg.Failure(f"{key.to_user_string()} was never materialized: materialize it first")
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def build_evaluation_assets(task: Task) -> list[dg.AssetsDefinition]:
    """`model_evaluation` and `champion_model` for `task`."""
    spec, promotion = task.model, task.promotion
    name = registered_name(task.name)
    challenger_key, evaluation_key = (
        task_key(task, "challenger_model"),
        task_key(task, "model_evaluation"),
    )

    @dg.asset(
        key_prefix=task_prefix(task),
        group_name=GROUP,
        deps=[challenger_key],
        pool=WAREHOUSE_POOL,
        kinds={"mlflow"},
    )
    def model_evaluation(
        context: dg.AssetExecutionContext,
        warehouse: Warehouse,
        tracker: MlflowTracker,
        dataset_store: DvcDatasetStore,
    ) -> dg.MaterializeResult:
        """Challenger vs champion vs baselines on the newest labelled days: metrics, slices,
        paired bootstrap intervals and plots; stores the challenger's training profile."""
        version = int(latest_metadata(context.instance, challenger_key)["registered_model_version"])
        challenger = model_version(tracker, name, version)
        current = champion(tracker, name)
        dataset = latest_dataset(context.instance, dataset_store, task.name)
        result = evaluate_challenger(
            tracker, warehouse, spec, dataset, challenger, current, promotion, seed=0
        )
        log_evaluation(tracker, challenger, result)
        inputs = gate_inputs_of(result.evaluation, promotion.gate.metric)
        return dg.MaterializeResult(
            metadata={
                **evaluation_metadata(result, promotion),
                "challenger_version": challenger.version,
                "champion_version": current.version if current else "none",
                "dataset_dvc_hash": dataset.dvc_hash,
                "gate_inputs": dg.MetadataValue.json(inputs),
            }
        )

    @dg.asset(
        key_prefix=task_prefix(task), group_name=GROUP, deps=[evaluation_key], kinds={"mlflow"}
    )
    def champion_model(
        context: dg.AssetExecutionContext, tracker: MlflowTracker
    ) -> dg.MaterializeResult:
        """Move the champion alias to the challenger if the gate passes; record why either way."""
        evaluation = latest_metadata(context.instance, evaluation_key)
        version = int(evaluation["challenger_version"])
        decision = decide(gate_inputs_from_metadata(evaluation["gate_inputs"]), promotion.gate)
        verdict = "promoted" if decision.promote else "rejected"
        previous = record_decision(
            tracker, name, version, verdict, decision.reason, decision.promote
        )
        current = champion(tracker, name)
        checks = pd.DataFrame(decision.checks, columns=["check", "passed", "detail"])
        context.log.info(f"version {version} {verdict}: {decision.reason}")
        return dg.MaterializeResult(
            metadata={
                "decision": verdict,
                "reason": decision.reason,
                "challenger_version": version,
                "champion_version": current.version if current else "none",
                "previous_champion": previous.version if previous else "none",
                "checks": dg.MetadataValue.md(checks.to_markdown(index=False)),
            },
            data_version=dg.DataVersion(f"{name}/{current.version}" if current else "none"),
        )

    return [model_evaluation, champion_model]


def gate_inputs_from_metadata(raw: object) -> GateInputs:
    """The gate's inputs as `model_evaluation` stored them (JSON), intervals back as tuples."""
    inputs = dict(json.loads(raw) if isinstance(raw, str) else raw)
    if inputs.get("improvement_ci") is not None:
        inputs["improvement_ci"] = tuple(inputs["improvement_ci"])
    return GateInputs(**inputs)
