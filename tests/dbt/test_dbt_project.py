"""The dbt project on its own: unit tests of model logic and every data test on empty sources."""

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

from pipelines.ingestion import ensure_raw_tables
from pipelines.lib.dbt import DBT_PROJECT_DIR
from pipelines.lib.warehouse import DuckDBConnection
from pipelines.task import load_task
from pipelines.task.contracts import TASKS_DIR
from tests.pipelines.killing import lock_holder


def empty_warehouse(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A warehouse with every task's raw tables and nothing in them (the project builds every
    task's models), and the environment that points dbt at it (target and logs under
    `tmp_path`)."""
    warehouse = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(warehouse)) as con:
        ensure_every_tasks_raw_tables(DuckDBConnection(con))
    env = os.environ | {
        "FLYWHEEL_WAREHOUSE_PATH": str(warehouse),
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
        "DBT_TARGET_PATH": str(tmp_path / "target"),
        "DBT_LOG_PATH": str(tmp_path / "logs"),
    }
    return warehouse, env


def ensure_every_tasks_raw_tables(con) -> None:
    """Every task's raw tables (`pipelines/tasks/`): the project builds all their models."""
    for path in sorted(TASKS_DIR.glob("*.yaml")):
        ensure_raw_tables(con, load_task(path.stem))


