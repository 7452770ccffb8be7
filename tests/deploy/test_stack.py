"""The production-shaped stack: real PostgreSQL, S3 endpoint, MLflow server, code server, daemon.

Started by the project's own command (`python -m deploy.stack up`, what `make stack-up` runs)
in a fresh FLYWHEEL_HOME, fed landing days through S3, and left to the daemon: the landing
sensor's runs wait in the queue and each is launched as its own process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from sim.nycflights import load

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DAYS = ("2013-01-01", "2013-01-02")

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the stack runs PostgreSQL from the distribution's packages"
)


def passable(folder: Path) -> None:
    """Let other users (PostgreSQL's server user) pass through the folders above `folder`."""
    for parent in [folder, *folder.parents]:
        if str(parent) in ("/", "/tmp"):
            break
        if parent.stat().st_uid == os.geteuid():
            parent.chmod(parent.stat().st_mode | 0o001)


def stack_env(home: Path) -> dict[str, str]:
    """This process's environment with the stack's settings (`stack.env`) over it."""
    env = {**os.environ, "FLYWHEEL_HOME": str(home)}
    for line in (home / "stack" / "stack.env").read_text().splitlines():
        key, _, value = line.partition("=")
        env[key] = value
    return env


def stack(verb: str, home: Path) -> str:
    """Run `python -m deploy.stack <verb>`; its output (the test fails on a non-zero exit)."""
    env = {**os.environ, "FLYWHEEL_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "deploy.stack", verb],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"stack {verb} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Iterator[Path]:
    """A FLYWHEEL_HOME with the stack up in it; the stack is stopped after the module."""
    home = tmp_path_factory.mktemp("stack-home")
    passable(home)
    try:
        stack("up", home)
        yield home
    finally:
        stack("down", home)


def runs(env: dict[str, str]) -> list[dict]:
    """The stack instance's runs (job, status, tags, the pid its steps ran in), oldest first."""
    script = """
import json, re, dagster as dg
out = []
with dg.DagsterInstance.get() as instance:
    for record in instance.get_run_records(dg.RunsFilter(), ascending=True):
        run = record.dagster_run
        pids = [
            int(m.group(1))
            for e in instance.all_logs(run.run_id)
            if (m := re.search(r"steps in process \\(pid: (\\d+)\\)", e.user_message or ""))
        ]
        out.append({"job": run.job_name, "status": run.status.value, "tags": dict(run.tags),
                    "pids": pids, "storage": type(instance.run_storage).__name__,
                    "events": type(instance.event_log_storage).__name__})
print(json.dumps(out))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])


def wait_for(env: dict[str, str], done, timeout_s: float) -> list[dict]:
    """Poll the runs until `done(runs)` holds; fail naming the runs after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = runs(env)
        if done(seen):
            return seen
        failed = [r for r in seen if r["status"] == "FAILURE"]
        assert time.monotonic() < deadline and not failed, [
            (r["job"], r["tags"].get("dagster/partition"), r["status"]) for r in seen
        ]
        time.sleep(3)


def test_the_daemon_launches_the_landing_sensors_runs_each_in_its_own_process(home: Path):
    env = stack_env(home)
    landed = subprocess.run(
        [str(BIN / "flywheel-sim"), "advance", "--days", "2", "--start", DAYS[0], "--env", "prod"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "into s3://flywheel/landing" in landed.stdout
    workspace = str(home / "stack" / "workspace.yaml")
    subprocess.run(
        [str(BIN / "dagster"), "sensor", "start", "landing_sensor", "-w", workspace],
        env=env,
        capture_output=True,
        check=True,
    )

    def all_succeeded(seen: list[dict]) -> bool:
        days = {r["tags"].get("dagster/partition") for r in seen if r["status"] == "SUCCESS"}
        return set(DAYS) <= days and any(
            r["job"] == "reference_warehouse_job" and r["status"] == "SUCCESS" for r in seen
        )

    seen = wait_for(env, all_succeeded, timeout_s=420)

    assert {r["storage"] for r in seen} == {"PostgresRunStorage"}
    assert {r["events"] for r in seen} == {"PostgresEventLogStorage"}
    assert all(r["tags"].get("dagster/sensor_name") == "landing_sensor" for r in seen)
    pids = [pid for r in seen for pid in r["pids"]]
    services = {
        int(re.search(r'"pid": (\d+)', p.read_text()).group(1))
        for p in (home / "stack" / "pids").glob("*.json")
    }
    # One process per run, none of them a service of the stack.
    assert len(pids) == len(seen) == len(set(pids))
    assert not set(pids) & services

    source = load()
    stack("down", home)  # the warehouse file is DuckDB's: read it with nothing else open
    with duckdb.connect(str(home / "stack" / "warehouse.duckdb"), read_only=True) as con:
        counts = dict(
            con.execute(
                "select cast(_landing_date as varchar), count(*) from raw.flights group by 1"
            ).fetchall()
        )
    assert counts == {day: len(source.day("flights", day)) for day in DAYS}

    # Up again: the same state (runs in Postgres, objects in S3, the sensor's cursor) resumes.
    out = stack("up", home)
    assert "restored" in out
    assert len(runs(env)) == len(seen)
    status = stack("status", home)
    assert "stopped" not in status, status
