"""MLflow's authentication as the stack runs it (deploy/stack/mlflow_auth.py), on an MLflow
server of its own (SQLite, plain HTTP): a stack whose MLflow served without authentication
keeps working once it has it, and a reader cannot choose the champion.

tests/deploy/test_stack.py checks the stack's own server (TLS, PostgreSQL) refuses requests
without credentials.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from deploy.stack import mlflow_auth
from deploy.stack.processes import free_port
from pipelines.lib.registry import champion

BIN = Path(sys.executable).parent
SECRETS = {"mlflow_admin": "admin-password-1", "mlflow_runs": "runs-password-1"}
SECRETS["mlflow_session_key"] = "session-key-1"


@contextmanager
def server(folder: Path, port: int, auth: bool) -> Iterator[str]:
    """An MLflow server on `folder`'s SQLite store, with or without authentication."""
    command = [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--workers", "1", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}"]
    command += ["--artifacts-destination", str(folder / "artifacts")]
    env = {"PATH": str(BIN), "HOME": str(folder), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    if auth:
        config = folder / mlflow_auth.CONFIG
        mlflow_auth.write_config(config, f"sqlite:///{folder / 'auth.db'}")
        command += ["--app-name", "basic-auth"]
        env.update(mlflow_auth.server_environment(config, SECRETS))
    log = (folder / "server.log").open("a")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"{url}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (
                folder / "server.log"
            ).read_text()[-3000:]
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def post(url: str, path: str, body: dict, auth=None) -> requests.Response:
    return requests.post(f"{url}/{mlflow_auth.API}/{path}", json=body, auth=auth, timeout=30)


@pytest.mark.integration
def test_a_stack_that_had_no_authentication_keeps_its_runs_working(tmp_path: Path):
    port = free_port()
    with server(tmp_path, port, auth=False) as url:
        old = post(url, "experiments/create", {"name": "flights"}).json()["experiment_id"]
        assert post(url, "registered-models/create", {"name": "flights"}).ok
    said: list[str] = []
    with server(tmp_path, port, auth=True) as url:
        env = {"MLFLOW_TRACKING_URI": url, "MLFLOW_TRACKING_SERVER_CERT_PATH": ""}
        assert post(url, "experiments/create", {"name": "other"}).status_code == 401
        mlflow_auth.ensure_runs_user(env, SECRETS, said.append)
        mlflow_auth.ensure_runs_user(env, SECRETS, said.append)  # once is enough
        assert said == ["created MLflow's user 'flywheel' for the runs"]
        runs = (mlflow_auth.RUNS_USER, SECRETS["mlflow_runs"])
        # What the runs do, on what was made before: log a run, tag the registered model.
        assert post(url, "runs/create", {"experiment_id": old}, runs).ok
        tag = {"name": "flights", "key": "flywheel/stage", "value": "production"}
        assert post(url, "registered-models/set-tag", tag, runs).ok
        # The server denies (403) an alias of a model that does not exist yet; to the runs'
        # registry code that is no champion yet, as a model without the alias is.
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MLFLOW_TRACKING_USERNAME", runs[0])
            patch.setenv("MLFLOW_TRACKING_PASSWORD", runs[1])
            tracker = SimpleNamespace(client=lambda: MlflowClient(url))
            assert champion(tracker, "not-yet") is None
            assert champion(tracker, "flights") is None
            patch.setenv("MLFLOW_TRACKING_PASSWORD", "wrong-password")
            with pytest.raises(MlflowException):
                champion(tracker, "flights")
        # A reader the administrator adds may read, not change.
        admin = (mlflow_auth.ADMIN, SECRETS["mlflow_admin"])
        reader = {"username": "ana", "password": "ana-password-1"}
        assert post(url, "users/create", reader, admin).ok
        assert (
            post(url, "registered-models/set-tag", tag, ("ana", "ana-password-1")).status_code
            == 403
        )
        got = requests.get(
            f"{url}/{mlflow_auth.API}/registered-models/get",
            params={"name": "flights"},
            auth=("ana", "ana-password-1"),
            timeout=30,
        )
        assert got.ok
