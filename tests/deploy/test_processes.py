"""The stack's process manager (a real supervisord) and its errors, with short-lived programs in
place of the services."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from deploy.stack import postgres
from deploy.stack.processes import StackError, free_port, free_ports
from deploy.stack.readiness import code_server_ready, daemon_ready
from deploy.stack.stack import PORTS, Stack
from deploy.stack.supervisor import START_RETRIES, Service, Supervisor


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`."""
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def service(name: str, code: str, ready=lambda: False) -> Service:
    return Service(name, [sys.executable, "-c", code], ready)


def listening(port: int) -> str:
    """A program that listens on 127.0.0.1:`port` until stopped."""
    return (
        "import socket, time; s = socket.socket(); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(600)"
    )


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    """A supervisord of its own under `tmp_path`, shut down after the test."""
    made = Supervisor(tmp_path)
    yield made
    made.shutdown()


def launch(supervisor: Supervisor, *services: Service) -> None:
    supervisor.launch(services, timeout_s=30)


def test_a_service_that_keeps_failing_is_given_up_and_reported_with_its_log(supervisor):
    broken = service("broken", "import sys; print('bad setting: FOO'); sys.exit(3)")
    launch(supervisor, broken)
    with pytest.raises(StackError) as caught:
        supervisor.start(broken, timeout_s=120)
    message = str(caught.value)
    # supervisord tried it again, waiting longer each time, then gave up.
    assert "broken is FATAL" in message
    assert str(supervisor.log("broken")) in message
    assert "bad setting: FOO" in message
    assert supervisor.log("broken").read_text().count("bad setting: FOO") == START_RETRIES + 1


def test_a_service_not_ready_in_time_is_named_and_stopped_by_stop(supervisor):
    sleeper = service("sleeper", "import time; time.sleep(600)")
    launch(supervisor, sleeper)
    with pytest.raises(StackError, match="sleeper was not ready after 1 s"):
        supervisor.start(sleeper, timeout_s=1)
    pid = supervisor.pid("sleeper")
    assert pid is not None
    assert supervisor.stop(["sleeper"]) == ["sleeper"]
    assert supervisor.pid("sleeper") is None
    assert not psutil.pid_exists(pid)


def test_a_killed_service_is_restarted_and_start_is_idempotent(supervisor):
    port = free_port()
    listener = service("listener", listening(port), ready=lambda: port_open(port))
    launch(supervisor, listener)
    assert supervisor.start(listener, timeout_s=30) is True
    assert supervisor.start(listener, timeout_s=30) is False  # already running
    first = supervisor.pid("listener")
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not supervisor.states(["listener"])["listener"].startswith("RUNNING"):
        assert time.monotonic() < deadline, supervisor.states(["listener"])
        time.sleep(0.2)
    assert supervisor.pid("listener") != first and port_open(port)
    assert supervisor.stop(["listener"]) == ["listener"]
    assert not port_open(port)


def test_services_left_by_a_killed_supervisord_are_stopped_by_the_next(tmp_path: Path):
    port = free_port()
    listener = service("listener", listening(port), ready=lambda: port_open(port))
    first = Supervisor(tmp_path)
    launch(first, listener)
    first.start(listener, timeout_s=30)
    orphan = first.pid("listener")
    os.kill(int((first.folder / "supervisord.pid").read_text()), signal.SIGKILL)
    time.sleep(1)
    assert psutil.pid_exists(orphan) and port_open(port)  # it holds the port a new one needs
    again = Supervisor(tmp_path)
    try:
        assert again.leftovers() == [orphan]
        launch(again, listener)
        assert again.start(listener, timeout_s=30) is True
        assert again.pid("listener") != orphan
    finally:
        again.shutdown()
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(orphan).kill()


def test_ports_chosen_together_are_all_different_and_free():
    # One at a time, 200 probes repeated a port in 13 of 20 tries here (the kernel may hand a
    # closed probe's port out again); a stack once gave two of its services the same one.
    ports = free_ports(200)
    assert len(set(ports)) == 200
    for port in ports[:20]:
        with socket.socket() as again:
            again.bind(("127.0.0.1", port))


def test_a_stack_made_before_the_pooler_the_store_and_the_roles_gets_them_and_keeps_the_rest(
    tmp_path: Path,
):
    root = tmp_path / "stack"
    root.mkdir()
    ports = {"postgres": 1, "s3": 2, "mlflow": 3, "code_server": 4, "webserver": 5}
    (root / "stack.json").write_text(
        json.dumps({"ports": ports, "postgres_password": "p", "s3_secret": "s"})
    )
    chosen = Stack(root).settings
    assert {name: chosen["ports"][name] for name in ports} == ports
    added = [chosen["ports"][name] for name in PORTS if name not in ports]
    # The pooler, the store's 7 more, the viewers' webserver and the login.
    assert len(added) == len(PORTS) - len(ports) == 10
    assert len(set(added) | set(ports.values())) == len(PORTS)
    # ...and passwords for the consumers' roles it did not have.
    assert set(chosen["roles"]) == set(postgres.ROLES)
    assert json.loads((root / "stack.json").read_text()) == chosen  # kept for the next `up`
    # Dagster reaches its database through the pooler, the warehouse the server itself.
    environment = Stack(root).environment()
    assert environment["DAGSTER_PG_PORT"] == str(chosen["ports"]["pgbouncer"])
    assert environment["FLYWHEEL_WAREHOUSE_PORT"] == "1"
    assert environment["DAGSTER_PG_PASSWORD"] == chosen["roles"]["dagster"]


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
            while not code_server_ready("127.0.0.1", port):
                assert time.monotonic() < deadline, "the code server never answered"
                time.sleep(0.2)
    finally:
        server.kill()
        server.wait()


