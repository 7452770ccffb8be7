"""The same loop, whoever drives it.

The simulation plays the same days twice: in process on the embedded defaults (the driver ticks
the sensors and executes their runs itself), and through a production-shaped stack (the real
daemon evaluates the sensors, the queue launches every run as its own process, on Postgres, S3
and an MLflow server). The first model is trained in both, on the fourth day.
They must agree on every run (job, partition, what asked for it, its run key), every dataset's
DVC hash and every promotion decision: the runs are deterministic.

One difference is named and masked: a run key of the landing or inbox sensor holds each file's
version, a content hash for a local file and an ETag on S3 (the same file, two backends).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psutil
import pytest
import yaml

from deploy.stack import holders
from deploy.stack.stack import SERVICES, Stack
from pipelines.lib.datasets import init_repository
from tests.deploy import runs_host
from tests.deploy.stackctl import crash, passable, stack, stack_env

REPO = Path(__file__).resolve().parents[2]
# The operators' webserver and the viewers' read-only one: the instance's readers.
WEBSERVERS = ("webserver", "webserver_viewer")
# The first model after four days (three of them labelled: train, validation, test), on
# Saturday 03-02; Sunday's labels come in, and Sunday night's tick of the weekly schedule
# (submitted by the simulator's calendar through the daemon's queue) retrains on them: the task
# played is the flagship's with a cooldown of one day (`cooldown_days`), so the schedule does not
# wait a week for the first champion to age (the retraining after it is what the test follows).
START, DAYS, BOOTSTRAP = "2013-02-27", 5, 4
COOLDOWN_DAYS = 1
BUDGET = {
    "FLYWHEEL_TRIALS": "1",
    "FLYWHEEL_MAX_EPOCHS": "2",
    "FLYWHEEL_VALIDATION_DAYS": "1",
    "FLYWHEEL_TEST_DAYS": "1",
}

pytestmark = [
    pytest.mark.skipif(
        sys.platform != "linux", reason="the stack runs PostgreSQL from the distribution's packages"
    ),
    # One stack at a time under pytest-xdist (`make test`): each starts eight processes.
    pytest.mark.xdist_group("stack"),
]


def python(module: str, args: list[str], env: dict[str, str], timeout_s: int) -> str:
    """Run `python -m module args` with `env`; its standard output (the test fails, showing
    both outputs, on a non-zero exit)."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, f"{module} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def simulation_args(*flags: str) -> list[str]:
    """`python -m sim run` with the days this module plays."""
    days = ["--start", START, "--days", str(DAYS), "--bootstrap-days", str(BOOTSTRAP)]
    return ["sim", "run", *days, *flags]


def simulation(env: dict[str, str], *flags: str) -> dict:
    """Play the days with `env`, then the loop it left on its instance."""
    module, *args = simulation_args(*flags)
    python(module, args, env, timeout_s=1500)
    return summary(env)


@contextmanager
def simulation_in_background(env: dict[str, str], output: Path) -> Iterator[Callable[[], dict]]:
    """Start playing the days with `env`; inside, a call waits for the simulation to end and returns
    the loop it left (the test fails, showing its output, if it failed). Killed if still running
    on the way out."""
    with output.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", *simulation_args()],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def finished() -> dict:
        returncode = process.wait(timeout=1500)
        assert returncode == 0, f"sim run failed:\n{output.read_text()}"
        return summary(env)

    try:
        yield finished
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def task_file(tmp_path_factory) -> Path:
    """The flagship task with the monitoring's cooldown cut to `COOLDOWN_DAYS`."""
    task = yaml.safe_load((REPO / "pipelines" / "tasks" / "flights.yaml").read_text())
    assert task["monitoring"]["cooldown_days"] > COOLDOWN_DAYS
    task["monitoring"]["cooldown_days"] = COOLDOWN_DAYS
    path = tmp_path_factory.mktemp("task") / "flights.yaml"
    path.write_text(yaml.safe_dump(task, sort_keys=False))
    return path


