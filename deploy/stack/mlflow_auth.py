"""The stack's MLflow server behind MLflow's own authentication app (`mlflow server --app-name
basic-auth`): every request but the health check needs a user's password (HTTP basic
authentication, over the server's TLS), and what each user may do is MLflow's permission
model: any user reads (`default_permission = READ`); a user edits and manages what it created;
the runs' user every experiment and registered model; the administrator everything.

Two users: `admin`, whose password only the server and the stack's own files hold, and
`flywheel`, the runs', sensors' and simulation's (`MLFLOW_TRACKING_USERNAME` and
`MLFLOW_TRACKING_PASSWORD`, which MLflow's client sends with each request). Users and their
permissions are kept in MLflow's database (its own tables, beside the tracking store's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import requests

from deploy.stack.processes import StackError, write_atomically

CONFIG = "mlflow-auth.ini"  # in the stack's folder
ADMIN = "admin"
RUNS_USER = "flywheel"
API = "api/2.0/mlflow"


def write_config(path: Path, database_uri: str) -> None:
    """The authentication app's configuration (it holds the database's password: readable by
    its owner only)."""
    text = (
        "[mlflow]\n"
        "default_permission = READ\n"
        f"database_uri = {database_uri}\n"
        f"admin_username = {ADMIN}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    write_atomically(path, text, mode=0o600)


def server_environment(config: Path, secrets: Mapping[str, str]) -> dict[str, str]:
    """The variables the server (alone) gets: where its configuration is, the administrator's
    password it creates that user with on its first start, and its CSRF signing key."""
    return {
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_PASSWORD": secrets["mlflow_admin"],
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets["mlflow_session_key"],
    }


def ensure_runs_user(
    env: Mapping[str, str], secrets: Mapping[str, str], say: Callable[[str], None]
) -> None:
    """Create the runs' user if the server (at the stack's settings `env`) lacks it, with MANAGE
    on every experiment and registered model: the registry is the runs' to keep, those a stack
    made before it had authentication included."""
    admin = (ADMIN, secrets["mlflow_admin"])
    uri, authority = env["MLFLOW_TRACKING_URI"], env["MLFLOW_TRACKING_SERVER_CERT_PATH"]

    def call(method: str, path: str, missing_ok: bool = False, **body) -> requests.Response:
        url = f"{uri}/{path if path.startswith('api/') else f'{API}/{path}'}"
        reply = requests.request(
            method, url, json=body or None, auth=admin, verify=authority or True, timeout=30
        )
        if not reply.ok and not (missing_ok and reply.status_code == 404):
            raise StackError(f"MLflow {method} {path}: {reply.status_code} {reply.text[:300]}")
        return reply

    if call("GET", f"users/get?username={RUNS_USER}", missing_ok=True).ok:
        return
    call("POST", "users/create", username=RUNS_USER, password=secrets["mlflow_runs"])
    # Every experiment and registered model, those made before and those to come: the runs
    # look a model up before it exists (no champion yet), which READ alone answers with 403.
    for kind in ("experiment", "registered_model"):
        call(
            "POST",
            "api/3.0/mlflow/users/permissions/grant",
            username=RUNS_USER,
            resource_type=kind,
            resource_id="*",
            permission="MANAGE",
        )
    say(f"created MLflow's user {RUNS_USER!r} for the runs")
