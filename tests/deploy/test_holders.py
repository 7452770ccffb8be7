"""Each process of the stack holds only the secrets its table allows (deploy/stack/holders.py),
and the secret scan reports one that holds another; no stack needed: a real supervisord runs
sleepers in place of the services, with the environments the stack gives them."""

from __future__ import annotations

import dataclasses
import functools
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from deploy.secret_scan import Hit, SecretScanner
from deploy.stack import holders, postgres
from deploy.stack.stack import SERVICES, Stack
from deploy.stack.supervisor import Supervisor

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
CALLERS_OWN = "FLYWHEEL_CALLERS_OWN_VARIABLE"
NAMED = "SUPERVISOR_PROCESS_NAME"


def planted(url: str, holder: str | None, env: dict[str, str]) -> subprocess.Popen:
    """A sleeper with `env`, placed under the supervisord of `url` as `holder`'s (or outside)."""
    placed = {"SUPERVISOR_SERVER_URL": url, NAMED: holder} if holder else {}
    return subprocess.Popen(SLEEPER, env={**env, **placed})


def exec_done(supervisor: Supervisor, name: str) -> bool:
    """Whether supervisord's process for `name` runs its command: between its fork and its exec,
    a process still has supervisord's environment, which names no service."""
    pid = supervisor.pid(name)
    try:
        return pid is not None and psutil.Process(pid).environ().get(NAMED) == name
    except psutil.Error:
        return False


def test_a_process_holding_a_secret_outside_its_table_is_reported(tmp_path: Path):
    url = f"unix://{tmp_path / 'supervisord.sock'}"
    values = {
        "DAGSTER_PG_PASSWORD": secrets.token_urlsafe(16),
        "FLYWHEEL_WAREHOUSE_PASSWORD": secrets.token_urlsafe(16),
    }
    sleepers = {
        # The webserver may hold Dagster's password, not the warehouse's; the code server both.
        "webserver": planted(url, "webserver", values),
        "code_server": planted(url, "code_server", values),
        # A service the table does not know may hold nothing.
        "label_studio": planted(
            url, "label_studio", {"DAGSTER_PG_PASSWORD": values["DAGSTER_PG_PASSWORD"]}
        ),
        # A process outside the stack holds each in its own variable: no hit there...
        "outside": planted(url, None, values),
        # ...but one in another variable is.
        "outside, elsewhere": planted(url, None, {"PGPASSWORD": values["DAGSTER_PG_PASSWORD"]}),
    }
    pids = {sleeper.pid: name for name, sleeper in sleepers.items()}
    try:
        hits = SecretScanner(values).processes(holders=holders.holders(url, None))
    finally:
        for sleeper in sleepers.values():
            sleeper.kill()
            sleeper.wait()
    ours = [hit for hit in hits if int(hit.where.split()[1]) in pids]
    assert {(pids[int(hit.where.split()[1])], hit.secret) for hit in ours} == {
        ("webserver", "FLYWHEEL_WAREHOUSE_PASSWORD"),
        ("label_studio", "DAGSTER_PG_PASSWORD"),
        ("outside, elsewhere", "DAGSTER_PG_PASSWORD"),
    }
    pid = sleepers["webserver"].pid
    where = f"process {pid} (python) of webserver, environment variable FLYWHEEL_WAREHOUSE_PASSWORD"
    assert Hit(where, "FLYWHEEL_WAREHOUSE_PASSWORD") in ours


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """A stack's settings in a fresh folder, held by this process as `stack up` holds them, with a
    variable of the caller's own beside them; its supervisord shut down after the test. The
    folder is short: supervisord's socket path must fit a Unix socket's 108 bytes, which a
    test's own folder under a clone's temporary root does not."""
    root = Path(tempfile.mkdtemp(prefix="holders-", dir="/tmp"))
    monkeypatch.setattr(postgres, "binaries", lambda: Path("/usr/lib/postgresql/0/bin"))
    made = Stack(root / "stack")
    monkeypatch.setenv(CALLERS_OWN, secrets.token_urlsafe(16))
    monkeypatch.setenv("FLYWHEEL_LABEL_STUDIO_TOKEN", secrets.token_hex(20))
    for name, value in made.environment().items():
        monkeypatch.setenv(name, value)
    try:
        yield made
    finally:
        made.supervisor.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def test_each_service_of_the_stack_holds_only_what_its_table_allows(stack: Stack):
    # Every service as the stack defines it (command aside): its own variables and supervisord's.
    supervisor = stack.supervisor
    services = [
        dataclasses.replace(
            service,
            command=SLEEPER,
            ready=functools.partial(exec_done, supervisor, name),
            user=None,
        )
        for name, service in stack.services().items()
    ]
    supervisor.launch(services, timeout_s=30)
    for service in services:
        supervisor.start(service, timeout_s=30)
    supervisord = int((supervisor.folder / "supervisord.pid").read_text())
    scanner = SecretScanner(holders.stack_secrets(stack))
    table = holders.holders(supervisor.url, supervisord)

    hits = scanner.processes(holders=table)
    held = holders.holdings(scanner, table)
    environments = [psutil.Process(supervisord).environ()]
    environments += [process.environ() for process in supervisor.processes()]

    outside = [str(hit) for hit in hits if " of " in hit.where]
    assert not outside, "\n".join(outside)
    # What each holds: its table's share (the runs' secrets are the code server's).
    run_secrets = {
        "DAGSTER_PG_PASSWORD",
        "FLYWHEEL_WAREHOUSE_PASSWORD",
        "FLYWHEEL_DBT_PASSWORD",
        "FLYWHEEL_OPTUNA_STORAGE",
        "AWS_SECRET_ACCESS_KEY",
        "MLFLOW_TRACKING_PASSWORD",
        "FLYWHEEL_LABEL_STUDIO_TOKEN",
    }
    assert held == {
        "supervisord": set(),
        "postgres": set(),
        "pgbouncer": set(),
        "s3": set(),
        "mlflow": {holders.S3_KEYS["mlflow"], *holders.MLFLOW_SERVER},
        "code_server": run_secrets,
        "daemon": {"DAGSTER_PG_PASSWORD", holders.S3_KEYS["compute-logs"]},
        "webserver": {"DAGSTER_PG_PASSWORD", holders.S3_KEYS["compute-logs"]},
        "webserver_viewer": {"DAGSTER_PG_PASSWORD", holders.S3_KEYS["compute-logs"]},
        "proxy": set(),
    }
    assert set(held) == {"supervisord", *SERVICES}
    # supervisord passes on nothing of the shell that started it but the machine's basics.
    assert not [env for env in environments if CALLERS_OWN in env]