def inventory(env: dict[str, str], scratch: Path) -> dict:
    """What the stack's stores hold, read back (tests/deploy/store_inventory.py)."""
    out = python("tests.deploy.store_inventory", [str(scratch)], env, timeout_s=300)
    return json.loads(out.splitlines()[-1])


def summary(env: dict[str, str]) -> dict:
    """The loop on the instance of `env`."""
    out = python("tests.deploy.loop_summary", [], env, timeout_s=300)
    return json.loads(out.splitlines()[-1])


def embedded_env(home: Path, task_file: Path) -> dict[str, str]:
    """A fresh embedded flywheel under `home`: its environment."""
    (home / "dagster").mkdir()
    (home / "dagster" / "dagster.yaml").write_text((REPO / "deploy" / "dagster.yaml").read_text())
    init_repository(home / "data")
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("FLYWHEEL_", "DAGSTER_"))},
        **BUDGET,
        "FLYWHEEL_TASK": str(task_file),
        "FLYWHEEL_ENV": "local",
        "FLYWHEEL_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "FLYWHEEL_DVC_REPO": str(home / "data"),
    }


@pytest.fixture(scope="module")
def played(tmp_path_factory, task_file: Path) -> Iterator[dict[str, dict]]:
    """The days played both ways: `in_process` and `through_the_daemon`.

    The in-process simulation plays in the background while the stack starts and the daemon plays,
    not before them: the stack's processes mostly wait on the daemon's loop and queue, so the two
    overlap instead of adding up. Neither shares anything with the other."""
    home = tmp_path_factory.mktemp("embedded")
    with simulation_in_background(
        embedded_env(home, task_file), home / "sim-run.out"
    ) as in_process:
        daemon = tmp_path_factory.mktemp("stack")
        with stack_played(daemon, task_file) as through_the_daemon:
            yield {"in_process": in_process(), "through_the_daemon": through_the_daemon}


@pytest.fixture(scope="module")
def in_process(played: dict[str, dict]) -> dict:
    return played["in_process"]


@pytest.fixture(scope="module")
def through_the_daemon(played: dict[str, dict]) -> dict:
    return played["through_the_daemon"]


@contextmanager
def stack_played(home: Path, task_file: Path) -> Iterator[dict]:
    """The days played through a stack under `home`, then every process of the stack killed at
    once and the stack started again; stopped on the way out.

    Where the machine allows it (root), the code server, and every run and tuning worker it
    starts, run on a host of their own (tests/deploy/runs_host.py): a network namespace that
    reaches the services by a non-loopback address only, a mount namespace where the stack's
    state is out of sight, an empty working directory."""
    passable(home)
    # The code location's retraining settings come from the shell that starts the stack.
    with pytest.MonkeyPatch.context() as patch, ExitStack() as scope:
        isolated = runs_host.available() is None
        module = "tests.deploy.runs_host" if isolated else "deploy.stack"
        settings = {**BUDGET, "FLYWHEEL_TASK": str(task_file)}
        if isolated:
            namespace = scope.enter_context(runs_host.namespace())
            settings.update(namespace.environment())
        for key, value in settings.items():
            patch.setenv(key, value)
        try:
            stack("up", home, module)
            env = stack_env(home)
            with runs_host.Sightings() as sightings:
                loop = simulation(env, "--daemon")
            supervisor = Stack.of_home(home).supervisor
            runs_apart = None
            if isolated:
                server = supervisor.pid("code_server")
                runs_apart = {
                    "netns": runs_host.netns_id(namespace.name),
                    "seen": sightings.seen,
                    "code_server": runs_host.namespaces(server),
                    "pod_view": sorted(
                        str(p.relative_to(f"/proc/{server}/root{home}"))
                        for p in Path(f"/proc/{server}/root{home}").rglob("*")
                        if not p.is_relative_to(f"/proc/{server}/root{home}/.pod")
                    ),
                    # What the stack gives the code server and its runs (its `stack.env`).
                    "settings": (home / "stack" / "stack.env").read_text(),
                }
            services = {supervisor.pid(name) for name in SERVICES}
            beside_mlflow = [
                " ".join(child.cmdline())
                for child in psutil.Process(supervisor.pid("mlflow")).children(True)
            ]
            # Every secret of the stack looked for wherever the stack could show it, with one
            # leak planted: a process whose command line holds the warehouse's password.
            sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
            planted = subprocess.Popen([*sleeper, env["FLYWHEEL_WAREHOUSE_PASSWORD"]])
            try:
                out = python("tests.deploy.stack_secret_scan", [str(home)], env, 600)
                scan = json.loads(out.splitlines()[-1])
            finally:
                planted.kill()
                planted.wait()
            # Every process of the stack killed at once, as by a power cut, then `up` again:
            # the same state (runs in Postgres, objects in the store, sensor cursors), every
            # object, dataset version and model version still there and readable.
            stores = inventory(env, home / "before")
            killed = crash(home)
            stack("up", home, module)
            yield {
                "runs_apart": runs_apart,
                **loop,
                "services": sorted(services),
                "beside_mlflow": beside_mlflow,
                "killed": killed,
                "secret_scan": {**scan, "planted_pid": planted.pid},
                "stores": stores,
                "stores_after_crash": inventory(env, home / "after"),
                "after_restart": summary(env),
            }
        finally:
            stack("down", home, module)


