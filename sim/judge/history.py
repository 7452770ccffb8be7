"""What the loop did, as the report tells it: each retraining run (its trigger, dataset and the
gate's decision, from the Dagster instance) and the labels spent per selection reason."""

from __future__ import annotations

from typing import Any

import dagster as dg
import numpy as np
import pandas as pd

from pipelines.lib.asset_keys import task_key
from pipelines.lib.runs import RETRAINING_JOB, task_runs
from pipelines.task.thresholds import ALARMS
from sim.judge.examples import Judged


def resource(defs: dg.Definitions, key: str) -> Any:
    """The code location's resource `key` as a run would see it: its settings read from the
    environment (a prod resource names them with `dg.EnvVar`)."""
    value = defs.resources[key]
    if isinstance(value, dg.ConfigurableResource):
        return value.process_config_and_initialize()
    return value


def _by_run(
    instance: dg.DagsterInstance, task_name: str, asset: str
) -> dict[str, dict[str, object]]:
    records = instance.fetch_materializations(task_key(task_name, asset), limit=10_000).records
    return {
        r.run_id: {k: v.value for k, v in r.asset_materialization.metadata.items()}
        for r in records
        if r.asset_materialization is not None
    }


def retrainings(instance: dg.DagsterInstance, task_name: str) -> pd.DataFrame:
    """Each retraining run of `task_name`: what triggered it, on which data, and what the gate
    decided."""
    datasets, challengers = (
        _by_run(instance, task_name, "training_dataset"),
        _by_run(instance, task_name, "challenger_model"),
    )
    decisions = _by_run(instance, task_name, "champion_model")
    rows = []
    records = instance.get_run_records(task_runs(task_name, RETRAINING_JOB), ascending=True)
    for record in records:
        run = record.dagster_run
        dataset, challenger = datasets.get(run.run_id, {}), challengers.get(run.run_id, {})
        decision = decisions.get(run.run_id, {})
        seconds = (record.end_time or 0) - (record.start_time or 0)
        rows.append(
            {
                "event_day": run.tags.get("flywheel/event_day", ""),
                "trigger": run.tags.get("flywheel/trigger", ""),
                "status": run.status.value,
                "seconds": round(seconds),
                "dataset": str(dataset.get("dvc_hash", ""))[:12],
                "examples": dataset.get("dagster/row_count", ""),
                "version": challenger.get("registered_model_version", ""),
                "val_auroc": challenger.get("val/auroc", np.nan),
                "decision": decision.get("decision", ""),
                "reason": decision.get("reason", ""),
            }
        )
    return pd.DataFrame(rows)


def trainings(instance: dg.DagsterInstance, task_name: str) -> pd.DataFrame:
    """Each challenger trained or reused by `task_name`'s retraining runs: its event day and
    version, whether a shared model cache held it (`model_cache`: hit, stored or off) and the
    seconds its training took in the run that trained it (`training_s`), so a reused model
    counts what it cost once."""
    challengers = _by_run(instance, task_name, "challenger_model")
    rows = []
    records = instance.get_run_records(task_runs(task_name, RETRAINING_JOB), ascending=True)
    for record in records:
        challenger = challengers.get(record.dagster_run.run_id)
        if challenger is None:
            continue
        rows.append(
            {
                "event_day": record.dagster_run.tags.get("flywheel/event_day", ""),
                "version": challenger.get("registered_model_version", ""),
                "model_cache": challenger.get("model_cache", "off"),
                "training_s": challenger.get("training_seconds", np.nan),
            }
        )
    return pd.DataFrame(rows, columns=["event_day", "version", "model_cache", "training_s"])


def failed_checks(instance: dg.DagsterInstance, task_name: str) -> pd.DataFrame:
    """Every day an asset check of `task_name`'s runs failed on: the day (the check's
    `failed_days`, else its `landing_date`), the asset and check, and when the evaluation was
    recorded (`at`, seconds since the epoch). A day a check failed twice (a run retried) is
    named once, at its first failure."""
    rows = []
    for record in instance.get_run_records(task_runs(task_name), ascending=True):
        for entry in instance.all_logs(
            record.dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
        ):
            evaluation = entry.dagster_event.event_specific_data
            if evaluation.passed:
                continue
            metadata = {k: v.value for k, v in evaluation.metadata.items()}
            days = list(metadata.get("failed_days") or {}) or [metadata.get("landing_date")]
            for day in days:
                if day:
                    rows.append(
                        {
                            "day": str(day),
                            "asset": evaluation.asset_key.to_user_string(),
                            "check": evaluation.check_name,
                            "at": entry.timestamp,
                        }
                    )
    columns = ["day", "asset", "check", "at"]
    frame = pd.DataFrame(rows, columns=columns).sort_values("at", kind="stable")
    return frame.drop_duplicates(["day", "asset", "check"]).reset_index(drop=True)


def label_spend(defs: dg.Definitions, judged: Judged) -> pd.DataFrame:
    """Label tasks exported per selection reason, and how many came back labelled."""
    task, example_id = judged.task, judged.spec.example_id
    return resource(defs, "warehouse").query(
        f"select t.reason, count(*) as exported, count(l.{example_id}) as labelled "
        f"from raw.{task.label_tasks_table} t left join raw.{task.labels_table} l "
        "using (task_id) group by t.reason order by exported desc"
    )


def retraining_events(runs: pd.DataFrame) -> pd.DataFrame:
    """The report plot's marks: each retraining an alarm asked for (on its event day) and each
    promotion (on the event day of the retraining that promoted)."""
    if runs.empty:
        return pd.DataFrame(columns=["day", "kind"])
    alarms_ = runs[runs.trigger.isin([str(t) for t in ALARMS])]
    promoted = runs[runs.decision == "promoted"]
    return pd.concat(
        [
            pd.DataFrame({"day": alarms_.event_day, "kind": "alarm"}),
            pd.DataFrame({"day": promoted.event_day, "kind": "promotion"}),
        ],
        ignore_index=True,
    ).query("day != ''")
