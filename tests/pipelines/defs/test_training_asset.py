"""challenger_model tunes on the latest dataset, tracks trials in MLflow and registers a model."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import dagster as dg
import numpy as np
import optuna
import pandas as pd
import pytest
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from optuna.distributions import FloatDistribution
from optuna.trial import create_trial

from ml.model_cache import ModelCache
from ml.synthetic import FEATURES, make_table
from pipelines.defs.training.assets import build_training_assets
from pipelines.lib.datasets import DvcDatasetStore
from pipelines.lib.tracking import (
    MlflowTracker,
    TuningStorage,
    tracker_resource,
    trial_metrics,
    tuning_storage,
)
from pipelines.lib.tuning_workers import LocalTuningWorkers

MODEL = "flywheel-flights"


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        yield instance


@pytest.fixture
def tracker(tmp_path: Path) -> MlflowTracker:
    return tracker_resource("local", tmp_path / "home")


@pytest.fixture
def store(dvc_repo: Path, tmp_path: Path) -> DvcDatasetStore:
    return DvcDatasetStore(
        repo_dir=str(dvc_repo / "data"),
        remote_url=str(tmp_path / "dvc-remote"),
        cache_dir=str(tmp_path / "fetched"),
    )


def record_dataset(instance: dg.DagsterInstance, store: DvcDatasetStore) -> str:
    """Save a tiny dataset with DVC and record it as training_dataset's latest materialization;
    its DVC hash."""
    splits = {
        split: make_table(1500 if split == "train" else 500, seed=seed, unseen=split != "train")
        for seed, split in enumerate(("train", "validation", "test"), start=1)
    }
    version = store.save("flights", splits)
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key=["flights", "training_dataset"],
            metadata={"path": str(version.path), "dvc_hash": version.dvc_hash},
            tags={"dagster/data_version": version.dvc_hash},
        )
    )
    # The step reads the version from the remote by its hash, not this folder.
    shutil.rmtree(version.path)
    return version.dvc_hash


def materialize(
    instance: dg.DagsterInstance,
    tracker: MlflowTracker,
    tmp_path: Path,
    store: DvcDatasetStore,
    storage: str | None = None,
    **config: object,
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        build_training_assets("flights", FEATURES, "row_date"),
        instance=instance,
        resources={
            "tracker": tracker,
            "tuning_storage": TuningStorage(location=storage or str(tmp_path / "optuna")),
            "dataset_store": store,
            "tuning_workers": LocalTuningWorkers(),
        },
        run_config={"ops": {"flights__challenger_model": {"config": config}}},
        raise_on_error=False,
    )


def test_challenger_is_tuned_tracked_and_registered(
    instance: dg.DagsterInstance,
    tracker: MlflowTracker,
    store: DvcDatasetStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dvc_hash = record_dataset(instance, store)
    process_store = os.environ.get("MLFLOW_TRACKING_URI")

    result = materialize(instance, tracker, tmp_path, store, n_trials=2, max_epochs=2)

    assert result.success
    # The run pointed MLflow's process-wide store at the tracker only while it ran.
    assert os.environ.get("MLFLOW_TRACKING_URI") == process_store
    [event] = result.get_asset_materialization_events()
    materialization = event.materialization
    meta = {k: v.value for k, v in materialization.metadata.items()}
    assert set(meta["best_params"]) == {"arch", "width", "depth", "dropout", "lr", "weight_decay"}
    table = meta["validation_metrics"]
    assert "challenger" in table and "logistic_regression" in table
    assert "hist_gradient_boosting" in table
    assert 0.5 < meta["val/auroc"] <= 1 and meta["val/logloss"] > 0
    assert meta["registered_model_version"] == 1
    assert meta["registered_model"] == f"models:/{MODEL}/1"
    assert meta["dataset_dvc_hash"] == dvc_hash
    assert meta["trials_complete"] + meta["trials_pruned"] == 2
    assert meta["tuning_compute_seconds"] > 0
    assert meta["time_tracking_features"] == []  # the rows' one day: no partitions to rank
    assert materialization.tags["dagster/data_version"] == f"{MODEL}/1"
    assert materialization.tags["dagster/input_data_version/flights/training_dataset"] == dvc_hash

    client = tracker.client()
    runs = client.search_runs([tracker.experiment_id()])
    [parent] = [r for r in runs if MLFLOW_PARENT_RUN_ID not in r.data.tags]
    trials = [r for r in runs if r.data.tags.get(MLFLOW_PARENT_RUN_ID) == parent.info.run_id]
    assert parent.info.run_id == meta["mlflow_run_id"] and len(trials) == 2 == len(runs) - 1
    for run in (parent, *trials):
        assert run.data.tags["dataset.dvc_hash"] == dvc_hash
        assert run.data.tags["dagster.run_id"] == result.run_id
        assert run.data.tags["git.commit"]
    for trial in trials:
        assert trial.data.tags["optuna.trial_state"] in {"COMPLETE", "PRUNED"}
        assert trial.data.tags["device"] == "cpu"
        assert trial.data.metrics["trial/wall_seconds"] > 0
        assert set(trial.data.params) == set(meta["best_params"])
        steps = [m.step for m in client.get_metric_history(trial.info.run_id, "val/logloss")]
        assert steps == list(range(int(trial.data.metrics["trial/epochs_run"])))
    assert {"val/auroc", "baseline/logistic_regression/auroc"} <= set(parent.data.metrics)
    # 1,500 training rows take batches of 47, not 1,024: 32 steps an epoch, as configured.
    assert parent.data.params["batch_size"] == "47"
    version = client.get_model_version(MODEL, "1")
    assert version.run_id == parent.info.run_id
    kept_baselines_score_the_evaluation(instance, store, tracker, version, monkeypatch)


def test_the_step_tunes_with_worker_processes_on_an_rdb_study(
    instance: dg.DagsterInstance,
    tracker: MlflowTracker,
    store: DvcDatasetStore,
    tmp_path: Path,
    postgres_url: str,
) -> None:
    record_dataset(instance, store)

    storage = f"{postgres_url}/optuna"
    result = materialize(
        instance, tracker, tmp_path, store, storage, n_trials=3, max_epochs=1, workers=2
    )

    assert result.success
    [event] = result.get_asset_materialization_events()
    meta = {k: v.value for k, v in event.materialization.metadata.items()}
    assert meta["trials_complete"] + meta["trials_pruned"] == 3
    study = optuna.load_study(study_name=meta["study"], storage=storage)
    assert {t.user_attrs["worker"] for t in study.trials} <= {0, 1}
    assert os.getpid() not in {t.user_attrs["pid"] for t in study.trials}
    # The trials, run in the workers, are tracked from the step once they are done.
    runs = tracker.client().search_runs([tracker.experiment_id()])
    numbers = [r.data.tags.get("optuna.trial_number") for r in runs]
    assert sorted(n for n in numbers if n is not None) == ["0", "1", "2"] and len(runs) == 4


def test_a_feature_that_tracks_time_is_warned_of_and_the_training_goes_on(
    instance: dg.DagsterInstance, tracker: MlflowTracker, store: DvcDatasetStore, tmp_path: Path
) -> None:
    # 20 rows a day over 150 days, the distance planted as the rows seen before the day.
    splits, before = {}, 0
    for seed, (split, days) in enumerate((("train", 75), ("validation", 50), ("test", 25)), 1):
        table = make_table(20 * days, seed=seed)
        day = np.repeat(np.arange(before, before + days), 20)
        table["row_date"] = (pd.Timestamp("2013-01-01") + pd.to_timedelta(day, unit="D")).date
        table["distance"] = 20.0 * day
        splits[split], before = table, before + days
    version = store.save("flights", splits)
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key=["flights", "training_dataset"],
            metadata={"path": str(version.path), "dvc_hash": version.dvc_hash},
        )
    )

    result = materialize(instance, tracker, tmp_path, store, n_trials=1, max_epochs=1)

    assert result.success
    [event] = result.get_asset_materialization_events()
    [flagged] = event.materialization.metadata["time_tracking_features"].value
    assert flagged["feature"] == "distance" and flagged["partitions"] == 125
    warnings = [
        e.user_message for e in instance.all_logs(result.run_id) if e.level == logging.WARNING
    ]
    assert any(m.startswith("distance rises with time over 125 partitions") for m in warnings)


def test_fails_clearly_without_a_dataset(
    instance: dg.DagsterInstance, tracker: MlflowTracker, store: DvcDatasetStore, tmp_path: Path
) -> None:
    result = materialize(instance, tracker, tmp_path, store, n_trials=1, max_epochs=1)

    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert "flights/training_dataset was never materialized" in str(failure.step_failure_data.error)


def test_trial_metrics_prefer_a_recorded_history() -> None:
    reported = dict(
        params={"lr": 0.01},
        distributions={"lr": FloatDistribution(1e-4, 1e-1, log=True)},
        value=0.5,
        intermediate_values={0: 0.7, 1: 0.5},
        user_attrs={"wall_seconds": 2.5, "epochs_run": 2},
    )
    history = [{"epoch": 0, "val/logloss": 0.7, "val/auroc": 0.6}]

    reported_only = trial_metrics(create_trial(**reported), "val/logloss", 0)
    with_history = create_trial(**reported | {"user_attrs": {"history": history}})

    assert {(m.key, m.step, m.value) for m in reported_only} == {
        ("val/logloss", 0, 0.7),
        ("val/logloss", 1, 0.5),
        ("best/val/logloss", 0, 0.5),
        ("trial/wall_seconds", 0, 2.5),
        ("trial/epochs_run", 0, 2.0),
    }
    assert {(m.key, m.step) for m in trial_metrics(with_history, "val/logloss", 0)} == {
        ("val/logloss", 0),
        ("val/auroc", 0),
        ("best/val/logloss", 0),
    }


def test_stores_follow_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = tracker_resource("local", tmp_path)
    assert local.tracking_uri == f"sqlite:///{tmp_path}/mlflow/mlflow.db"
    assert local.artifact_location == (tmp_path / "mlflow" / "artifacts").as_uri()
    journal = tuning_storage("local", tmp_path).for_study("flights-abc")
    assert journal == str(tmp_path / "optuna" / "flights-abc.journal")

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://mlflow.example.com")
    # A database URL is opened before it is handed on: one that opens without a server.
    database = f"sqlite:///{tmp_path / 'optuna.db'}"
    monkeypatch.setenv("FLYWHEEL_OPTUNA_STORAGE", database)
    prod = tracker_resource("prod", tmp_path).process_config_and_initialize()
    assert prod.tracking_uri == "https://mlflow.example.com" and prod.artifact_location is None
    studies = tuning_storage("prod", tmp_path).process_config_and_initialize()
    assert studies.for_study("flights-abc") == database


def kept_baselines_score_the_evaluation(
    instance: dg.DagsterInstance,
    store: DvcDatasetStore,
    tracker: MlflowTracker,
    version: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The training run keeps its fitted baselines; the evaluation of the same dataset scores
    the test split with them, exactly as baselines fitted again on the same train split would,
    without fitting. Another dataset's evaluation, or a run that kept none, fits them."""
    import pandas as pd

    from ml import baselines
    from ml.baselines import fit_baselines
    from ml.data import TabularDataModule
    from pipelines.defs.evaluation.challenger_evaluation import baseline_scores
    from pipelines.defs.training.assets import latest_dataset
    from pipelines.lib.registry import DATASET_TAG, model_version, read_baselines

    dataset = latest_dataset(instance, store, "flights")
    frames = {s: pd.read_parquet(dataset.split(s)) for s in ("train", "validation", "test")}
    test = frames["test"]
    refitted = TabularDataModule(frames["train"], frames["validation"], test, FEATURES, seed=0)
    expected = baselines.baseline_predictions(refitted, "test")
    assert read_baselines(tracker, version.run_id) is not None
    challenger = model_version(tracker, MODEL, 1)

    def no_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("the evaluation fitted the baselines again")

    with monkeypatch.context() as patch:
        patch.setattr(baselines, "fit_baselines", no_fit)
        kept = baseline_scores(
            tracker, FEATURES, challenger, dataset.dvc_hash, frames, test, seed=0
        )
    assert set(kept) == set(expected)
    for name, scores in expected.items():
        assert (kept[name] == scores).all(), name

    # Evaluated on another dataset's splits, the kept baselines would be another train split's.
    with monkeypatch.context() as patch:
        fits = []
        patch.setattr(
            baselines, "fit_baselines", lambda *a, **k: fits.append(1) or fit_baselines(*a, **k)
        )
        baseline_scores(tracker, FEATURES, challenger, "another", frames, test, seed=0)
    assert fits == [1]
    # A run that kept none (one of an older version): the evaluation fits them itself.
    with tracker.start_run(run_name="older", tags={DATASET_TAG: dataset.dvc_hash}) as older:
        pass
    assert read_baselines(tracker, older.info.run_id) is None
    unkept = replace(challenger, run_id=older.info.run_id)
    fitted = baseline_scores(tracker, FEATURES, unkept, dataset.dvc_hash, frames, test, seed=0)
    for name, scores in expected.items():
        assert (fitted[name] == scores).all(), name


