"""Kill a real run process with SIGKILL at a chosen step, and compare warehouses after it."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from pipelines.lib.landing_zone import LocalLandingZone, changed_files
from pipelines.task.contracts import default_task_name

REPO = Path(__file__).resolve().parents[2]
DAGSTER_YAML = REPO / "deploy" / "dagster.yaml"
# Columns that record when something was processed: they differ between any two runs.
PROCESSING_TIMES = {"_ingested_at", "quarantined_at", "scored_at", "exported_at", "computed_at"}


@contextmanager
def instance_at(home: str) -> Iterator[dg.DagsterInstance]:
    """The instance in folder `home`, opened as DAGSTER_HOME's (the deployed dagster.yaml's event
    log is DAGSTER_HOME's)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", home)
        instance = dg.DagsterInstance.from_config(home)
    with instance:
        yield instance


def copy_world(source: Path, target: Path) -> dict[str, str]:
    """Copy a test flywheel (its home, Dagster instance and DVC checkout) under `target`, give
    the instance the deployed dagster.yaml (pools, run retries), and return its environment."""
    for name in ("flywheel", "dagster", "checkout"):
        shutil.copytree(source / name, target / name, symlinks=True)
    shutil.copy(DAGSTER_YAML, target / "dagster" / "dagster.yaml")
    home = target / "flywheel"
    # A local file's version includes its inode, which a copy changes: mark the copies seen, or
    # the landing sensor would ask to ingest every day again.
    files = LocalLandingZone(root=str(home / "landing" / default_task_name())).list_files()
    (home / "sim" / "landing_sensor.cursor.json").write_text(changed_files(files, None)[1])
    return {
        "FLYWHEEL_ENV": "local",
        "FLYWHEEL_HOME": str(home),
        "FLYWHEEL_WAREHOUSE_PATH": str(home / "warehouse.duckdb"),
        "FLYWHEEL_DVC_REPO": str(target / "checkout" / "data"),
        "DAGSTER_HOME": str(target / "dagster"),
    }


# Holds a DuckDB file's write lock until killed, as dbt mid-build or another writer does.
LOCK_HOLDER = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("locked", flush=True)
time.sleep(600)
"""


@contextmanager
def lock_holder(database: Path) -> Iterator[subprocess.Popen]:
    """A subprocess holding `database`'s write lock (taken before this yields) until it ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(database)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def kill_at_step(
    script: str,
    args: list[str],
    env: dict[str, str],
    job: str,
    step: str,
    after_s: float = 0.0,
    partition: str | None = None,
) -> dg.DagsterRun:
    """Run `script` in a fresh interpreter; SIGKILL it `after_s` seconds after a run of `job`
    (for `partition`, if given) starts step `step` in the instance at DAGSTER_HOME. Returns that
    run as the instance has it."""
    with instance_at(env["DAGSTER_HOME"]) as instance:
        before = {r.dagster_run.run_id for r in instance.get_run_records()}
    # A file, not a pipe: a child that logs more than a pipe holds would block on it.
    with tempfile.TemporaryFile() as errors, instance_at(env["DAGSTER_HOME"]) as instance:
        child = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            cwd=REPO,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        deadline = time.monotonic() + 300
        while (run_id := _run_at_step(instance, job, step, before, partition)) is None:
            if child.poll() is not None:
                errors.seek(0)
                raise AssertionError(
                    f"the child ended (exit {child.returncode}) before {job} reached {step}:\n"
                    + errors.read().decode(errors="replace")[-3000:]
                )
            if time.monotonic() > deadline:
                child.kill()
                raise AssertionError(f"{job} did not reach step {step} in 300 s")
            time.sleep(0.1)
        time.sleep(after_s)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
        return instance.get_run_by_id(run_id)


def _run_at_step(
    instance: dg.DagsterInstance, job: str, step: str, before: set[str], partition: str | None
) -> str | None:
    tags = {"dagster/partition": partition} if partition else None
    for record in instance.get_run_records(dg.RunsFilter(job_name=job, tags=tags), limit=5):
        run_id = record.dagster_run.run_id
        if run_id in before:
            continue
        starts = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
        if any(event.step_key == step for event in starts):
            return run_id
    return None


def warehouse_snapshot(path: Path) -> dict[str, list[tuple]]:
    """Every table's rows (sorted, processing times left out), by schema-qualified name."""
    with duckdb.connect(str(path), read_only=True) as con:
        tables = con.execute(
            "select table_schema, table_name from information_schema.tables "
            "where table_type = 'BASE TABLE' order by 1, 2"
        ).fetchall()
        snapshot = {}
        for schema, table in tables:
            columns = [
                c
                for (c,) in con.execute(
                    "select column_name from information_schema.columns "
                    "where table_schema = ? and table_name = ? order by ordinal_position",
                    [schema, table],
                ).fetchall()
                if c not in PROCESSING_TIMES
            ]
            select = ", ".join(f'"{c}"' for c in columns)
            rows = con.execute(f'select {select} from "{schema}"."{table}" order by all')
            snapshot[f"{schema}.{table}"] = rows.fetchall()
    return snapshot


def assert_same_warehouse(found: dict[str, list[tuple]], expected: dict[str, list[tuple]]) -> None:
    """The same tables with the same rows; floats equal to 1e-6 relative (the model scores in
    float32, and two processes sum in different orders). Names the first differing row."""
    assert sorted(found) == sorted(expected)
    for table, rows in expected.items():
        assert len(found[table]) == len(rows), (table, len(found[table]), len(rows))
        for got, want in zip(found[table], rows, strict=True):
            assert len(got) == len(want) and all(map(_same, got, want)), (table, got, want)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (a != a and b != b)
    return a == b
