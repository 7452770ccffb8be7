"""The code location loads, and one switch moves every resource from local to production."""

from datetime import date
from pathlib import Path

import dagster as dg
import pytest
import yaml

from pipelines.definitions import build_definitions
from pipelines.lib.dbt import FlywheelDbtCliResource
from pipelines.lib.landing_zone import LocalLandingZone, S3LandingZone
from pipelines.resources import landing_zone
from sim.world.replay import land_days
from tests.pipelines.conftest import play_landings, source_rows

REPO = Path(__file__).resolve().parents[2]


def test_definitions_load_with_every_stage_grouped(flywheel):
    defs = flywheel.defs
    graph = defs.resolve_asset_graph()
    # Every asset lives under the task's name.
    assert {key.path[0] for key in graph.get_all_asset_keys()} == {"flights"}
    groups = {key.path[-1]: graph.get(key).group_name for key in graph.get_all_asset_keys()}
    for feed in ("flights", "weather", "planes", "airports", "airlines"):
        assert groups[f"raw_{feed}"] == "ingestion"
    for model in (
        "stg_landing__flights",
        "int_flights_joined_to_origin_weather",
        "fct_flight_features",
    ):
        assert groups[model] == "warehouse"
    assert groups["label_tasks"] == groups["flight_labels"] == "labeling"
    assert groups["training_dataset"] == "datasets"
    assert groups["challenger_model"] == "training"
    assert groups["model_evaluation"] == groups["champion_model"] == "evaluation"
    assert groups["flight_predictions"] == "scoring"
    assert groups["feature_drift"] == groups["model_performance"] == "monitoring"
    # Resolving every job fails if a job selects an asset the definitions lack.
    assert {j.name for j in defs.resolve_all_job_defs()} >= {
        "daily_warehouse_job",
        "dimension_warehouse_job",
        "label_export_job",
        "label_import_job",
        "dataset_job",
        "retraining_job",
    }
    sensors = ("landing_sensor", "label_export_sensor", "inbox_sensor", "drift_sensor")
    for sensor in (*sensors, "performance_sensor"):
        assert defs.resolve_sensor_def(sensor) is not None
    assert [s.name for s in defs.schedules] == ["retraining_schedule"]
    # The retraining run closes the loop: newest labels -> dataset -> model -> gate.
    retraining = defs.resolve_job_def("retraining_job").asset_layer.executable_asset_keys
    assert {k.path[-1] for k in retraining} == {
        "fct_labelled_flights",
        "training_dataset",
        "challenger_model",
        "model_evaluation",
        "champion_model",
    }
    daily = graph.get(dg.AssetKey(["flights", "fct_flight_features"])).partitions_def
    assert daily.get_first_partition_key() == "2013-01-01"
    assert daily.get_last_partition_key() == "2013-12-31"
    assert isinstance(defs.resources["landing_zone"], LocalLandingZone)
    assert isinstance(defs.resources["dbt"], FlywheelDbtCliResource)


def test_an_unknown_environment_is_refused(monkeypatch):
    monkeypatch.setenv("FLYWHEEL_ENV", "staging")
    with pytest.raises(ValueError, match="FLYWHEEL_ENV='staging': expected one of local, prod"):
        build_definitions()


def test_prod_without_its_bucket_names_the_missing_variable(monkeypatch):
    monkeypatch.delenv("FLYWHEEL_LANDING_BUCKET", raising=False)
    with pytest.raises(RuntimeError, match="needs environment variable FLYWHEEL_LANDING_BUCKET"):
        build_definitions(env="prod")


