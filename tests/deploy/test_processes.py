"""The stack's process table and its errors, with real short-lived processes (no services)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.stack import postgres
from deploy.stack.processes import ProcessTable, Service, StackError, free_port, free_ports
from deploy.stack.stack import Stack, code_server_ready


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`."""
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def service(name: str, code: str, ready=lambda: False) -> Service:
    return Service(name, [sys.executable, "-c", code], ready)


def test_a_service_that_exits_while_starting_is_reported_with_its_log(tmp_path: Path):
    table = ProcessTable(tmp_path)
    broken = service("broken", "import sys; print('bad setting: FOO'); sys.exit(3)")
    with pytest.raises(StackError) as caught:
        table.start(broken, dict(os.environ), timeout_s=30)
    message = str(caught.value)
    assert "broken exited with status 3" in message
    assert str(tmp_path / "logs" / "broken.log") in message
    assert "bad setting: FOO" in message


def test_a_service_not_ready_in_time_is_stopped_by_stop_and_named(tmp_path: Path):
    table = ProcessTable(tmp_path)
    sleeper = service("sleeper", "import time; time.sleep(60)")
    with pytest.raises(StackError, match="sleeper was not ready after 1 s"):
        table.start(sleeper, dict(os.environ), timeout_s=1)
    assert table.running("sleeper") is not None
    assert table.stop(["sleeper"], timeout_s=10) == ["sleeper"]
    assert table.running("sleeper") is None


def test_ports_chosen_together_are_all_different_and_free():
    # One at a time, 200 probes repeated a port in 13 of 20 tries here (the kernel may hand a
    # closed probe's port out again); a stack once gave two of its services the same one.
    ports = free_ports(200)
    assert len(set(ports)) == 200
    for port in ports[:20]:
        with socket.socket() as again:
            again.bind(("127.0.0.1", port))


def test_start_is_idempotent_and_a_recycled_pid_is_not_the_service(tmp_path: Path):
    table = ProcessTable(tmp_path)
    port = free_port()
    code = (
        "import socket, time; s = socket.socket(); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)"
    )
    listener = service("listener", code, ready=lambda: port_open(port))
    assert table.start(listener, dict(os.environ), timeout_s=30) is True
    assert table.start(listener, dict(os.environ), timeout_s=30) is False  # already running
    record = tmp_path / "pids" / "listener.json"
    real = json.loads(record.read_text())
    # Same pid, another start time: a process that reused the pid is not the service.
    record.write_text(json.dumps({**real, "started": real["started"] - 100}))
    assert table.running("listener") is None
    record.write_text(json.dumps(real))
    assert table.stop(["listener"]) == ["listener"]
    assert not port_open(port)


def test_a_stack_made_before_the_pooler_gets_a_port_for_it_and_keeps_the_others(tmp_path: Path):
    root = tmp_path / "stack"
    root.mkdir()
    ports = {"postgres": 1, "s3": 2, "mlflow": 3, "code_server": 4, "webserver": 5}
    (root / "stack.json").write_text(
        json.dumps({"ports": ports, "postgres_password": "p", "s3_secret": "s"})
    )
    chosen = Stack(root).settings
    assert {name: chosen["ports"][name] for name in ports} == ports
    assert chosen["ports"]["pgbouncer"] not in ports.values()
    assert json.loads((root / "stack.json").read_text()) == chosen  # kept for the next `up`
    # Dagster reaches its database through the pooler, the warehouse the server itself.
    environment = Stack(root).environment()
    assert environment["DAGSTER_PG_PORT"] == str(chosen["ports"]["pgbouncer"])
    assert environment["FLYWHEEL_WAREHOUSE_PORT"] == "1"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the cluster to another user")
def test_a_home_the_server_user_cannot_enter_is_named(tmp_path: Path):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    with pytest.raises(StackError, match=f"cannot enter {closed}"):
        postgres.give_to_server_user(closed / "postgres")


def test_a_code_location_that_cannot_load_is_an_error_not_a_ready_code_server():
    port = free_port()
    dagster = str(Path(sys.executable).parent / "dagster")
    command = [dagster, "code-server", "start", "-m", "no_such_module"]
    server = subprocess.Popen(
        [*command, "-h", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        with pytest.raises(StackError, match=r"could not be loaded(.|\n)*no_such_module"):
            while not code_server_ready(port):
                assert time.monotonic() < deadline, "the code server never answered"
                time.sleep(0.2)
    finally:
        server.kill()
        server.wait()


def test_a_missing_package_is_named_where_it_cannot_be_installed(monkeypatch):
    monkeypatch.setattr(postgres.os, "geteuid", lambda: 1000)  # not root: nothing is installed
    with pytest.raises(StackError, match=r"PgBouncer \(.*\) is not installed: install the `pg"):
        postgres.installed("pgbouncer", lambda: None, "PgBouncer (no pgbouncer on PATH)")
