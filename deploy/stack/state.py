"""What a stack chooses once and keeps: its addresses, its services' ports and its secrets
(`stack.json` under its folder, readable by its owner only).

The address its services listen on and are reached by (`FLYWHEEL_STACK_ADDRESS`, default
127.0.0.1), and the code server's (`FLYWHEEL_STACK_CODE_SERVER_ADDRESS`, default the same), are
chosen when the stack is made: a test runs the code server and its runs in a network namespace
of their own, which reaches the others by a non-loopback address only, as a pod would.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from pathlib import Path

from deploy.stack import postgres
from deploy.stack.processes import StackError, free_ports, write_atomically
from pipelines.settings import STACK_ADDRESS, STACK_CODE_SERVER_ADDRESS

LOOPBACK = "127.0.0.1"
# The stack's other secrets, by name: MLflow's administrator's password, the runs' MLflow
# password (user `flywheel`), the key MLflow's server signs its CSRF tokens with, the
# password of the Dagster UI's `operator` (deploy/stack/proxy.py), and the object store's keys
# but the runs' (`s3_secret`): its administrator's, MLflow's, the compute logs' and the landing
# producer's (deploy/stack/s3.py, IDENTITIES).
SECRETS = ("mlflow_admin", "mlflow_runs", "mlflow_session_key", "ui_operator")
SECRETS += ("s3_admin", "s3_mlflow", "s3_compute_logs", "s3_landing")


def s3_keys(kept: dict) -> dict[str, str]:
    """The secret of each of the object store's identities (deploy/stack/s3.py, IDENTITIES)."""
    chosen_secrets = kept["secrets"]
    return {
        "admin": chosen_secrets["s3_admin"],
        "flywheel": kept["s3_secret"],
        "landing": chosen_secrets["s3_landing"],
        "mlflow": chosen_secrets["s3_mlflow"],
        "compute-logs": chosen_secrets["s3_compute_logs"],
    }


def chosen(root: Path, ports: Sequence[str]) -> dict:
    """The stack's choices under `root`: made at the first call, kept after. A stack made before
    a part was added (the pooler, the object store) gets a port for it, and one made before the
    consumers' roles or MLflow's users their passwords, kept too."""
    path = root / "stack.json"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        address = STACK_ADDRESS.get() or LOOPBACK
        made = {
            "address": address,
            "code_server_address": STACK_CODE_SERVER_ADDRESS.get() or address,
            "ports": dict(zip(ports, free_ports(len(ports), address), strict=True)),
            "postgres_password": secrets.token_urlsafe(18),
            "roles": {role: secrets.token_urlsafe(18) for role in postgres.ROLES},
            "s3_secret": secrets.token_urlsafe(18),
            "secrets": {name: secrets.token_urlsafe(18) for name in SECRETS},
        }
        write_atomically(path, json.dumps(made, indent=2), mode=0o600)
        return made
    kept = json.loads(path.read_text())
    # A stack made before it had an address of its own listens on the loopback.
    addressed = "address" in kept
    address = kept.setdefault("address", LOOPBACK)
    kept.setdefault("code_server_address", address)
    missing = [name for name in ports if name not in kept["ports"]]
    roles = [role for role in postgres.ROLES if role not in kept.get("roles", {})]
    unset = [name for name in SECRETS if name not in kept.get("secrets", {})]
    if missing:
        taken = set(kept["ports"].values())
        fresh = [p for p in free_ports(len(missing) + len(taken), address) if p not in taken]
        kept["ports"].update(zip(missing, fresh, strict=False))
    if roles:
        kept.setdefault("roles", {}).update({role: secrets.token_urlsafe(18) for role in roles})
    if unset:
        kept.setdefault("secrets", {}).update({name: secrets.token_urlsafe(18) for name in unset})
    if missing or roles or unset or not addressed:
        write_atomically(path, json.dumps(kept, indent=2), mode=0o600)
    asked = STACK_ADDRESS.get()
    if asked and asked != address:
        raise StackError(
            f"{STACK_ADDRESS.name}={asked}, but the stack in {root} was made on {address}: "
            "unset it, or make a stack in another FLYWHEEL_HOME"
        )
    return kept