def test_the_daemon_driven_stack_plays_the_same_loop_as_the_in_process_driver(
    in_process: dict, through_the_daemon: dict
):
    runs = in_process["runs"]
    jobs = {job for job, *_ in runs}
    assert jobs == {
        "dimension_warehouse_job",
        "daily_warehouse_job",
        "label_export_job",
        "label_import_job",
        "retraining_job",
    }
    origins = [origin for job, _, origin, _ in runs if job == "retraining_job"]
    assert origins == ["operator:bootstrap", "retraining_schedule"]
    assert through_the_daemon["runs"] == runs
    assert len(in_process["datasets"]) == 2
    assert through_the_daemon["datasets"] == in_process["datasets"]
    [(version, decision, _), (challenger, _, _)] = in_process["decisions"]
    assert (version, decision, challenger) == ("1", "promoted", "2")
    assert through_the_daemon["decisions"] == in_process["decisions"]


def test_in_process_every_run_shares_one_process_and_through_the_daemon_each_has_its_own(
    in_process: dict, through_the_daemon: dict
):
    # The embedded instance: Dagster's SQLite storage (its event log with connections kept).
    assert in_process["storage"] == ["SqliteRunStorage", "PooledSqliteEventLogStorage"]
    assert len({pid for pids in in_process["pids"] for pid in pids}) == 1
    assert through_the_daemon["storage"] == ["PostgresRunStorage", "PostgresEventLogStorage"]
    pids = [pid for pids in through_the_daemon["pids"] for pid in pids]
    assert len(pids) == len(through_the_daemon["runs"]) == len(set(pids))
    assert not set(pids) & set(through_the_daemon["services"])
    # The MLflow server's own workers only: no consumers of MLflow's job queue (its GenAI jobs,
    # which flywheel never submits; they took about a tenth of this stack's CPU when they ran).
    assert through_the_daemon["beside_mlflow"]
    assert not [c for c in through_the_daemon["beside_mlflow"] if "huey" in c]


