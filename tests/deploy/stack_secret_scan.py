"""Print, as JSON, where the stack's secrets are found (deploy/secret_scan.py) and how much was
searched: the code location's snapshot as the UI gets it, every run, event and compute log of the
stack's Dagster instance, every MLflow run, and every process's command line and environment,
each process of the stack held to its table (deploy/stack/holders.py); and which secrets the
processes of each part of the stack hold.

Run as `python -m tests.deploy.stack_secret_scan <FLYWHEEL_HOME>` with the stack's settings.
The secrets: every one the stack has (`holders.stack_secrets`), those only its own files and
MLflow's server hold included.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import dagster as dg

from deploy.secret_scan import SecretScanner, captured_logs
from deploy.stack import holders
from deploy.stack.stack import Stack


def main(home: Path) -> dict:
    stack = Stack.of_home(home)
    secrets = holders.stack_secrets(stack)
    scanner = SecretScanner(secrets)
    from pipelines.definitions import defs

    with dg.DagsterInstance.get() as instance:
        hits = scanner.repository(defs) + scanner.instance(instance)
        # Wherever the instance keeps them: the stack's, in the object store.
        hits += scanner.compute_logs(instance)
        runs = len(instance.get_runs())
        logs = sum(1 for _ in captured_logs(instance))
    hits += scanner.tracking_store(os.environ["MLFLOW_TRACKING_URI"])
    supervisor = stack.supervisor
    supervisord = int((supervisor.folder / "supervisord.pid").read_text())
    table = holders.holders(supervisor.url, supervisord)
    hits += scanner.processes(holders=table)
    return {
        "hits": [str(hit) for hit in hits],
        "secrets": sorted(secrets),
        "held": {
            holder: sorted(found) for holder, found in holders.holdings(scanner, table).items()
        },
        "runs": runs,
        "compute_log_files": logs,
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
