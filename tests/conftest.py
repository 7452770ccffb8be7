"""Shared fixtures: an S3-compatible server on 127.0.0.1, a PostgreSQL server, small synthetic
splits (``ml.synthetic.FEATURES`` describes their columns) and an Optuna study on that server for
the tuning workers."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

import pytest

if TYPE_CHECKING:
    import pandas as pd

    from ml.config import TuneConfig

# Each pytest-xdist worker gets its share of the cores for OpenMP and BLAS, before any test
# module loads them (the variables are read when a library starts its thread pool). With a
# thread per core in every worker, two workers fitting scikit-learn's HistGradientBoosting next
# to torch's pool on two cores spin against each other: seconds of work took minutes.
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
    _share = str(max(1, len(os.sched_getaffinity(0)) // workers))
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, _share)

# `pytest --cpu-report N`: where the suite's CPU goes.
pytest_plugins = ["tests.cpu_report"]

REGION = "us-east-1"

# Test files that start services or processes, play the loop over days, or materialize whole
# days through Dagster: the `integration` marker, which `make test-fast` leaves out. A test of
# that kind in a file of unit tests carries the marker itself.
INTEGRATION = {
    "tests/dbt/test_dbt_project.py",
    "tests/deploy/test_parity.py",
    "tests/deploy/test_processes.py",
    "tests/deploy/test_read_only_run.py",
    "tests/deploy/test_restore.py",
    "tests/deploy/test_secrets.py",
    "tests/deploy/test_stack.py",
    "tests/deploy/test_stack_retraining_faults.py",
    "tests/ml/test_gpu_benches.py",
    "tests/ml/test_parallel_tuning.py",
    "tests/ml/test_tuning.py",
    "tests/ml/test_tuning_database_killed.py",
    "tests/pipelines/defs/test_ingestion.py",
    "tests/pipelines/defs/test_labeling_flow.py",
    "tests/pipelines/defs/test_training_asset.py",
    "tests/pipelines/lib/test_label_studio.py",
    "tests/pipelines/lib/test_postgres_warehouse.py",
    "tests/pipelines/lib/test_tracking_store.py",
    "tests/pipelines/lib/test_training_dataset.py",
    "tests/pipelines/lib/test_tuning_pods.py",
    "tests/pipelines/lib/test_warehouse.py",
    "tests/pipelines/task/test_feed_checks.py",
    "tests/pipelines/test_configuration_errors.py",
    "tests/pipelines/test_disk_full.py",
    "tests/pipelines/test_end_to_end.py",
    "tests/pipelines/test_movielens_task.py",
    "tests/sim/driver/test_compare.py",
    "tests/sim/judge/test_reference.py",
    "tests/sim/world/test_annotator_service.py",
    "tests/test_dependencies.py",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of the files in INTEGRATION `integration`."""
    for item in items:
        if item.path.relative_to(config.rootpath).as_posix() in INTEGRATION:
            item.add_marker(pytest.mark.integration)


class S3Env(NamedTuple):
    """Where the test S3 server listens and the fresh bucket a test may use."""

    endpoint_url: str
    region: str
    bucket: str


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """A moto S3 server on a free local port for the whole session; yields its endpoint URL."""
    # Imported here, as boto3 below: tests/ml runs on a GPU machine that has only the ML stack.
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> S3Env:
    """Dummy AWS credentials for the local server and a fresh, empty bucket."""
    import boto3

    # Keep any real AWS profile or credentials on the machine out of the tests.
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server, region_name=REGION).create_bucket(Bucket=bucket)
    return S3Env(endpoint_url=s3_server, region=REGION, bucket=bucket)


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory) -> Iterator[str]:
    """A PostgreSQL server of the distribution's package on a free loopback port for the session
    (installed first when missing, as `make stack-up` does); yields a SQLAlchemy URL without a
    database: `<url>/optuna`, `<url>/dagster` and `<url>/mlflow` exist."""
    from deploy.stack.postgres import scratch_server
    from tests.deploy.stackctl import passable

    home = tmp_path_factory.mktemp("postgres")
    passable(home)
    with scratch_server(home) as url:
        yield url


@pytest.fixture(scope="session")
def splits() -> dict[str, pd.DataFrame]:
    """Small train/val/test splits; val and test contain unseen categories."""
    from ml.synthetic import make_table

    return {
        "train": make_table(3000, seed=1),
        "val": make_table(1000, seed=2, unseen=True),
        "test": make_table(1000, seed=3, unseen=True),
    }


@pytest.fixture()
def study_config(postgres_url: str, request) -> TuneConfig:
    """Two workers on a study of its own in the `optuna` database; heartbeats every second.

    A trial is stale after 10 s without one. With 4 s the kill test failed once on the 2-core
    machine with a simulation running beside it (not reproduced in five runs since): a live
    worker starved of the CPU for 4 s is taken for dead, and its trial failed too."""
    from ml.config import SearchSpace, TuneConfig

    return TuneConfig(
        n_trials=12,
        storage=f"{postgres_url}/optuna",
        study_name=f"{request.node.name}-{time.time_ns()}",
        pruning=False,
        search_space=SearchSpace(width=(16, 32), depth=(1, 2), arch=("mlp",)),
        workers=2,
        heartbeat_interval_s=1,
        grace_period_s=10,
    )
