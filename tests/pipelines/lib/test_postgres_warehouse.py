"""The warehouse on PostgreSQL (dbt-postgres and the Python side's PostgresWarehouse): the same
rows as on DuckDB, runs of different days at once, runs of the same day one after the other,
and bad input handled as on DuckDB.

Every test gets a database of its own on the session's PostgreSQL server (installed and started
by the `postgres_url` fixture).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from datetime import date, timedelta

import dagster as dg
import pandas as pd
import pytest

from pipelines.lib.asset_keys import task_run_config
from pipelines.lib.warehouse import (
    DuckDBWarehouse,
    PostgresWarehouse,
    WarehouseLockedError,
    replace_rows,
)
from sim.world.annotators import LabelingService
from sim.world.replay import land_days
from tests.pipelines.conftest import flywheel_in, make_dvc_repo, source_rows
from tests.pipelines.defs.test_ingestion import failure_message
from tests.pipelines.defs.test_labeling_flow import materialize

FIRST = date(2013, 1, 1)
# Four labelled days: the dataset trains on two, validates on one and tests on one.
DAYS = [(FIRST + timedelta(days=i)).isoformat() for i in range(4)]


def postgres(settings: dict[str, str], lock_timeout_s: float = 120.0) -> PostgresWarehouse:
    return PostgresWarehouse(
        host=settings["FLYWHEEL_WAREHOUSE_HOST"],
        port=int(settings["FLYWHEEL_WAREHOUSE_PORT"]),
        user=settings["FLYWHEEL_WAREHOUSE_USER"],
        password=settings["FLYWHEEL_WAREHOUSE_PASSWORD"],
        database=settings["FLYWHEEL_WAREHOUSE_DATABASE"],
        lock_timeout_s=lock_timeout_s,
    )


def rows(flywheel, query: str) -> pd.DataFrame:
    """A query's rows as the warehouse resource reads them, sorted by every column."""
    frame = flywheel.resource.query(query)
    return frame.sort_values(list(frame.columns), ignore_index=True)


# --- The same landing days on both backends ---------------------------------------------------


def play_days(flywheel) -> dict:
    """The landing days as the simulation plays them (ingest, build, export tasks, annotators
    deliver, import labels), then the training marts and the dataset."""
    land_days(flywheel.zone, [date.fromisoformat(d) for d in DAYS])
    flywheel.run("dimension_warehouse_job")
    store = flywheel.defs.resources["label_store"]
    annotators = LabelingService(store, latency_days=1)
    for day in DAYS:
        flywheel.run("daily_warehouse_job", day)
        materialize(flywheel, "label_tasks", day, {"budget": 120, "audit_share": 0.25})
        delivery = date.fromisoformat(day) + timedelta(days=1)
        annotators.deliver(delivery)
        materialize(flywheel, "flight_labels", delivery.isoformat())
    flywheel.run("__ASSET_JOB", assets=["fct_labelled_flights"])
    dataset = flywheel.defs.resolve_job_def("__ASSET_JOB").execute_in_process(
        instance=flywheel.instance,
        asset_selection=[dg.AssetKey(["flights", "training_dataset"])],
        run_config=task_run_config(
            "flights",
            {"ops": {"training_dataset": {"config": {"validation_days": 1, "test_days": 1}}}},
        ),
    )
    metadata = dataset.asset_materializations_for_node("flights__training_dataset")[0].metadata
    return {
        "features": rows(flywheel, "select * from fct_flight_features"),
        "examples": rows(flywheel, "select * from fct_labelled_flights"),
        "tasks": rows(flywheel, "select task_id, flight_id, reason from raw.label_tasks"),
        "labels": rows(flywheel, "select task_id, is_late, known_at from raw.flight_labels"),
        "dvc_hash": metadata["dvc_hash"].value,
        "schema": metadata["schema"].value,
    }


