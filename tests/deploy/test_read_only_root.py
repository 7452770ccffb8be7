"""The webserver, the daemon and the code server run with a read-only root file system and the
empty folders the Helm values give them (deploy/helm/values.yaml: `readOnlyRootFilesystem`,
`volumes`, `volumeMounts`); a run, so: tests/deploy/test_read_only_run.py.

Each process starts in a mount namespace of its own (`unshare --mount`, root only): the machine's
root remounted read-only, a fresh tmpfs at each `emptyDir` mount path of the values, the instance
file where the chart mounts its ConfigMap. The webserver and the daemon share their storage, as
the chart's share PostgreSQL: SQLite in a folder outside the namespaces. The code server has the
environment of its pod: the image's and the `flywheel-env` ConfigMap's.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from deploy.stack.processes import free_port

REPO = Path(__file__).resolve().parents[2]
HELM = REPO / "deploy" / "helm"
VALUES = HELM / "values.yaml"
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a mount namespace needs root and unshare on Linux",
)
DAEMONS = {"SENSOR", "SCHEDULER", "QUEUED_RUN_COORDINATOR"}
HEALTH = "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy } } } }"
CODE_SERVER = "dagster-user-deployments"
# The ConfigMap's settings that name its managed services (S3, PostgreSQL, MLflow's server, the
# cluster): the embedded defaults' local files replace them here.
SERVICES = re.compile(
    r"FLYWHEEL_ENV|AWS_.*|FLYWHEEL_LANDING_BUCKET|FLYWHEEL_DVC_REMOTE|FLYWHEEL_WAREHOUSE_.*"
    r"|MLFLOW_.*|FLYWHEEL_TUNING_WORKERS_ON|FLYWHEEL_K8S_NAMESPACE|FLYWHEEL_RETRAINING_STEPS_ON"
)


def writable_paths(component: str) -> list[str]:
    """The mount paths of `component`'s emptyDir volumes in the values (the code server's:
    its user deployment's)."""
    settings = yaml.safe_load(VALUES.read_text())[component]
    if component == CODE_SERVER:
        (settings,) = settings["deployments"]
    assert settings["securityContext"]["readOnlyRootFilesystem"] is True
    empty = {v["name"] for v in settings["volumes"] if "emptyDir" in v}
    return [m["mountPath"] for m in settings["volumeMounts"] if m["name"] in empty]


def image_environment() -> dict[str, str]:
    """The variables deploy/Dockerfile's image sets (`ENV`) but its PATH and VIRTUAL_ENV: the
    image's interpreter is this one."""
    text = (REPO / "deploy" / "Dockerfile").read_text().split("\nFROM ")[-1]
    found: dict[str, str] = {}
    for block in re.findall(r"^ENV (.*?)(?<!\\)$", text, re.MULTILINE | re.DOTALL):
        found |= dict(re.findall(r"([A-Z_]+)=(\S+)", block))
    return {k: v for k, v in found.items() if k not in ("PATH", "VIRTUAL_ENV")}


def pod_environment() -> dict[str, str]:
    """The environment of the code server's and the runs' pods: this process's without its
    flywheel and dbt settings, then the image's, then the ConfigMap's but for its services."""
    data = yaml.safe_load((HELM / "flywheel-env.yaml").read_text())["data"]
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("FLYWHEEL_", "DBT_"))}
    pod = image_environment() | {k: v for k, v in data.items() if not SERVICES.fullmatch(k)}
    return inherited | pod | {"FLYWHEEL_ENV": "local", "FLYWHEEL_LABELING": "files"}


def missing_parent(path: Path) -> str | None:
    """The deepest existing folder above `path` where `path` does not exist; else None."""
    if path.exists():
        return None
    return str(next(parent for parent in path.parents if parent.exists()))


def script(writable: list[str], home: str, command: list[str], storage: Path, shared: bool) -> str:
    """The shell lines that build the pod's file system and start `command` in it, its output
    beside `storage`."""
    log = storage.parent / f"{Path(command[0]).name}.log"
    # Mount points under folders this machine lacks (/opt/dagster): a tmpfs scaffold on the
    # deepest folder it has (/opt), remounted read-only with the root.
    scaffold = sorted({missing_parent(Path(p)) for p in [*writable, home]} - {None, *writable})
    lines = ["set -e", "mount --make-rprivate /"]
    lines += [f"mount -t tmpfs scaffold {shlex.quote(s)}" for s in scaffold]
    # A checkout under an empty folder's path (a clone in /tmp) would vanish under its tmpfs:
    # it is kept aside beside the storage first and put back, read-only, on top of the tmpfs.
    repo, aside = shlex.quote(str(REPO)), shlex.quote(str(storage.parent / "repo"))
    covered = [p for p in writable if REPO.is_relative_to(p)]
    if covered:
        lines += [f"mkdir -p {aside}", f"mount --bind {repo} {aside}"]
    for path in writable:
        lines += [f"mkdir -p {shlex.quote(path)}", f"mount -t tmpfs empty {shlex.quote(path)}"]
    if covered:
        lines += [f"mkdir -p {repo}", f"mount --bind {aside} {repo}"]
        lines += [f"mount -o remount,bind,ro {repo}"]
    lines += [
        f"mkdir -p {home}",
        f"printf {shlex.quote(instance(storage if shared else None))} > {home}/dagster.yaml",
        "mount -o remount,bind,ro /",
        *[f"mount -o remount,ro {shlex.quote(s)}" for s in scaffold],
        # The root is read-only now: this must fail.
        "! touch /usr/.flywheel-probe 2>/dev/null",
        f"export DAGSTER_HOME={home} HOME=/nonexistent",
        f"exec {shlex.join(command)} > {shlex.quote(str(log))} 2>&1",
    ]
    return "\n".join(lines)