def test_the_same_dataset_and_seed_reuse_the_model_another_seed_trains_its_own(
    instance: dg.DagsterInstance, tracker: MlflowTracker, store: DvcDatasetStore, tmp_path: Path
) -> None:
    record_dataset(instance, store)
    cache = str(tmp_path / "models")
    budget = {"n_trials": 1, "max_epochs": 1, "members": 1, "model_cache": cache}

    def trained(**config: object) -> dict[str, object]:
        result = materialize(instance, tracker, tmp_path, store, **budget, **config)
        assert result.success
        [event] = result.get_asset_materialization_events()
        return {k: v.value for k, v in event.materialization.metadata.items()}

    first, again, other = trained(), trained(), trained(seed=1)
    assert (first["model_cache"], again["model_cache"], other["model_cache"]) == (
        "stored",
        "hit",
        "stored",
    )
    # The same model, registered again as this run's version, with the seconds it took once.
    assert again["best_params"] == first["best_params"] and again["val/auroc"] == first["val/auroc"]
    assert again["training_seconds"] == first["training_seconds"]
    assert (first["registered_model_version"], again["registered_model_version"]) == (1, 2)
    # Another seed, another entry: its final fit from its own initialisations (its trial is
    # the study's, shared here by the three runs: one study per dataset version).
    entries = [ModelCache(cache).load(p.name) for p in Path(cache).iterdir()]
    histories = [e.result.fit.history for e in entries if e is not None]
    assert len(histories) == 2 and histories[0] != histories[1]