def dbt_command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """Run the dbt command line in the project; its exit status and output."""
    return subprocess.run(
        [Path(sys.executable).with_name("dbt"), *args, "--profiles-dir", "."],
        cwd=DBT_PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def raw_flight(
    day: int,
    number: int = 1545,
    tail: str = "N14228",
    hour: int = 12,
    line: int = 1,
    ingested_hour: int = 23,
) -> str:
    """A raw.flights row of UA `number` from EWR on 2013-01-<day>: the contract's columns, then
    its landing day and lineage (file line, ingestion time)."""
    day_ = f"2013-01-{day:02d}"
    return (
        f"(2013, 1, {day}, 1200, 1500, 'UA', {number}, '{tail}', 'EWR', 'IAH', 1400.0, {hour}, 0, "
        f"timestamp '{day_} 17:00:00', date '{day_}', 'flights/{day_}.csv', {line}, "
        f"timestamp '{day_} {ingested_hour}:00:00')"
    )


def test_dbt_build_empty_runs_unit_tests_and_checks(tmp_path):
    _, env = empty_warehouse(tmp_path)
    out = dbt_command(env, "build", "--empty")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "ERROR=0" in out.stdout
    # A unit test's result line names it `<model>::<unit test>`.
    passed_unit_tests = [
        line for line in out.stdout.splitlines() if " PASS " in line and "::" in line
    ]
    assert len(passed_unit_tests) >= 5, out.stdout[-3000:]


def dbt_json_events(env: dict[str, str], *args: str) -> list[dict]:
    """Run dbt in the project with JSON logs; the events it printed (asserting it succeeded)."""
    out = dbt_command(env | {"DBT_LOG_FORMAT": "json"}, *args)
    assert out.returncode == 0, out.stdout[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_a_new_date_window_compiles_into_the_sql_without_reparsing(tmp_path):
    _, env = empty_warehouse(tmp_path)
    target = tmp_path / "target"
    compile_daily = ("compile", "--select", "tag:daily", "--target", "local")
    dbt_json_events(
        env | {"FLYWHEEL_MIN_DATE": "2013-01-01", "FLYWHEEL_MAX_DATE": "2013-01-02"}, *compile_daily
    )

    events = dbt_json_events(
        env | {"FLYWHEEL_MIN_DATE": "2013-02-03", "FLYWHEEL_MAX_DATE": "2013-02-05"},
        *compile_daily,
        "--debug",
    )
    names = {e["info"]["name"] for e in events}
    # Nothing re-parsed: partial parsing found no changed file (a changed var re-parses all).
    assert "PartialParsingSkipParsing" in names
    assert not {"UnableToPartialParse", "PartialParsingFile"} & names
    compiled = (
        target
        / "compiled"
        / "flywheel"
        / "models"
        / "flights"
        / "marts"
        / "fct_flight_features.sql"
    ).read_text()
    assert "flight_date >= cast('2013-02-03' as date)" in compiled
    assert "flight_date < cast('2013-02-05' as date)" in compiled


def test_daily_checks_test_the_window_and_name_each_broken_condition(tmp_path):
    warehouse, env = empty_warehouse(tmp_path)
    with duckdb.connect(str(warehouse)) as con:
        good = raw_flight(day=1, hour=12)
        bad = raw_flight(day=2, hour=25)  # a local hour no clock shows
        con.execute(f"insert into raw.flights values {good}, {bad}")
    view = dbt_command(env, "run", "--select", "stg_landing__flights")
    assert view.returncode == 0, view.stdout[-3000:]
    checks = ("test", "--select", "stg_landing__flights_rows_valid")
    day_one = {"FLYWHEEL_MIN_DATE": "2013-01-01", "FLYWHEEL_MAX_DATE": "2013-01-02"}
    # The first day's run checks its own rows only: the second day's bad row is not its failure.
    out = dbt_command(env | day_one, *checks)
    assert out.returncode == 0, out.stdout[-3000:]
    day_two = {"FLYWHEEL_MIN_DATE": "2013-01-02", "FLYWHEEL_MAX_DATE": "2013-01-03"}
    for window in (day_two, {}):  # the second day's run, and a run over every day
        out = dbt_command(env | window, *checks)
        assert out.returncode == 1, out.stdout[-3000:]
        assert "Failure in test stg_landing__flights_rows_valid" in out.stdout
    # The failing rows name the broken condition and how many rows break it.
    compiled = next((tmp_path / "target" / "compiled").rglob("stg_landing__flights_rows_valid.sql"))
    with duckdb.connect(str(warehouse), read_only=True) as con:
        failures = con.execute(compiled.read_text()).fetchall()
    assert failures == [("range(scheduled_hour: scheduled_hour >= 0 and scheduled_hour <= 23)", 1)]


def test_a_window_on_the_flights_view_ranks_only_the_window_s_rows(tmp_path):
    """`stg_landing__flights` keeps each flight's latest ingested version by ranking its rows; a
    filter on flight_date (every daily test's and model's) must reach below that ranking, or
    each of them ranks every flight ever landed (about 60 ms a test by December)."""
    warehouse, env = empty_warehouse(tmp_path)
    with duckdb.connect(str(warehouse)) as con:
        rows = [
            raw_flight(day=1, tail="N0LD", ingested_hour=20),
            raw_flight(day=1, tail="N14228", ingested_hour=23),  # the same flight, ingested again
            raw_flight(day=2, tail="N14228", ingested_hour=23),
        ]
        con.execute(f"insert into raw.flights values {', '.join(rows)}")
    view = dbt_command(env, "run", "--select", "stg_landing__flights")
    assert view.returncode == 0, view.stdout[-3000:]
    window = "flight_date >= date '2013-01-01' and flight_date < date '2013-01-02'"
    with duckdb.connect(str(warehouse), read_only=True) as con:
        kept = con.execute(f"select flight_id, tailnum from stg_landing__flights where {window}")
        assert kept.fetchall() == [("2013-01-01_UA1545_EWR", "N14228")]
        plan = con.execute(f"explain select * from stg_landing__flights where {window}").fetchall()
    text = plan[0][1]
    ranking = text.index("row_number()")
    # The plan prints from the output down to the scan: the date filter below the ranking.
    assert "2013-01-01" in text[ranking:], text


def test_a_daily_relationship_test_reads_the_parent_in_the_window_and_fails_on_a_lost_flight(
    tmp_path,
):
    """`relationships_in_window`: a daily model's flights must be flights of the staging view in
    the run's window, which is read alone (not every flight ever landed, ranked)."""
    warehouse, env = empty_warehouse(tmp_path)
    with duckdb.connect(str(warehouse)) as con:
        rows = [raw_flight(day=1), raw_flight(day=2), raw_flight(day=2, number=1714, line=2)]
        con.execute(f"insert into raw.flights values {', '.join(rows)}")
    model = "int_flights_joined_to_origin_weather"
    test = (
        f"relationships_in_window_{model}_flight_id__flight_id__flight_date"
        "__ref_stg_landing__flights_"
    )
    days = {
        day: {"FLYWHEEL_MIN_DATE": f"2013-01-0{day}", "FLYWHEEL_MAX_DATE": f"2013-01-0{day + 1}"}
        for day in (1, 2)
    }
    parents = ("stg_landing__flights", "stg_landing__weather_observations")
    for window in days.values():  # each day's models built, then the test of its window
        selected = ("--select", *parents, model, test, "--indirect-selection", "empty")
        built = dbt_command(env | window, "build", *selected)
        assert built.returncode == 0, built.stdout[-3000:]
        assert f"PASS {test}" in built.stdout, built.stdout[-3000:]
    # The parent read in the test is the window's flights only.
    compiled = next((tmp_path / "target" / "compiled").rglob("relationships_in_window_*.sql"))
    parent = compiled.read_text().split("parent as")[1]
    assert "flight_date >= cast('2013-01-02' as date)" in parent, parent

    # A flight of the second day leaves the view (its landed rows gone): the second day's test
    # fails, the first day's does not.
    with duckdb.connect(str(warehouse)) as con:
        con.execute("delete from raw.flights where day = 2 and flight = 1714")
    assert dbt_command(env | days[1], "test", "--select", test).returncode == 0
    checked = dbt_command(env | days[2], "test", "--select", test)
    assert checked.returncode == 1, checked.stdout[-3000:]
    assert f"Failure in test {test}" in checked.stdout
    # A row of the first day naming a flight of the second: its match is outside the window.
    with duckdb.connect(str(warehouse)) as con:
        con.execute(
            f"update {model} set flight_id = '2013-01-02_UA1545_EWR'"
            " where flight_date = '2013-01-01'"
        )
    assert dbt_command(env | days[1], "test", "--select", test).returncode == 1


def test_dbt_in_process_releases_the_warehouse_and_reports_a_lock_it_met(tmp_path, monkeypatch):
    from pipelines.lib.dbt import FlywheelDbtCliResource, InProcessDbt, dbt_executable

    warehouse, _ = empty_warehouse(tmp_path)
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE_PATH", str(warehouse))
    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path / "target"))
    dbt = FlywheelDbtCliResource(
        project_dir=str(DBT_PROJECT_DIR), target="local", dbt_executable=dbt_executable()
    )
    built = dbt.cli(["run", "--select", "stg_landing__flights"], raise_on_error=False)
    assert isinstance(built.process, InProcessDbt)
    names = [event.raw_event["info"]["name"] for event in built.stream_raw_events()]
    assert "LogModelResult" in names and built.is_successful()
    # The command left nothing open: another process can write the warehouse at once.
    other = "import duckdb, sys; duckdb.connect(sys.argv[1]).close()"
    subprocess.run([sys.executable, "-c", other, str(warehouse)], check=True)

    with lock_holder(warehouse):
        blocked = dbt.cli(["run", "--select", "stg_landing__flights"], raise_on_error=False)
        assert not blocked.is_successful()
        assert "lock" in str(blocked.get_error()).lower()


