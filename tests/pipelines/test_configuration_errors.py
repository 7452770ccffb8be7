"""A wrong prod setting fails within seconds with an error naming it, never a library's traceback.

Unreachable services are closed ports on 127.0.0.1 (or a port that accepts and never answers);
the missing buckets are on the session's S3 server. Each test has a timeout far below what the
libraries' own retries with backoff (botocore's, MLflow's) would take, so a wrong setting that
the flywheel does not check up front fails the test instead of waiting them out.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pytest
from botocore.exceptions import ClientError

from pipelines.lib.errors import ConfigurationError, redact
from pipelines.lib.tracking import tracker_resource, tuning_storage
from pipelines.models_cli import main as models_main
from pipelines.preflight import check_settings, main, require_settings
from pipelines.resources import dataset_store, label_store, landing_zone, warehouse
from tests.conftest import S3Env

pytestmark = pytest.mark.timeout(15)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


class TrackingServer(NamedTuple):
    """Where the stand-in tracking server listens, and the paths it was asked for."""

    uri: str
    requests: list[str]


@pytest.fixture
def tracking_server() -> Iterator[TrackingServer]:
    """An HTTP server answering MLflow's /health, as a reachable tracking server does."""
    requests: list[str] = []

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield TrackingServer(f"http://127.0.0.1:{server.server_address[1]}", requests)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def prod(
    s3_env: S3Env, tracking_server: TrackingServer, postgres_warehouse, monkeypatch, tmp_path
) -> S3Env:
    """Every prod setting pointing at a service that answers; a test spoils one of them."""
    home = tmp_path / "dagster"
    home.mkdir()
    # An instance without Postgres storage: Postgres cases set their own dagster.yaml.
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    settings = {
        "FLYWHEEL_ENV": "prod",
        "FLYWHEEL_HOME": str(tmp_path / "flywheel"),
        "DAGSTER_HOME": str(home),
        "FLYWHEEL_S3_ENDPOINT_URL": s3_env.endpoint_url,
        "FLYWHEEL_LANDING_BUCKET": s3_env.bucket,
        "FLYWHEEL_DVC_REMOTE": f"s3://{s3_env.bucket}/dvc",
        "MLFLOW_TRACKING_URI": tracking_server.uri,
        "FLYWHEEL_OPTUNA_STORAGE": f"sqlite:///{tmp_path / 'optuna.db'}",
    }
    for name, value in {**settings, **postgres_warehouse}.items():
        monkeypatch.setenv(name, value)
    return s3_env