def test_prod_reads_s3_and_builds_the_prod_dbt_target(
    flywheel, s3_env, postgres_warehouse, monkeypatch
):
    monkeypatch.setenv("FLYWHEEL_ENV", "prod")
    for name, value in postgres_warehouse.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FLYWHEEL_LANDING_BUCKET", s3_env.bucket)
    monkeypatch.setenv("FLYWHEEL_S3_ENDPOINT_URL", s3_env.endpoint_url)
    monkeypatch.setenv("FLYWHEEL_DVC_REMOTE", f"s3://{s3_env.bucket}/dvc")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{flywheel.home}/mlflow.db")
    monkeypatch.setenv("FLYWHEEL_OPTUNA_STORAGE", f"sqlite:///{flywheel.home}/optuna.db")
    zone = landing_zone()
    assert isinstance(zone, S3LandingZone)
    land_days(zone, [date(2013, 1, 2)])
    defs = build_definitions()
    assert defs.resources["dbt"].target == "prod"

    ran = play_landings(flywheel, defs)
    assert ran == [("dimension_warehouse_job", None), ("daily_warehouse_job", "2013-01-02")]
    assert defs.resources["warehouse"].dialect == "postgres"
    with defs.resources["warehouse"].connect() as con:
        (features,) = con.execute("select count(*) from fct_flight_features").fetchone()
    assert features == source_rows("flights", "2013-01-02")


def test_the_workspace_serves_each_task_as_a_code_location_of_its_own(tmp_path, monkeypatch):
    """`workspace.yaml` lists one code location per task file; each location's assets live under
    its task's name, its jobs tag their runs with it, and its schedule follows its cadence."""
    import pipelines.definitions as module
    from pipelines.lib.runs import TASK_TAG
    from pipelines.task import load_task, task_names
    from pipelines.task.cadence import RETRAINING_CRON

    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path))
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())
    locations = {
        entry["python_module"]["location_name"]: entry["python_module"]["attribute"]
        for entry in workspace["load_from"]
    }
    assert locations == {name: name for name in task_names()}
    for name in locations:
        defs = getattr(module, name)
        keys = defs.resolve_asset_graph().get_all_asset_keys()
        assert {key.path[0] for key in keys} == {name}
        jobs = [job for job in defs.resolve_all_job_defs() if not job.name.startswith("__")]
        assert jobs and all(job.tags[TASK_TAG] == name for job in jobs)
        (schedule,) = defs.schedules
        assert schedule.cron_schedule == RETRAINING_CRON[load_task(name).cadence][0]
    assert RETRAINING_CRON[load_task("movielens").cadence][0] == "0 4 1 * *"


def test_every_job_has_a_max_runtime_that_run_monitoring_enforces(flywheel):
    """Each job's runs carry Dagster's own max-runtime tag; the daemon's run monitoring reads it
    and fails a run that outlives it (here one started two hours ago)."""
    import logging
    import time
    from types import SimpleNamespace

    from dagster._core.storage.tags import MAX_RUNTIME_SECONDS_TAG
    from dagster._daemon.monitoring import run_monitoring

    from pipelines.lib.runs import MAX_RUNTIME_TAG, RETRAINING_JOB

    assert MAX_RUNTIME_TAG == MAX_RUNTIME_SECONDS_TAG
    jobs = [job for job in flywheel.defs.resolve_all_job_defs() if not job.name.startswith("__")]
    limits = {job.name: float(job.tags[MAX_RUNTIME_TAG]) for job in jobs}
    assert len(limits) == 6 and min(limits.values()) >= 600
    assert limits[RETRAINING_JOB] > limits["daily_warehouse_job"]

    calls = []
    instance = SimpleNamespace(
        report_run_canceling=lambda run, message: calls.append(("canceling", message)),
        run_launcher=SimpleNamespace(terminate=lambda run_id: True),
        report_run_failed=lambda run, message: calls.append(("failed", message)),
    )
    for started_ago, expected in ((60.0, []), (2 * 3600.0, ["canceling", "failed"])):
        calls.clear()
        daily = flywheel.defs.resolve_job_def("daily_warehouse_job")
        run = SimpleNamespace(run_id="r", job_name=daily.name, tags=daily.tags)
        record = SimpleNamespace(dagster_run=run, start_time=time.time() - started_ago)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(run_monitoring, "_force_mark_as_failed", lambda *_: None)
            run_monitoring.check_run_timeout(instance, record, logging.getLogger("t"), 0.0)
        assert [kind for kind, _ in calls] == expected
