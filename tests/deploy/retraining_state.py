"""What a retraining fault's play left in the stack's stores: the retrainings' MLflow runs and
registered versions, the Dagster runs and challengers, the Optuna trials; read after the play
(tests/deploy/test_stack_retraining_faults.py), and the trials also while it plays."""

from __future__ import annotations

from collections import Counter


def parent_run(client, run_id: str):
    """The MLflow run of the challenger trained by Dagster run `run_id` (not its trials')."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    found = client.search_runs(experiments, f"tags.`dagster.run_id` = '{run_id}'")
    parents = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    return parents[0] if parents else None


def mlflow_state(env: dict[str, str]) -> dict:
    """The retrainings' MLflow runs (not their trials') with their status and Dagster run, and
    the registered versions with their training runs."""
    from mlflow import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = [
        {
            "id": r.info.run_id,
            "status": r.info.status,
            "dagster_run": r.data.tags.get("dagster.run_id"),
        }
        for r in client.search_runs(experiments, "tags.`dagster.run_id` != ''", max_results=1000)
        if "mlflow.parentRunId" not in r.data.tags
    ]
    versions = {
        v.version: v.run_id for v in client.search_model_versions("name = 'flywheel-flights'")
    }
    return {"runs": runs, "versions": versions}


def dagster_state() -> dict:
    """Every run's job, status, retry tags; and the challengers' materializations."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        records = instance.get_run_records(dg.RunsFilter(), ascending=True)
        runs = [
            {
                "id": r.dagster_run.run_id,
                "job": r.dagster_run.job_name,
                "status": r.dagster_run.status.value,
                "parent": r.dagster_run.tags.get("dagster/parent_run_id"),
            }
            for r in records
        ]
        challengers = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["flights", "challenger_model"])),
            limit=100,
            ascending=True,
        ).records
        recorded = [
            {
                k: str(c.asset_materialization.metadata[k].value)
                for k in ("registered_model_version", "mlflow_run_id")
            }
            for c in challengers
        ]
    return {"runs": runs, "challengers": recorded}


def study_storage(env: dict[str, str]):
    """An engine on the stack's Optuna study storage (its tables made by the first study)."""
    import sqlalchemy as sa

    return sa.create_engine(env["FLYWHEEL_OPTUNA_STORAGE"])


def trials(storage, states: tuple[str, ...] = ()) -> list[tuple[str, int, str]]:
    """Every trial of every study in `storage` (those in `states` only, if given): its study's
    name, its number and its state, read from Optuna's tables (none before they are made)."""
    import sqlalchemy as sa

    if not sa.inspect(storage).has_table("trials"):
        return []
    with storage.connect() as connection:
        rows = connection.execute(
            sa.text(
                "select s.study_name, t.number, cast(t.state as text) from trials t"
                " join studies s on s.study_id = t.study_id order by 1, 2"
            )
        ).all()
    return [(name, number, state) for name, number, state in rows if state in (states or [state])]


def tuning_state(env: dict[str, str]) -> dict[str, dict[str, int]]:
    """Each study of the stack's Optuna storage: how many of its trials are in each state."""
    counts: dict[str, Counter] = {}
    for name, _, state in trials(study_storage(env)):
        counts.setdefault(name, Counter())[state] += 1
    return {name: dict(states) for name, states in counts.items()}


def run_messages(run_id: str) -> list[str]:
    """What the run's log says of its run worker and its end: its engine events and failure."""
    import dagster as dg

    kinds = (dg.DagsterEventType.ENGINE_EVENT, dg.DagsterEventType.RUN_FAILURE)
    with dg.DagsterInstance.get() as instance:
        return [
            entry.dagster_event.message or entry.user_message
            for entry in instance.all_logs(run_id)
            if entry.dagster_event is not None and entry.dagster_event.event_type in kinds
        ]


def alive(process) -> bool:
    """Whether `process` (a psutil.Process) still runs: not ended, nor a zombie."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