@pytest.fixture
def stack_instance(prod, monkeypatch, tmp_path) -> Path:
    """The stack's dagster.yaml (Postgres from DAGSTER_PG_* variables) in DAGSTER_HOME."""
    home = tmp_path / "stack-dagster"
    home.mkdir()
    shutil.copyfile(REPO / "deploy" / "dagster.stack.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    settings = {"USER": "flywheel", "PASSWORD": "s3cret", "DB": "dagster"}
    for name, value in {"HOST": "127.0.0.1", "PORT": "5432", **settings}.items():
        monkeypatch.setenv(f"DAGSTER_PG_{name}", value)
    return home


@pytest.mark.parametrize("operation", ["list", "read", "write"])
def test_a_missing_landing_bucket_is_named_with_its_endpoint(prod, monkeypatch, operation):
    monkeypatch.setenv("FLYWHEEL_LANDING_BUCKET", "no-such-bucket")
    zone = landing_zone()
    expected = (
        r"bucket 'no-such-bucket' \(FLYWHEEL_LANDING_BUCKET\) does not exist at "
        rf"S3 endpoint {prod.endpoint_url} \(FLYWHEEL_S3_ENDPOINT_URL\)"
    )
    with pytest.raises(ConfigurationError, match=expected) as raised:
        if operation == "list":
            zone.list_files("flights/")
        elif operation == "read":
            zone.read_bytes("flights/2013-01-01.csv")
        else:
            zone.write_bytes("flights/2013-01-01.csv", b"a\n")
    assert isinstance(raised.value.__cause__, ClientError)


def test_the_landing_bucket_still_works_and_a_missing_key_is_still_file_not_found(prod):
    zone = label_store()
    assert zone.write_bytes("outbox/a.csv", b"a\n") is True
    with pytest.raises(FileNotFoundError, match=r"outbox/b\.csv"):
        zone.read_bytes("outbox/b.csv")


def test_an_invalid_bucket_name_is_named(prod, monkeypatch):
    monkeypatch.setenv("FLYWHEEL_LANDING_BUCKET", "Not_A/Bucket")
    with pytest.raises(ConfigurationError, match=r"'Not_A/Bucket' .* is not a valid bucket name"):
        landing_zone().list_files()


def test_an_unreachable_s3_endpoint_is_named(prod, monkeypatch, closed_port):
    endpoint = f"http://127.0.0.1:{closed_port}"
    monkeypatch.setenv("FLYWHEEL_S3_ENDPOINT_URL", endpoint)
    expected = rf"S3 endpoint {endpoint} \(FLYWHEEL_S3_ENDPOINT_URL\) is unreachable: connection"
    with pytest.raises(ConfigurationError, match=expected):
        landing_zone().list_files()


def test_a_missing_dvc_remote_bucket_is_named(prod, monkeypatch, dvc_repo):
    monkeypatch.setenv("FLYWHEEL_DVC_REMOTE", "s3://no-such-bucket/dvc")
    store = dataset_store()
    expected = r"bucket 'no-such-bucket' \(FLYWHEEL_DVC_REMOTE\) does not exist at S3 endpoint"
    with pytest.raises(ConfigurationError, match=expected):
        store.save("flights", {"train": pd.DataFrame({"flight_id": ["a"]})})
    with pytest.raises(ConfigurationError, match=expected):
        store.pull("flights")


def test_an_unreachable_dvc_remote_is_named(prod, monkeypatch, dvc_repo, closed_port):
    monkeypatch.setenv("FLYWHEEL_S3_ENDPOINT_URL", f"http://127.0.0.1:{closed_port}")
    with pytest.raises(ConfigurationError, match=r"\(FLYWHEEL_S3_ENDPOINT_URL\) is unreachable"):
        dataset_store().pull("flights")


def test_an_unreachable_tracking_server_is_named(prod, monkeypatch, closed_port):
    uri = f"http://127.0.0.1:{closed_port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    expected = rf"MLflow tracking server {uri} \(MLFLOW_TRACKING_URI\) is unreachable: connection"
    with (
        tracker_resource("prod", Path()).process_config_and_initialize_cm() as tracker,
        pytest.raises(ConfigurationError, match=expected),
    ):
        tracker.experiment_id()


def test_a_silent_tracking_server_times_out(prod, monkeypatch, silent_port):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{silent_port}")
    with (
        tracker_resource("prod", Path()).process_config_and_initialize_cm() as tracker,
        pytest.raises(ConfigurationError, match=r"\(MLFLOW_TRACKING_URI\) is unreachable: timed"),
    ):
        tracker.check(timeout_s=0.5)


def test_a_reachable_tracking_server_is_probed_once(prod, tracking_server):
    with tracker_resource("prod", Path()).process_config_and_initialize_cm() as tracker:
        tracker.check()
        tracker.client()
        tracker.client()
    assert tracking_server.requests == ["/health"]


def test_the_models_command_names_an_unreachable_tracking_server(
    prod, monkeypatch, closed_port, capsys
):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed_port}")
    assert models_main(["list"]) == 1
    assert "(MLFLOW_TRACKING_URI) is unreachable" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql+psycopg2://flywheel:s3cret@127.0.0.1:{port}/optuna",
            "cannot be opened: connection to server at .* failed: Connection refused",
        ),
        # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3, which is not installed.
        ("postgresql://flywheel:s3cret@127.0.0.1:{port}/optuna", "needs a database driver"),
        ("no-such-dialect://db", "is not a database URL SQLAlchemy knows"),
    ],
)
def test_a_wrong_study_storage_is_named_without_its_password(
    prod, monkeypatch, closed_port, url, expected
):
    monkeypatch.setenv("FLYWHEEL_OPTUNA_STORAGE", url.format(port=closed_port))
    with (
        tuning_storage("prod", Path()).process_config_and_initialize_cm() as storage,
        pytest.raises(ConfigurationError, match=expected) as raised,
    ):
        storage.for_study("flights-abc")
    message = str(raised.value)
    assert "(FLYWHEEL_OPTUNA_STORAGE)" in message and "s3cret" not in message


def test_a_refused_dagster_postgres_names_host_and_port(stack_instance, monkeypatch, closed_port):
    monkeypatch.setenv("DAGSTER_PG_PORT", str(closed_port))
    (dagster,) = [c for c in check_settings() if c.service == "Dagster instance"]
    assert dagster.problem is not None
    assert dagster.problem.startswith(
        f"Dagster instance's Postgres (DAGSTER_PG_HOST=127.0.0.1, DAGSTER_PG_PORT={closed_port}):"
    )
    assert "refused" in dagster.problem and "s3cret" not in dagster.problem


def test_unset_dagster_postgres_variables_are_all_named(stack_instance, monkeypatch):
    monkeypatch.delenv("DAGSTER_PG_HOST")
    monkeypatch.delenv("DAGSTER_PG_PASSWORD")
    with pytest.raises(ConfigurationError, match=r"DAGSTER_PG_HOST, DAGSTER_PG_PASSWORD$"):
        require_settings()


