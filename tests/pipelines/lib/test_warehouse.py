"""The warehouse through Dagster: exact feature rows, blocking checks, no leakage, no collisions."""

import json
import os
import signal
import subprocess
import sys
from datetime import date, timedelta
from importlib.metadata import version
from pathlib import Path

import dagster as dg
import dagster_dbt.core.resource
import duckdb
from packaging.version import Version

from pipelines.lib.dbt import (
    KEEP_TARGETS_ENV,
    PARTIAL_PARSE_FILE,
    WINDOW_ENV_VARS,
    FlywheelDbtCliResource,
    build_command,
    date_window_env,
    dbt_executable,
    dbt_project,
    seed_parse_state,
)
from pipelines.lib.warehouse import DuckDBWarehouse
from sim.world.replay import land_days
from tests.pipelines.conftest import source_rows, source_table
from tests.pipelines.killing import instance_at

REPO = Path(__file__).resolve().parents[3]
FEATURES = "select * from fct_flight_features where flight_date = '{day}' order by flight_id"


def days(first: str, n: int) -> list[str]:
    start = date.fromisoformat(first)
    return [(start + timedelta(days=i)).isoformat() for i in range(n)]


def run_range(flywheel, first: str, last: str) -> dg.ExecuteInProcessResult:
    """One run over a partition range, as a single-run backfill launches it."""
    return flywheel.defs.resolve_job_def("daily_warehouse_job").execute_in_process(
        instance=flywheel.instance,
        tags={
            "dagster/asset_partition_range_start": first,
            "dagster/asset_partition_range_end": last,
        },
    )


def add_labels(flywheel, flight_days: list[str], known_day: str) -> int:
    """Record outcomes of the flights of `flight_days` as known at noon UTC on `known_day`."""
    flights = source_table("flights")
    flights = flights.assign(flight_date=pd_dates(flights))
    chosen = flights[flights.flight_date.isin(flight_days)]
    rows = [
        (
            f"{r.flight_date}_{r.carrier}{r.flight}_{r.origin}",
            bool(r.arr_delay >= 15),
            f"{known_day} 12:00:00",
        )
        for r in chosen.itertuples()
        if r.arr_delay == r.arr_delay  # cancelled flights have no outcome here
    ]
    with duckdb.connect(str(flywheel.warehouse)) as con:
        con.executemany(
            "insert into raw.flight_labels (flight_id, is_late, known_at) values (?, ?, ?)", rows
        )
    return len(rows)


def pd_dates(frame):
    return (
        frame.year.astype(str)
        + "-"
        + frame.month.astype(str).str.zfill(2)
        + "-"
        + frame.day.astype(str).str.zfill(2)
    )


def test_feature_mart_has_one_row_per_flight_and_checks_pass(flywheel):
    land_days(flywheel.zone, [date(2013, 1, 1), date(2013, 1, 2)])
    flywheel.run("dimension_warehouse_job")
    results = [flywheel.run("daily_warehouse_job", d) for d in ("2013-01-01", "2013-01-02")]
    for day in ("2013-01-01", "2013-01-02"):
        n = flywheel.scalar(f"select count(*) from fct_flight_features where flight_date = '{day}'")
        assert n == source_rows("flights", day)
    checks = [e for r in results for e in r.get_asset_check_evaluations()]
    assert checks and all(c.passed for c in checks)
    fct_checks = {
        c.check_name
        for c in checks
        if c.asset_key == dg.AssetKey(["flights", "fct_flight_features"])
    }
    assert "unique_fct_flight_features_flight_id" in fct_checks
    specs = {
        s.name: s.blocking
        for a in flywheel.defs.assets
        if isinstance(a, dg.AssetsDefinition)
        for s in a.check_specs
    }
    assert specs["unique_fct_flight_features_flight_id"] is True  # protects training data
    assert any(blocking is False for blocking in specs.values())  # warnings do not block
    # The day's flights are checked against the day's flights; the labels' relationship to the
    # flights reads every label and every flight, and is the training build's test, not a day's.
    assert "relationships_in_window_fct_flight_features_flight_id" in " ".join(fct_checks)
    tests_run = " ".join(str(e.event_specific_data) for r in results for e in r.all_events)
    assert "relationships_stg_labels__flight_labels" not in tests_run
    add_labels(flywheel, ["2013-01-01"], known_day="2013-01-02")
    training = flywheel.run("retraining_job", assets=["fct_labelled_flights"])
    tests_run = " ".join(str(e.event_specific_data) for e in training.all_events)
    assert "relationships_stg_labels__flight_labels" in tests_run