def test_a_stack_killed_at_once_and_started_again_keeps_the_loop_and_every_object(
    through_the_daemon: dict,
):
    assert through_the_daemon["killed"] > len(SERVICES)  # supervisord, services, their children
    before, after_crash = through_the_daemon["stores"], through_the_daemon["stores_after_crash"]
    # Landing files, labels, DVC's files, MLflow's artifacts: each object, byte for byte (ETag).
    assert len(before["objects"]) > 50
    assert after_crash["objects"] == before["objects"]
    # Every dataset version fetched from the remote into an empty cache, every model loaded.
    assert len(before["datasets"]) == 2
    assert after_crash["datasets"] == before["datasets"]
    assert list(before["models"]) == ["1", "2"]
    assert after_crash["models"] == before["models"]
    after = through_the_daemon["after_restart"]
    assert {k: after[k] for k in ("runs", "datasets", "decisions")} == {
        k: through_the_daemon[k] for k in ("runs", "datasets", "decisions")
    }


def test_no_secret_of_the_stack_is_in_sight_but_the_planted_leak(through_the_daemon: dict):
    scan = through_the_daemon["secret_scan"]
    # What was searched: the stack's secrets, every run of the loop and its compute logs.
    assert {"DAGSTER_PG_PASSWORD", "FLYWHEEL_WAREHOUSE_PASSWORD", "FLYWHEEL_OPTUNA_STORAGE"} <= set(
        scan["secrets"]
    )
    assert "AWS_SECRET_ACCESS_KEY" in scan["secrets"]
    assert scan["runs"] == len(through_the_daemon["runs"]) and scan["compute_log_files"] > 10
    pid = scan["planted_pid"]
    assert scan["hits"] == [f"process {pid} (python) command line: FLYWHEEL_WAREHOUSE_PASSWORD"]
    # Each part of the stack holds only what its table allows (deploy/stack/holders.py): the
    # warehouse's password the code server and its runs alone, the object store's key the parts
    # that read or write the bucket; no process the table does not name holds either.
    held = scan["held"]
    assert set(held) == {"supervisord", *SERVICES} - holders.UNREADABLE
    holding = {
        secret: {holder for holder, found in held.items() if secret in found}
        for secret in ("FLYWHEEL_WAREHOUSE_PASSWORD", "AWS_SECRET_ACCESS_KEY")
    }
    assert holding == {
        "FLYWHEEL_WAREHOUSE_PASSWORD": {"code_server"},
        # The runs' key of the object store: the other parts hold keys of their own prefixes.
        "AWS_SECRET_ACCESS_KEY": {"code_server"},
    }


def test_every_run_ran_on_a_host_that_shares_nothing_with_the_stack_but_the_network(
    through_the_daemon: dict,
):
    apart = through_the_daemon["runs_apart"]
    if apart is None:
        pytest.skip(runs_host.available())
    netns, (server_net, server_mounts) = apart["netns"], apart["code_server"]
    assert server_net == netns
    assert server_mounts != runs_host.namespaces(os.getpid())[1]
    # Each run's process, seen while it ran: in the code server's network and mount namespaces.
    pids = [pid for pids in through_the_daemon["pids"] for pid in pids]
    seen = apart["seen"]
    assert len(pids) == len(through_the_daemon["runs"]) and not set(pids) - set(seen)
    assert {seen[pid][:2] for pid in pids} == {(netns, server_mounts)}
    # What a run could see of the stack's files: the two a pod has mounted, nothing else (the
    # databases' files, the objects, the logs, the settings file); and the dataset's working
    # copy, which the first retraining made for itself (its versions are in the remote).
    view = apart["pod_view"]
    assert "stack/checkout/data/datasets/flights.dvc" in view
    assert [p for p in view if not p.startswith("stack/checkout")] == [
        "stack",
        "stack/dagster",
        "stack/dagster/dagster.yaml",
        "stack/tls",
        "stack/tls/bundle.pem",
        "stack/tls/ca.crt",
    ]
    # The services are reached by the link's address alone, none on the loopback.
    lines = apart["settings"].splitlines()
    assert len(lines) > 20
    assert not [line for line in lines if "127.0.0.1" in line or "localhost" in line]
