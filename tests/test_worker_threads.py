"""Under pytest-xdist, torch, scikit-learn and numpy use each worker's share of the cores
(tests/conftest.py): set too late, after one of them has loaded, the setting does nothing."""

from __future__ import annotations

import os

import pytest

from tests.conftest import WORKER_THREADS


def test_each_xdist_worker_runs_its_share_of_the_cores_threads() -> None:
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        pytest.skip("not under pytest-xdist: the libraries keep their own thread counts")
    if len(WORKER_THREADS) < 3:
        pytest.skip("the shell set its own thread counts")
    import sklearn.ensemble  # noqa: F401  (loads scikit-learn's OpenMP runtime)
    import torch
    from threadpoolctl import threadpool_info

    share = max(1, (os.cpu_count() or 1) // int(workers))
    assert set(WORKER_THREADS.values()) == {str(share)}
    assert torch.get_num_threads() == share
    pools = threadpool_info()
    assert {p["user_api"] for p in pools} >= {"openmp", "blas"}
    for pool in pools:
        assert pool["num_threads"] == share, pool