def test_the_same_days_give_the_same_rows_and_dataset_on_duckdb_and_postgres(
    tmp_path, monkeypatch, postgres_warehouse
):
    played = {}
    for backend in ("duckdb", "postgres"):
        home = tmp_path / backend
        home.mkdir()
        with monkeypatch.context() as patch:
            make_dvc_repo(home, patch)
            settings = postgres_warehouse if backend == "postgres" else None
            with flywheel_in(home, patch, settings) as flywheel:
                assert flywheel.resource.dialect == backend
                played[backend] = play_days(flywheel)
    duck, pg = played["duckdb"], played["postgres"]
    assert len(duck["features"]) == sum(source_rows("flights", d) for d in DAYS)
    assert len(duck["tasks"]) == len(duck["labels"]) == len(DAYS) * 120  # every task answered
    assert len(duck["examples"]) == len(duck["labels"])
    for table in ("features", "examples", "tasks", "labels"):
        pd.testing.assert_frame_equal(duck[table], pg[table], check_exact=True, obj=table)
    # The same pandas types, so the same Parquet files: the same DVC version.
    assert duck["schema"] == pg["schema"]
    assert duck["dvc_hash"] == pg["dvc_hash"]


# --- Concurrent writers ------------------------------------------------------------------------

RUN_DAY = textwrap.dedent(
    """
    import sys
    import dagster as dg
    from tests.pipelines.conftest import Flywheel
    from pathlib import Path

    home, day = Path(sys.argv[1]), sys.argv[2]
    flywheel = Flywheel(home, dg.DagsterInstance.ephemeral(), backend="postgres")
    result = flywheel.run("daily_warehouse_job", day, raise_on_error=False)
    sys.exit(0 if result.success else 1)
    """
)


def test_four_partitions_ingested_and_built_at_once_with_exact_counts(
    pg_flywheel, monkeypatch, tmp_path
):
    """Four runs at once, each in its own process: three different days and one of them twice.
    Every day holds exactly its flights, once, in the raw table and in every daily model."""
    days = DAYS[:3]
    land_days(pg_flywheel.zone, [date.fromisoformat(d) for d in days])
    pg_flywheel.run("dimension_warehouse_job")
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RUN_DAY, str(pg_flywheel.home), day],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for day in [*days, days[0]]
    ]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    assert [p.returncode for p in processes] == [0] * 4, "\n".join(o[-3000:] for o in outputs)
    for day in days:
        expected = source_rows("flights", day)
        for table, column in (
            ("raw.flights", "_landing_date"),
            ("stg_landing__flights", "flight_date"),
            ("int_flights_joined_to_origin_weather", "flight_date"),
            ("fct_flight_features", "flight_date"),
        ):
            found = pg_flywheel.sql(
                f"select count(*), count(distinct flight_id) from {table} where {column} = '{day}'"
                if table != "raw.flights"
                else f"select count(*), count(*) from {table} where {column} = '{day}'"
            )
            assert found == [(expected, expected)], (table, day)
        weather = pg_flywheel.scalar(
            f"select count(*) from raw.weather where _landing_date = '{day}'"
        )
        assert weather == source_rows("weather", day)


def test_a_partition_being_replaced_holds_off_only_runs_of_the_same_partition(postgres_warehouse):
    warehouse = postgres(postgres_warehouse)
    waiting = postgres(postgres_warehouse, lock_timeout_s=1.0)
    frame = pd.DataFrame({"day": pd.to_datetime(["2013-01-01", "2013-01-02"]).date, "x": [1, 2]})
    with warehouse.connect() as con:
        con.create_table_like("t", frame)
        con.insert_rows("t", frame)
    with warehouse.connect() as holder, holder.transaction():
        holder.lock_partitions("t", "2013-01-01")  # a run replacing 2013-01-01, not finished
        with waiting.connect() as other:
            replace_rows(other, "t", "day", "2013-01-02", frame.iloc[[1]])  # another day: goes
            with pytest.raises(WarehouseLockedError, match="stayed locked"):
                replace_rows(other, "t", "day", ("2012-12-31", "2013-01-01"), frame.iloc[[0]])
    # The failed replacement changed nothing; once the first run is done, the day goes too.
    with waiting.connect() as other:
        assert sorted(other.execute("select x from t").fetchall()) == [(1,), (2,)]
        replace_rows(other, "t", "day", "2013-01-01", frame.iloc[[0]])
        assert sorted(other.execute("select x from t").fetchall()) == [(1,), (2,)]


