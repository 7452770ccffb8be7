"""The local MLflow store opened by several processes at once on a fresh home."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from pipelines.lib.tracking import tracker_resource

PROCESSES = 6


def _open_store(home: str, barrier, results) -> None:
    import mlflow  # noqa: F401  (imported before the barrier: only the opening races)

    tracker = tracker_resource("local", Path(home))
    barrier.wait()
    try:
        experiment_id = tracker.experiment_id()
        tracker.client().search_registered_models(max_results=1)
        results.put(("ok", experiment_id))
    except Exception as e:  # reported to the test, which shows it
        results.put(("error", f"{type(e).__name__}: {e}"))


def test_processes_opening_a_fresh_store_together_all_get_the_same_experiment(tmp_path) -> None:
    # Four partitions of the daily job starting together on a fresh home once failed here:
    # MLflow migrates an empty database in whichever process opens it, with no lock.
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=_open_store, args=(str(tmp_path), barrier, results))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    errors = [detail for status, detail in outcomes if status == "error"]
    assert errors == []
    assert len({detail for _, detail in outcomes}) == 1, outcomes
    assert all(worker.exitcode == 0 for worker in workers)
