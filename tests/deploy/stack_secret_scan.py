"""Print, as JSON, where the stack's secrets are found (deploy/secret_scan.py) and how much was
searched: the code location's snapshot as the UI gets it, every run, event and compute log of the
stack's Dagster instance, every MLflow run, and every process's command line and environment.

Run as `python -m tests.deploy.stack_secret_scan <FLYWHEEL_HOME>` with the stack's settings.
The secrets: the settings that hold one (SECRET_SETTINGS), and the passwords of the stack's
administrator and of MLflow's role, which only the stack's own files and MLflow's server hold.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import dagster as dg

from deploy.secret_scan import SECRET_SETTINGS, SecretScanner, captured_logs
from pipelines.settings import environment_of

# Where a secret may be: the variables that carry it to the processes that need it; and the
# MLflow server's, which hands its backend store's URL to its workers in variables of its own.
CARRIERS = {*SECRET_SETTINGS, "MLFLOW_BACKEND_STORE_URI"}


def mlflow_server(home: Path) -> set[int]:
    """The pids of the MLflow server and its workers."""
    import psutil

    from deploy.stack.stack import Stack

    pid = Stack.of_home(home).supervisor.pid("mlflow")
    return {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}


def main(home: Path) -> dict:
    kept = json.loads((home / "stack" / "stack.json").read_text())
    secrets = {
        **environment_of(SECRET_SETTINGS),
        "the stack's administrator password": kept["postgres_password"],
        "the mlflow role's password": kept["roles"]["mlflow"],
    }
    scanner = SecretScanner(secrets)
    from pipelines.definitions import defs

    with dg.DagsterInstance.get() as instance:
        hits = scanner.repository(defs) + scanner.instance(instance)
        # Wherever the instance keeps them: the stack's, in the object store.
        hits += scanner.compute_logs(instance)
        runs = len(instance.get_runs())
        logs = sum(1 for _ in captured_logs(instance))
    hits += scanner.tracking_store(os.environ["MLFLOW_TRACKING_URI"])
    server = mlflow_server(home)
    hits += [
        hit
        for hit in scanner.processes(CARRIERS)
        if not ("environment variable" in hit.where and int(hit.where.split()[1]) in server)
    ]
    return {
        "hits": [str(hit) for hit in hits],
        "secrets": sorted(secrets),
        "runs": runs,
        "compute_log_files": logs,
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