def instance(storage: Path | None) -> str:
    """The instance file: storage under `storage`, or under DAGSTER_HOME where None."""
    text = "telemetry:\n  enabled: false\n"
    return text + (f"storage:\n  sqlite:\n    base_dir: {storage}\n" if storage else "")


def start(
    writable: list[str],
    command: list[str],
    storage: Path,
    shared: bool,
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    home = "/opt/dagster/dagster_home"
    text = script(writable, home, command, storage, shared)
    return subprocess.Popen(["unshare", "--mount", "bash", "-c", text], cwd=REPO, env=env)


def healthy_daemons(url: str, deadline: float, processes: list[subprocess.Popen]) -> set[str]:
    """The daemons whose heartbeat the webserver reads as healthy by `deadline` (or until a
    process exits)."""
    found: set[str] = set()
    while time.monotonic() < deadline and not found >= DAEMONS:
        if any(process.poll() is not None for process in processes):
            break
        try:
            reply = requests.post(url, json={"query": HEALTH}, timeout=5).json()
            statuses = reply["data"]["instance"]["daemonHealth"]["allDaemonStatuses"]
            found = {s["daemonType"] for s in statuses if s["healthy"]}
        except (requests.RequestException, KeyError, TypeError):
            pass
        time.sleep(1)
    return found


def play(tmp_path: Path, keep_writable: bool, shared: bool = True) -> tuple[set[str], str]:
    """Start the daemon and the webserver as the values' pods (their storage shared, or each
    in its DAGSTER_HOME); the healthy daemons the webserver reports and the two logs."""
    port = free_port()
    webserver = [str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port)]
    daemon = [str(BIN / "dagster-daemon"), "run"]
    # The storage and the logs: a folder outside the namespaces' read-only root (/dev/shm).
    folder = Path("/dev/shm") / f"flywheel-ro-{os.getpid()}-{tmp_path.name}"
    (folder / "storage").mkdir(parents=True)
    processes: list[subprocess.Popen] = []
    try:
        for component, command in (
            ("dagsterDaemon", [*daemon, "--empty-workspace"]),
            ("dagsterWebserver", [*webserver, "--empty-workspace"]),
        ):
            writable = writable_paths(component) if keep_writable else []
            processes.append(start(writable, command, folder / "storage", shared))
        url = f"http://127.0.0.1:{port}/graphql"
        found = healthy_daemons(url, time.monotonic() + 60, processes)
        return found, "\n".join(p.read_text() for p in sorted(folder.glob("*.log")))
    finally:
        for process in processes:
            process.kill()
            process.wait()
        shutil.rmtree(folder)


@pytest.mark.integration
def test_webserver_and_daemon_run_on_a_read_only_root_with_the_values_empty_folders(tmp_path):
    assert writable_paths("dagsterWebserver") == ["/tmp", "/opt/dagster/dagster_home"]
    found, logs = play(tmp_path, keep_writable=True)
    assert found >= DAEMONS, logs


@pytest.mark.integration
def test_the_root_is_read_only_to_them(tmp_path):
    """An instance that keeps its storage in DAGSTER_HOME, without the empty folders, cannot
    start there: the checks above ran on a root the processes could not write."""
    found, logs = play(tmp_path, keep_writable=False, shared=False)
    assert found == set()
    assert "Read-only file system" in logs


def serves(port: int, deadline: float, process: subprocess.Popen) -> bool:
    """Whether the code server on `port` answers gRPC's health check by `deadline` (or until
    it exits)."""
    check = [str(BIN / "dagster"), "api", "grpc-health-check", "-p", str(port)]
    while time.monotonic() < deadline and process.poll() is None:
        if subprocess.run(check, capture_output=True).returncode == 0:
            return True
        time.sleep(2)
    return False


@pytest.mark.integration
def test_the_code_server_serves_on_a_read_only_root_with_the_values_empty_folders(tmp_path):
    """The chart's command for the user deployment, with its pod's environment."""
    writable = writable_paths(CODE_SERVER)
    assert writable == ["/tmp"]
    (deployment,) = yaml.safe_load(VALUES.read_text())[CODE_SERVER]["deployments"]
    port = free_port()
    command = [str(BIN / "dagster"), "code-server", "start", "-h", "127.0.0.1", "-p", str(port)]
    folder = Path("/dev/shm") / f"flywheel-ro-code-{os.getpid()}-{tmp_path.name}"
    (folder / "storage").mkdir(parents=True)
    process = start(
        writable,
        command + deployment["codeServerArgs"],
        folder / "storage",
        True,
        pod_environment(),
    )
    try:
        answered = serves(port, time.monotonic() + 180, process)
        assert answered, (folder / "dagster.log").read_text()
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(folder)