def test_one_parse_serves_warehouses_in_other_folders_and_each_build_writes_its_own(
    tmp_path, monkeypatch
):
    from pipelines.lib import dbt as flywheel_dbt

    homes = [tmp_path / "a", tmp_path / "b"]
    for home in homes:
        home.mkdir()
        empty_warehouse(home)
    monkeypatch.delenv("FLYWHEEL_WAREHOUSE_PATH", raising=False)
    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path / "target"))
    manifests = []  # what each command ran on
    real = flywheel_dbt._manifest
    monkeypatch.setattr(
        flywheel_dbt, "_manifest", lambda args: manifests.append(real(args)) or manifests[-1]
    )
    flywheel_dbt._manifests.clear()
    dbt = flywheel_dbt.FlywheelDbtCliResource(
        project_dir=str(DBT_PROJECT_DIR),
        target="local",
        dbt_executable=flywheel_dbt.dbt_executable(),
    )
    for home in homes:
        monkeypatch.setenv("FLYWHEEL_HOME", str(home))
        built = dbt.cli(["run", "--select", "stg_landing__flights"], raise_on_error=False)
        assert built.is_successful(), built.get_error()
    # The second folder's build ran on the manifest parsed for the first one.
    assert len(manifests) == 2 and manifests[0] is manifests[1]
    for home in homes:  # and each build made its view in its own folder's file
        with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
            views = con.sql("select table_name from information_schema.tables").fetchall()
        assert ("stg_landing__flights",) in views

    # Another database name (the file's stem) is another parse: its relations are named apart.
    def key(**settings: str) -> tuple:
        with monkeypatch.context() as patch:
            for name in ("FLYWHEEL_HOME", "FLYWHEEL_WAREHOUSE_PATH", "FLYWHEEL_WAREHOUSE_DATABASE"):
                patch.delenv(name, raising=False)
            for name, value in settings.items():
                patch.setenv(name, value)
            return flywheel_dbt.parse_profile()

    assert key(FLYWHEEL_HOME="/x") == key(FLYWHEEL_HOME="/y")
    assert key(FLYWHEEL_WAREHOUSE_PATH="/x/w.duckdb") != key(FLYWHEEL_HOME="/x")
    assert key(FLYWHEEL_WAREHOUSE_DATABASE="a") != key(FLYWHEEL_WAREHOUSE_DATABASE="b")


def test_dbt_gets_the_warehouse_password_under_the_name_it_scrubs(tmp_path, monkeypatch):
    from pipelines.lib import dbt as flywheel_dbt

    warehouse, _ = empty_warehouse(tmp_path)
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE_PATH", str(warehouse))
    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path / "target"))
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE_PASSWORD", "not-the-real-one-7f3a")
    seen: list[dict] = []

    class Recorded(flywheel_dbt.InProcessDbt):
        def __init__(self, args, env, cwd=None, **more):
            seen.append(dict(env))
            super().__init__(args, env, cwd, **more)

    monkeypatch.setattr(flywheel_dbt, "InProcessDbt", Recorded)
    dbt = flywheel_dbt.FlywheelDbtCliResource(
        project_dir=str(DBT_PROJECT_DIR),
        target="local",
        dbt_executable=flywheel_dbt.dbt_executable(),
    )
    built = dbt.cli(["run", "--select", "stg_landing__flights"], raise_on_error=False)
    assert built.is_successful(), built.get_error()
    (env,) = seen
    assert env[flywheel_dbt.SECRET_PASSWORD] == "not-the-real-one-7f3a"
    assert flywheel_dbt.SECRET_PASSWORD not in os.environ  # only while dbt starts
    # The profile reads the password by that name alone: dbt's logs never hold the value.
    profile = (DBT_PROJECT_DIR / "profiles.yml").read_text()
    assert "env_var('DBT_ENV_SECRET_WAREHOUSE_PASSWORD'" in profile
    assert "env_var('FLYWHEEL_WAREHOUSE_PASSWORD'" not in profile