FIRST_LOAD_WITHOUT_DATABASE = """
import os
from pathlib import Path

import dagster as dg
from dagster_postgres.utils import DagsterPostgresException

tried = Path(os.environ["TRIED"])
if not tried.exists():
    tried.write_text("once")
    raise DagsterPostgresException("too many retries for DB connection")
defs = dg.Definitions()
"""


def test_a_code_location_whose_database_did_not_answer_is_loaded_again(tmp_path):
    """Its first load fails as Dagster's own does when PostgreSQL is not reached in its few
    seconds of retries (still recovering, or a loaded machine); the start asks for another."""
    (tmp_path / "defs.py").write_text(FIRST_LOAD_WITHOUT_DATABASE)
    port = free_port()
    dagster = str(Path(sys.executable).parent / "dagster")
    location = ["-f", str(tmp_path / "defs.py"), "-d", str(tmp_path)]
    server = subprocess.Popen(
        [dagster, "code-server", "start", *location, "-h", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "TRIED": str(tmp_path / "tried")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not code_server_ready("127.0.0.1", port):
            assert time.monotonic() < deadline, "the code server never loaded its location"
            time.sleep(0.2)
        assert (tmp_path / "tried").read_text() == "once"
    finally:
        server.kill()
        server.wait()


def test_a_daemon_whose_database_did_not_answer_is_not_ready_yet(monkeypatch, tmp_path):
    import dagster as dg
    from dagster_postgres.utils import DagsterPostgresException

    def unreachable(home):
        raise DagsterPostgresException("too many retries for DB connection")

    monkeypatch.setattr(dg.DagsterInstance, "from_config", unreachable)
    assert daemon_ready(os.getpid(), tmp_path) is False


def test_a_missing_package_is_named_where_it_cannot_be_installed(monkeypatch):
    monkeypatch.setattr(postgres.os, "geteuid", lambda: 1000)  # not root: nothing is installed
    with pytest.raises(StackError, match=r"PgBouncer \(.*\) is not installed: install the `pg"):
        postgres.installed("pgbouncer", lambda: None, "PgBouncer (no pgbouncer on PATH)")


def test_a_server_killed_alone_has_the_workers_it_left_stopped_before_it_starts_again(
    supervisor: Supervisor,
):
    # As MLflow's server does: a parent whose child holds the port; it exits if its child cannot.
    port = free_port()
    child = [sys.executable, "-c", listening(port)]
    server = (
        f"import subprocess, sys, time; child = subprocess.Popen({child!r}); time.sleep(1.5); "
        "sys.exit(1) if child.poll() is not None else time.sleep(600)"
    )
    reaped = [sys.executable, "-m", "deploy.stack.reap", "--service", "server"]
    command = [*reaped, "--supervisor", supervisor.url, "--", sys.executable, "-c", server]
    launch(supervisor, Service("server", command, lambda: port_open(port)))
    assert supervisor.start(Service("server", command, lambda: port_open(port)), timeout_s=30)
    first = supervisor.pid("server")
    [worker] = psutil.Process(first).children()
    os.kill(first, signal.SIGKILL)  # the server alone: its worker lives on, holding the port

    deadline = time.monotonic() + 30
    # Restarted, and up past its start period (it exits once its worker cannot bind the port).
    while supervisor.pid("server") in (None, first) or not supervisor.states(["server"])[
        "server"
    ].startswith("RUNNING"):
        assert time.monotonic() < deadline, supervisor.states(["server"])
        time.sleep(0.5)
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    [again] = psutil.Process(supervisor.pid("server")).children()
    assert again.pid != worker.pid


def test_a_service_that_hides_its_environment_is_found_by_its_configuration(tmp_path: Path):
    """nginx writes its process title over its environment: the login's processes are found by
    the configuration file under the stack's folder on the main one's command line, with the
    workers it started, so a crash or a dead supervisord's leftovers leave none of them."""
    from deploy.stack.supervisor import supervised

    supervisor = Supervisor(tmp_path / "stack")
    config = tmp_path / "stack" / "proxy" / "nginx.conf"
    sleep = "import time; time.sleep(60)"
    child = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {sleep!r}]); {sleep}"
    master = subprocess.Popen([sys.executable, "-c", child, "-c", str(config)])
    other = subprocess.Popen([sys.executable, "-c", sleep, "-c", str(tmp_path / "nginx.conf")])
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(master.pid).children():
            assert time.monotonic() < deadline, "the main process started no worker"
            time.sleep(0.1)
        worker = psutil.Process(master.pid).children()[0].pid
        found = {process.pid for process in supervised(supervisor.url)}
        assert found == {master.pid, worker}
        assert {process.pid for process in supervised(supervisor.url, "proxy")} == found
        assert supervised(supervisor.url, "webserver") == []
    finally:
        for process in psutil.Process(master.pid).children(recursive=True):
            process.kill()
        for popen in (master, other):
            popen.kill()
            popen.wait()