def test_two_replacements_of_the_same_day_at_once_never_duplicate_it(postgres_warehouse):
    warehouse = postgres(postgres_warehouse)
    day = pd.DataFrame({"day": [date(2013, 1, 1)] * 500, "x": range(500)})
    with warehouse.connect() as con:
        con.create_table_like("t", day)
    errors = []

    def replace() -> None:
        try:
            for _ in range(20):
                with warehouse.connect() as con:
                    replace_rows(con, "t", "day", "2013-01-01", day)
        except Exception as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=replace) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert warehouse.query("select count(*) as n from t").n.tolist() == [500]


# --- Reads give DuckDB's types -------------------------------------------------------------------


def test_a_frame_read_from_postgres_has_the_types_and_values_it_has_from_duckdb(
    postgres_warehouse, tmp_path
):
    query = """
        select * from (values
            (cast(1 as bigint), cast(2 as integer), cast(1.5 as double precision), 'a',
             cast('2013-01-01' as date), cast('2013-01-01 05:00:00.25' as timestamp), true,
             cast(7 as bigint)),
            (cast(3 as bigint), cast(null as integer), cast(null as double precision),
             cast(null as varchar), cast(null as date), cast(null as timestamp),
             cast(null as boolean), cast(0.1 as double precision) * 3)
        ) as v(a, b, c, d, e, f, g, h)
    """
    duck = DuckDBWarehouse(path=str(tmp_path / "w.duckdb")).query(query)
    pg = postgres(postgres_warehouse).query(query)
    assert len(duck) == 2 and duck.b.dtype == "Int32" and duck.e.dtype == "datetime64[us]"
    pd.testing.assert_frame_equal(duck, pg, check_exact=True)


def test_any_text_and_every_null_is_written_as_it_was(postgres_warehouse, tmp_path):
    frame = pd.DataFrame(
        {
            "record": ["\\N", "a\tb", "line\nbreak\r", "back\\slash", "", None, 'ü,"quoted"'],
            "n": pd.array([1, None, 3, 4, 5, 6, 7], dtype="Int64"),
            "x": [0.1 * 3, float("nan"), 1e-300, -2.5, 0.0, 1e20, 3.0],
            "flag": pd.array([True, None, False, True, False, True, False], dtype="boolean"),
            "at": pd.to_datetime(
                ["2013-01-01 05:00:00.25", None, *["2013-12-31 00:00:00"] * 5], format="ISO8601"
            ),
            "day": [date(2013, 1, 1), None, *[date(2013, 12, 31)] * 5],
        }
    )
    read = {}
    for name, warehouse in (
        ("duckdb", DuckDBWarehouse(path=str(tmp_path / "w.duckdb"))),
        ("postgres", postgres(postgres_warehouse)),
    ):
        with warehouse.connect() as con:
            con.create_table_like("t", frame)
            con.insert_rows("t", frame)
        read[name] = warehouse.query("select * from t")
    assert read["postgres"].record.tolist()[:5] == frame.record.tolist()[:5]
    assert read["postgres"].record.isna().tolist() == frame.record.isna().tolist()
    pd.testing.assert_frame_equal(read["duckdb"], read["postgres"], check_exact=True)


# --- Bad input on PostgreSQL -------------------------------------------------------------------