def test_preflight_prints_every_wrong_setting_and_fails(prod, monkeypatch, closed_port, capsys):
    monkeypatch.setenv("FLYWHEEL_LANDING_BUCKET", "no-such-bucket")
    monkeypatch.delenv("FLYWHEEL_DVC_REMOTE")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE_PORT", str(closed_port))
    assert main() == 1
    lines = capsys.readouterr().out.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert len(lines) == 8 and len(failed) == 4
    for setting in (
        "FLYWHEEL_LANDING_BUCKET",
        "FLYWHEEL_DVC_REMOTE",
        "MLFLOW_TRACKING_URI",
        f"_PORT={closed_port}",
    ):
        assert sum(setting in line for line in failed) == 1


def test_a_wrong_warehouse_database_is_named(prod, monkeypatch):
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE_DATABASE", "no_such_database")
    (warehouse,) = [c for c in check_settings() if c.service == "warehouse"]
    assert warehouse.problem is not None
    assert warehouse.problem.startswith("warehouse PostgreSQL (FLYWHEEL_WAREHOUSE_DATABASE):")
    assert "no_such_database" in warehouse.problem


def test_dbt_s_own_role_is_checked_and_named(prod, monkeypatch):
    def dbt_check():
        (check,) = [c for c in check_settings() if c.service == "dbt's role"]
        return check

    assert dbt_check().problem is None and "unset" in dbt_check().detail
    monkeypatch.setenv("FLYWHEEL_DBT_USER", os.environ["FLYWHEEL_WAREHOUSE_USER"])
    monkeypatch.setenv("FLYWHEEL_DBT_PASSWORD", os.environ["FLYWHEEL_WAREHOUSE_PASSWORD"])
    assert dbt_check().problem is None
    monkeypatch.setenv("FLYWHEEL_DBT_PASSWORD", "not-its-password")
    problem = dbt_check().problem
    assert problem and problem.startswith("warehouse PostgreSQL (FLYWHEEL_DBT_USER, _PASSWORD):")


def test_a_secret_read_where_a_resource_is_used_as_built_is_named_when_unset(prod, monkeypatch):
    """The definitions give the password as its variable (`dg.EnvVar`); a warehouse used as
    built, outside a run (the preflight, the simulator), reads it then, and names it unset."""
    store = warehouse("prod")
    assert store.check(5)  # it connects with the variable's value
    monkeypatch.delenv("FLYWHEEL_WAREHOUSE_PASSWORD")
    unset = "needs environment variable FLYWHEEL_WAREHOUSE_PASSWORD"
    with pytest.raises(ConfigurationError, match=unset):
        store.check(5)


def test_preflight_passes_when_every_service_answers(prod, capsys):
    assert main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8 and all(line.startswith("ok") for line in lines)


def test_a_label_studio_that_cannot_be_used_is_named_by_its_setting(prod, monkeypatch, closed_port):
    monkeypatch.setenv("FLYWHEEL_LABELING", "label-studio")
    monkeypatch.setenv("FLYWHEEL_LABEL_STUDIO_URL", f"http://127.0.0.1:{closed_port}")
    (labeling,) = [c for c in check_settings() if c.service == "labeling"]
    assert labeling.problem is not None
    assert labeling.problem.startswith("FLYWHEEL_LABELING=label-studio needs environment variable")
    assert "FLYWHEEL_LABEL_STUDIO_TOKEN" in labeling.problem
    monkeypatch.setenv("FLYWHEEL_LABEL_STUDIO_TOKEN", "t0ken")
    (labeling,) = [c for c in check_settings() if c.service == "labeling"]
    assert labeling.problem is not None
    assert labeling.problem.startswith(
        f"FLYWHEEL_LABEL_STUDIO_URL: Label Studio at http://127.0.0.1:{closed_port}: GET"
    )
    assert "unreachable" in labeling.problem
    monkeypatch.setenv("FLYWHEEL_LABELING", "crowd")
    (labeling,) = [c for c in check_settings() if c.service == "labeling"]
    assert labeling.problem == "FLYWHEEL_LABELING='crowd': expected one of files, label-studio"


def test_preflight_checks_nothing_locally(monkeypatch, capsys):
    monkeypatch.setenv("FLYWHEEL_ENV", "local")
    assert check_settings() == []
    assert main() == 0
    assert "need no service" in capsys.readouterr().out


def test_redact_hides_only_the_password():
    assert redact("postgresql+psycopg2://u:p@h:5432/db") == "postgresql+psycopg2://u:***@h:5432/db"
    assert redact("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"
