"""The local MLflow store opened by several processes at once on a fresh home."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipelines.lib.tracking import MlflowTracker, tracker_resource

PROCESSES = 6


def _open_store(home: str, barrier, results) -> None:
    try:
        import mlflow  # noqa: F401  (imported before the barrier: only the opening races)

        tracker = tracker_resource("local", Path(home))
        barrier.wait()
        experiment_id = tracker.experiment_id()
        tracker.client().search_registered_models(max_results=1)
        results.put(("ok", experiment_id))
    except Exception as e:  # reported to the test, which shows it
        results.put(("error", f"{type(e).__name__}: {e}"))


def test_processes_opening_a_fresh_store_together_all_get_the_same_experiment(tmp_path) -> None:
    # Four partitions of the daily job starting together on a fresh home once failed here:
    # MLflow migrates an empty database in whichever process opens it, with no lock.
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES, timeout=120)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=_open_store, args=(str(tmp_path), barrier, results), daemon=True)
        for _ in range(PROCESSES)
    ]
    try:
        for worker in workers:
            worker.start()
        outcomes = [results.get(timeout=300) for _ in workers]
        for worker in workers:
            worker.join(timeout=60)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
    errors = [detail for status, detail in outcomes if status == "error"]
    assert errors == []
    assert len({detail for _, detail in outcomes}) == 1, outcomes
    assert all(worker.exitcode == 0 for worker in workers)


def test_an_experiment_created_meanwhile_is_looked_up(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS

    # Another run creates the experiment between this one's lookup and its creation.
    lookups = iter([None, SimpleNamespace(experiment_id="7")])

    class Racing:
        def get_experiment_by_name(self, name: str):
            return next(lookups)

        def create_experiment(self, name: str, artifact_location: str | None = None):
            raise MlflowException(f"Experiment '{name}' already exists.", RESOURCE_ALREADY_EXISTS)

    tracker = MlflowTracker(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setattr(MlflowTracker, "client", lambda self: Racing())
    assert tracker.experiment_id() == "7"