def test_on_postgres_bad_rows_are_quarantined_and_an_unparseable_file_changes_nothing(
    pg_flywheel,
):
    day, other = DAYS[1], DAYS[2]
    land_days(pg_flywheel.zone, [date.fromisoformat(day), date.fromisoformat(other)])
    lines = pg_flywheel.zone.read_bytes(f"flights/{day}.csv").decode().splitlines()
    header = lines[0].split(",")
    fields = lines[1].split(",")
    fields[header.index("distance")] = "far"
    lines[1] = ",".join(fields)
    pg_flywheel.zone.write_bytes(f"flights/{day}.csv", ("\n".join(lines) + "\n").encode())
    pg_flywheel.ingest(day)
    quarantined = pg_flywheel.sql("select feed, source_line, reason from raw.quarantine")
    assert quarantined == [("flights", 2, "distance: not a valid float")]
    assert pg_flywheel.scalar("select count(*) from raw.flights") == source_rows("flights", day) - 1
    before = sorted(pg_flywheel.sql("select * from raw.flights"))

    # A range of two days whose second file is cut mid-record: the run fails naming the file
    # and neither day changes (the first day's new rows are not half-written).
    data = pg_flywheel.zone.read_bytes(f"flights/{other}.csv")
    pg_flywheel.zone.write_bytes(f"flights/{other}.csv", data[: len(data) // 2])
    result = pg_flywheel.defs.resolve_job_def("daily_warehouse_job").execute_in_process(
        instance=pg_flywheel.instance,
        tags={
            "dagster/asset_partition_range_start": day,
            "dagster/asset_partition_range_end": other,
        },
        asset_selection=[dg.AssetKey(["flights", "raw_flights"])],
        raise_on_error=False,
    )
    assert not result.success
    assert f"flights/{other}.csv" in failure_message(result)
    assert "truncated at line" in failure_message(result)
    assert sorted(pg_flywheel.sql("select * from raw.flights")) == before
    assert len(pg_flywheel.sql("select * from raw.quarantine")) == 1


def test_prod_settings_name_what_is_missing(monkeypatch):
    from pipelines.lib.errors import ConfigurationError
    from pipelines.resources import warehouse

    for name in ("HOST", "PORT", "USER", "PASSWORD", "DATABASE"):
        monkeypatch.delenv(f"FLYWHEEL_WAREHOUSE_{name}", raising=False)
    monkeypatch.setenv("FLYWHEEL_ENV", "prod")
    with pytest.raises(ConfigurationError, match="FLYWHEEL_WAREHOUSE_HOST"):
        warehouse()
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE_HOST", "db")
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE_PORT", "five")
    with pytest.raises(ConfigurationError, match="FLYWHEEL_WAREHOUSE_PORT='five'"):
        warehouse()
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE_PORT", "5433")
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE_USER", "flywheel")
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE_DATABASE", "warehouse")
    built = warehouse()
    assert isinstance(built, PostgresWarehouse)
    assert (built.host, built.port, built.database, built.password) == ("db", 5433, "warehouse", "")
    assert built.dialect == "postgres"


def test_the_dbt_unit_tests_pass_on_postgres(postgres_warehouse, tmp_path):
    """The models' unit tests (among them the as-of join's lookback edges, which on PostgreSQL
    run the project's own `postgres__asof_join`) and every data test on empty tables, on the
    `prod` target."""
    from tests.dbt.test_dbt_project import dbt_command, ensure_every_tasks_raw_tables

    with postgres(postgres_warehouse).connect() as con:
        ensure_every_tasks_raw_tables(con)
    env = postgres_warehouse | {
        # dbt as a command: the password under the name the profile reads (and dbt scrubs)
        "DBT_ENV_SECRET_WAREHOUSE_PASSWORD": postgres_warehouse["FLYWHEEL_WAREHOUSE_PASSWORD"],
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
        "DBT_TARGET_PATH": str(tmp_path / "target"),
        "DBT_LOG_PATH": str(tmp_path / "logs"),
    }
    out = dbt_command(env, "build", "--empty", "--target", "prod")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "ERROR=0" in out.stdout
    unit_tests = [line for line in out.stdout.splitlines() if " PASS " in line and "::" in line]
    asof = "origin_weather_is_the_latest_observation_at_or_before"
    assert any(asof in line for line in unit_tests), out.stdout[-3000:]
    assert len(unit_tests) >= 5, out.stdout[-3000:]