def test_features_of_a_day_do_not_change_when_later_days_arrive(flywheel):
    land_days(flywheel.zone, [date(2013, 1, 1) + timedelta(days=i) for i in range(3)])
    flywheel.run("dimension_warehouse_job")
    add_labels(flywheel, ["2013-01-01"], known_day="2013-01-02")
    add_labels(flywheel, ["2013-01-02"], known_day="2013-01-03")  # known during day D itself
    run_range(flywheel, "2013-01-01", "2013-01-03")
    day_d = FEATURES.format(day="2013-01-03")
    before = flywheel.sql(day_d)
    assert len(before) == source_rows("flights", "2013-01-03")
    rated = flywheel.scalar(
        "select count(route_late_rate) from fct_flight_features where flight_date = '2013-01-03'"
    )
    assert rated > 0  # labels known before D do feed D's features

    land_days(flywheel.zone, [date(2013, 1, 4), date(2013, 1, 5)])
    add_labels(flywheel, ["2013-01-03", "2013-01-04"], known_day="2013-01-05")
    run_range(flywheel, "2013-01-04", "2013-01-05")
    flywheel.run("daily_warehouse_job", "2013-01-03")  # rebuilt with everything now known
    assert flywheel.sql(day_d) == before


def test_two_partitions_materialized_at_once_both_complete(flywheel):
    land_days(flywheel.zone, [date(2013, 1, 1), date(2013, 1, 2)])
    flywheel.run("dimension_warehouse_job")
    dagster_home = flywheel.home / "dagster"
    dagster_home.mkdir(parents=True)
    (dagster_home / "dagster.yaml").write_text((REPO / "deploy" / "dagster.yaml").read_text())
    with instance_at(str(dagster_home)):
        pass  # storage made once, as by setup
    env = os.environ | {"DAGSTER_HOME": str(dagster_home)}
    # The daily assets only: downstream of them are labeling, datasets and training.
    select = 'key:"flights/raw_flights" or key:"flights/raw_weather" or tag:"daily"'
    procs = [
        subprocess.Popen(
            [
                Path(sys.executable).with_name("dagster"),
                "asset",
                "materialize",
                "-m",
                "pipelines.definitions",
                "-a",
                "defs",
                "--select",
                select,
                "--partition",
                day,
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for day in ("2013-01-01", "2013-01-02")
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    for day in ("2013-01-01", "2013-01-02"):
        for table, feed in (("raw.flights", "flights"), ("raw.weather", "weather")):
            where = f"_landing_date = '{day}'"
            assert flywheel.scalar(f"select count(*) from {table} where {where}") == source_rows(
                feed, day
            )
        n = flywheel.scalar(f"select count(*) from fct_flight_features where flight_date = '{day}'")
        assert n == source_rows("flights", day)


def dbt_event_names(log: Path) -> set[str]:
    """The names of the events in a dbt.log written with JSON lines."""
    lines = log.read_text().splitlines()
    return {json.loads(line)["info"]["name"] for line in lines if line.startswith("{")}


def test_a_partition_run_builds_only_its_days_and_reparses_nothing(flywheel, tmp_path, monkeypatch):
    target = tmp_path / "dbt-target"  # the seed and the invocations' folders, as dagster-dbt
    monkeypatch.setenv("DBT_TARGET_PATH", str(target))
    monkeypatch.setenv(KEEP_TARGETS_ENV, "1")
    for name in WINDOW_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    land_days(flywheel.zone, [date(2013, 1, 1), date(2013, 1, 2)])
    flywheel.run("dimension_warehouse_job")  # parses everything: no parse state yet

    flywheel.run("daily_warehouse_job", "2013-01-02")
    built = flywheel.sql("select distinct flight_date from fct_flight_features")
    assert built == [(date(2013, 1, 2),)]  # the window reached dbt: day 1 is landed, not built

    result = flywheel.run("daily_warehouse_job", "2013-01-01")
    [log] = target.glob(f"daily_dbt_models-{result.run_id[:7]}-*/dbt.log")
    names = dbt_event_names(log)
    # dbt runs in the run's process on the manifest it parsed for its first command: this one
    # parsed nothing (not even a partial parse), yet built and tested the day.
    assert "LogModelResult" in names and "LogTestResult" in names
    assert not {name for name in names if "Pars" in name}, names
    assert (log.parent / "run_results.json").exists()  # a kept folder has dbt's artifacts
    assert not set(WINDOW_ENV_VARS) & set(os.environ)  # set for the dbt command only
    n = flywheel.scalar("select count(*) from fct_flight_features where flight_date = '2013-01-01'")
    assert n == source_rows("flights", "2013-01-01")

    # By default a successful invocation's target folder does not outlive it.
    monkeypatch.delenv(KEEP_TARGETS_ENV)
    result = flywheel.run("daily_warehouse_job", "2013-01-02")
    assert not list(target.glob(f"daily_dbt_models-{result.run_id[:7]}-*"))

    # A failed one keeps it, with dbt's debug log (written from the events once dbt has failed):
    # the SQL it ran, and the error that Dagster's message points to.
    flywheel.sql("drop table raw.flights")
    result = flywheel.run(
        "daily_warehouse_job", "2013-01-02", ["fct_flight_features"], raise_on_error=False
    )
    assert not result.success
    [log] = target.glob(f"daily_dbt_models-{result.run_id[:7]}-*/dbt.log")
    names = dbt_event_names(log)
    assert {"SQLQuery", "LogModelResult"} <= names, names
    events = [json.loads(line) for line in log.read_text().splitlines()]
    errors = [e["info"]["msg"] for e in events if e["info"]["level"] == "error"]
    assert any("flights" in error for error in errors), errors
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert str(log) in failure.step_failure_data.error.to_string()


def test_a_build_writes_no_artifacts_into_a_folder_it_removes(monkeypatch):
    monkeypatch.delenv(KEEP_TARGETS_ENV, raising=False)
    assert build_command()[0] == "build" and "--no-write-json" in build_command()
    monkeypatch.setenv(KEEP_TARGETS_ENV, "1")
    assert "--no-write-json" not in build_command()


def test_a_target_folder_outside_the_project_starts_from_the_projects_parse_state(
    tmp_path, monkeypatch
):
    """On Kubernetes DBT_TARGET_PATH is an empty folder of the pod, the project's parse state
    (the image's) read-only: the first command starts from a copy of it, later ones from theirs."""
    project = tmp_path / "project"
    (project / "target").mkdir(parents=True)
    (project / "target" / PARTIAL_PARSE_FILE).write_bytes(b"the image's")
    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path / "state" / "dbt-target"))
    seed_parse_state(project)
    seed = tmp_path / "state" / "dbt-target" / PARTIAL_PARSE_FILE
    assert seed.read_bytes() == b"the image's"
    seed.write_bytes(b"a later command's")
    seed_parse_state(project)
    assert seed.read_bytes() == b"a later command's"
    monkeypatch.delenv("DBT_TARGET_PATH")
    seed_parse_state(project)  # the project's own target folder: nothing to copy
    assert [p.name for p in (project / "target").iterdir()] == [PARTIAL_PARSE_FILE]


def test_date_window_env_restores_the_environment(monkeypatch):
    monkeypatch.setenv("FLYWHEEL_MIN_DATE", "2000-01-01")
    monkeypatch.delenv("FLYWHEEL_MAX_DATE", raising=False)
    with date_window_env(date(2013, 1, 1), date(2013, 1, 3)):
        assert os.environ["FLYWHEEL_MIN_DATE"] == "2013-01-01"
        assert os.environ["FLYWHEEL_MAX_DATE"] == "2013-01-03"
    assert os.environ["FLYWHEEL_MIN_DATE"] == "2000-01-01"
    assert "FLYWHEEL_MAX_DATE" not in os.environ


def test_dbt_resource_knows_its_dbt_version_without_running_dbt(monkeypatch):
    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr(dagster_dbt.core.resource, "check_output", no_subprocess)
    resource = FlywheelDbtCliResource(project_dir=dbt_project, dbt_executable=dbt_executable())
    assert resource._cli_version == Version(version("dbt-core"))


def test_a_held_duckdb_warehouse_is_checkpointed_once_and_a_kill_while_held_loses_no_commit(
    tmp_path,
):
    """Inside `held`, connections join the open database: what they commit stays in the WAL
    (no checkpoint at each close) and no other process can open the file; the block's end
    checkpoints it. A process killed while holding it loses no committed row."""
    path = tmp_path / "w.duckdb"
    wal = Path(f"{path}.wal")
    warehouse = DuckDBWarehouse(path=str(path))
    opener = f"import duckdb; duckdb.connect({str(path)!r}).close()"
    with warehouse.held():
        for x in range(3):
            with warehouse.connect() as con:
                con.execute("create table if not exists t (x integer)")
                con.execute("insert into t values (?)", [x])
        assert wal.exists() and wal.stat().st_size > 0
        other = subprocess.run([sys.executable, "-c", opener], capture_output=True, text=True)
        assert other.returncode != 0 and "lock" in other.stderr.lower(), other.stderr
    assert not wal.exists()
    subprocess.run([sys.executable, "-c", opener], check=True)

    holder = f"""
import os, signal
from pipelines.lib.warehouse import DuckDBWarehouse
warehouse = DuckDBWarehouse(path={str(path)!r})
with warehouse.held():
    with warehouse.connect() as con:
        con.execute("insert into t values (3)")
    os.kill(os.getpid(), signal.SIGKILL)
"""
    killed = subprocess.run([sys.executable, "-c", holder], cwd=REPO)
    assert killed.returncode == -signal.SIGKILL and wal.exists()
    assert warehouse.query("select x from t order by x")["x"].tolist() == [0, 1, 2, 3]
