"""Faults on the production-shaped stack: real PostgreSQL, S3 endpoint, MLflow server, code
server, daemon.

Started by the project's own command (`python -m deploy.stack up`, what `make stack-up` runs)
in a fresh FLYWHEEL_HOME, fed landing days through S3, and left to the daemon: the landing
sensor's runs wait in the queue and each is launched as its own process. Then a run's process
or a service (Postgres, the object store, the daemon, PgBouncer, the code server, the
webserver) is SIGKILLed, and nothing may stay STARTED, be lost or be duplicated.
(tests/deploy/test_parity.py plays the whole loop on such a stack, and crashes all of it.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from deploy.stack import s3
from deploy.stack.pgbouncer import POOL_SIZE
from deploy.stack.stack import SERVICES, Stack
from pipelines.resources import task_stem, warehouse
from sim.world.nycflights import load
from sim.world.replay import producer_zone
from tests.deploy.stackctl import passable, stack, stack_env

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DIMENSION_DAY = "2013-01-02"

pytestmark = [
    pytest.mark.skipif(
        sys.platform != "linux", reason="the stack runs PostgreSQL from the distribution's packages"
    ),
    # One stack at a time under pytest-xdist (`make test`): each starts eight processes.
    pytest.mark.xdist_group("stack"),
]


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


@pytest.fixture(scope="module")
def env(home: Path) -> Iterator[dict[str, str]]:
    """The stack's settings, also set in this process (to read its Dagster instance); the
    landing sensor turned on (tests/deploy/test_parity.py drives the whole loop)."""
    values = stack_env(home)
    workspace = str(home / "stack" / "workspace.yaml")
    subprocess.run(
        [str(BIN / "dagster"), "sensor", "start", "landing_sensor", "-w", workspace],
        env=values,
        capture_output=True,
        check=True,
    )
    with pytest.MonkeyPatch.context() as patch:
        for key, value in values.items():
            patch.setenv(key, value)
        # The dimension tables (landed with the first day) is loaded before any test kills a run:
        # the kills below target a day's run, not one racing the dimension tables' run.
        land(values, DIMENSION_DAY)
        wait_for(lambda seen: succeeded(DIMENSION_DAY)(seen) and dimensions_loaded(seen), 300)
        yield values


def runs() -> list[dict]:
    """The stack instance's runs (id, job, status, tags), oldest first. Read every 2 s while a
    test waits: the runs' records only, not their event logs."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        records = instance.get_run_records(dg.RunsFilter(), ascending=True)
    return [
        {
            "id": record.dagster_run.run_id,
            "job": record.dagster_run.job_name,
            "status": record.dagster_run.status.value,
            "tags": dict(record.dagster_run.tags),
        }
        for record in records
    ]


def run_pids(instance, run_id: str) -> list[int]:
    """The pids a run's steps ran in (from its engine events), each once."""
    found = [
        int(match.group(1))
        for entry in instance.all_logs(run_id)
        if (match := re.search(r"steps in process \(pid: (\d+)\)", entry.user_message or ""))
    ]
    return list(dict.fromkeys(found))


def wait_for(
    done, timeout_s: float, failures_ok: bool = False, before: frozenset[str] = frozenset()
) -> list[dict]:
    """Poll the runs until `done(runs)` holds; fail naming the runs after `timeout_s`, or at a
    failed run not among `before` (unless `failures_ok`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = runs()
        if done(seen):
            return seen
        new = [r for r in seen if r["id"] not in before]
        failed = [r for r in new if r["status"] == "FAILURE"] if not failures_ok else []
        assert time.monotonic() < deadline and not failed, [
            (r["job"], r["tags"].get("dagster/partition"), r["status"]) for r in seen
        ]
        time.sleep(2)


def dimensions_loaded(seen: list[dict]) -> bool:
    """Whether a dimension tables' run succeeded."""
    return any(r["job"] == "dimension_warehouse_job" and r["status"] == "SUCCESS" for r in seen)


def succeeded(day: str):
    """Whether some run of `day` succeeded."""
    return lambda seen: any(
        r["tags"].get("dagster/partition") == day and r["status"] == "SUCCESS" for r in seen
    )


def land(env: dict[str, str], day: str, days: int = 1) -> None:
    """Land `days` days from `day` into the stack's S3 landing zone."""
    command = [str(BIN / "flywheel-sim"), "advance", "--days", str(days), "--start", day]
    done = subprocess.run(
        [*command, "--env", "prod"], env=env, capture_output=True, text=True, check=True
    )
    assert "into s3://flywheel/landing" in done.stdout


def day_counts() -> dict[str, tuple[int, int]]:
    """Per landing day: raw flights rows, and distinct flights among them (the stack's
    PostgreSQL warehouse, read as the assets read it; `env` set the stack's settings)."""
    store = warehouse("prod")
    rows = store.query(
        "select cast(_landing_date as varchar) as day, count(*) as n, count(distinct "
        "(carrier, flight, origin, time_hour)) as flights from raw.flights group by 1"
    )
    return {r.day: (r.n, r.flights) for r in rows.itertuples()}


def server_counts(home: Path, database: str) -> tuple[int, int]:
    """How many sessions PostgreSQL itself has started on `database` (a server process each),
    and how many transactions it has committed there."""
    import psycopg2

    settings = json.loads((home / "stack" / "stack.json").read_text())
    connection = psycopg2.connect(
        host="127.0.0.1",
        port=settings["ports"]["postgres"],
        user="flywheel",
        password=settings["postgres_password"],
        dbname="postgres",
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "select sessions, xact_commit from pg_stat_database where datname = %s",
                (database,),
            )
            return cursor.fetchone()
    finally:
        connection.close()


def mlflow_call(values: dict[str, str], path: str, body: dict, auth=None) -> requests.Response:
    """A POST to the stack's MLflow REST API, as `auth` (user, password) or as nobody."""
    url = f"{values['MLFLOW_TRACKING_URI']}/api/2.0/mlflow/{path}"
    return requests.post(url, json=body, auth=auth, verify=values["REQUESTS_CA_BUNDLE"], timeout=30)


def test_mlflow_lets_only_its_users_choose_the_champion(home: Path):
    """Whoever sets the `champion` alias chooses what scores production: nobody may without
    credentials, nor with a wrong password; the runs' identity may."""
    values = stack_env(home)
    runs = (values["MLFLOW_TRACKING_USERNAME"], values["MLFLOW_TRACKING_PASSWORD"])
    model = {"name": "access-probe"}
    assert mlflow_call(values, "registered-models/create", model, runs).ok
    version = mlflow_call(
        values, "model-versions/create", {**model, "source": "s3://flywheel/mlflow/probe"}, runs
    ).json()["model_version"]["version"]
    alias = {**model, "alias": "champion", "version": version}
    for nobody in (None, (runs[0], "not-the-password"), ("admin", "admin")):
        refused = mlflow_call(values, "registered-models/alias", alias, nobody)
        assert refused.status_code == 401, (nobody, refused.status_code)
        created = mlflow_call(values, "registered-models/create", {"name": "x"}, nobody)
        assert created.status_code == 401
    assert mlflow_call(values, "registered-models/alias", alias, runs).ok


LAUNCH_RUN = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on UnauthorizedError { message } } }"""
PERMISSIONS = "{ permissions { permission value } }"


def ui_call(values: dict[str, str], query: str, variables: dict, auth=None) -> requests.Response:
    """A GraphQL query to the stack's Dagster UI (through its login), as `auth` or as nobody."""
    return requests.post(
        f"{values['FLYWHEEL_DAGSTER_URL']}/graphql",
        json={"query": query, "variables": variables},
        auth=auth,
        verify=values["REQUESTS_CA_BUNDLE"],
        timeout=30,
    )


def test_the_dagster_ui_lets_in_only_its_identities_each_with_its_role(home: Path):
    """No webserver listens on the stack's address: nginx does, over HTTPS, and lets in only an
    identity of its own, to the webserver of its role. Nobody (or a wrong password) gets 401 for
    a launch as for a read; a viewer (added by `python -m deploy.stack add-user`) reads and may
    launch nothing; the stack's operator, the daemon-driven simulation's identity, may
    (tests/deploy/test_parity.py launches its retraining runs through it)."""
    values = stack_env(home)
    operator = (values["FLYWHEEL_DAGSTER_USER"], values["FLYWHEEL_DAGSTER_PASSWORD"])
    added = stack("add-user", home, args=["alice", "--role", "viewer"])
    viewer = ("alice", added.rsplit(": ", 1)[1].strip())
    launch = {
        "params": {
            "selector": {
                "repositoryLocationName": "flywheel",
                "repositoryName": "__repository__",
                "jobName": "retraining_job",
            },
            "runConfigData": {},
        }
    }
    for nobody in (None, (operator[0], "not-the-password"), ("alice", operator[1])):
        assert ui_call(values, LAUNCH_RUN, launch, nobody).status_code == 401, nobody
        assert ui_call(values, PERMISSIONS, {}, nobody).status_code == 401, nobody
    refused = ui_call(values, LAUNCH_RUN, launch, viewer).json()["data"]["launchRun"]
    assert refused["__typename"] == "UnauthorizedError"

    def may(auth) -> dict[str, bool]:
        permissions = ui_call(values, PERMISSIONS, {}, auth).json()["data"]["permissions"]
        return {p["permission"]: p["value"] for p in permissions}

    assert not any(may(viewer).values())
    assert may(operator)["launch_pipeline_execution"] and may(operator)["start_schedule"]


def test_the_object_store_syncs_each_object_to_disk_before_acknowledging_it(
    home: Path, monkeypatch
):
    """The running store's filer says `fsync` for the buckets' path; with it the volume server
    syncs each object's bytes before the gateway answers the PUT."""
    settings = json.loads((home / "stack" / "stack.json").read_text())
    assert s3.writes_synced(Stack.of_home(home).address, settings["ports"])
    if shutil.which("strace") is None:  # the setting alone is asserted where strace is missing
        return
    values = stack_env(home)
    (store,) = [
        int(line.split()[0])
        for line in subprocess.run(
            ["pgrep", "-a", "weed"], capture_output=True, text=True
        ).stdout.splitlines()
        if f"-dir={Stack.of_home(home).objects}" in line and " server " in line
    ]
    traced = subprocess.Popen(
        ["strace", "-f", "-y", "-e", "trace=fsync,fdatasync", "-p", str(store)],
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1)
    monkeypatch.setenv("AWS_CA_BUNDLE", values["AWS_CA_BUNDLE"])
    client = s3.client({**values, **Stack.of_home(home).own_key("admin")})  # any prefix
    for k in range(5):
        client.put_object(Bucket="flywheel", Key=f"sync-probe/{k}", Body=os.urandom(4096))
    traced.send_signal(signal.SIGINT)
    synced = [line for line in traced.communicate(timeout=30)[1].splitlines() if ".dat>" in line]
    assert len(synced) >= 5, synced  # one sync of a volume's data file per object at least


def test_each_key_of_the_object_store_writes_only_its_own_prefixes(home: Path, monkeypatch):
    """The runs' key writes the landing zone and not MLflow's artifacts; the landing producer's
    (in stack.env, beside the runs') its task's landing prefix alone, and the simulator lands
    with it; MLflow's key its artifacts only; the compute logs' key (the webserver's and the
    daemon's) the logs only. A refused write is AccessDenied."""
    from botocore.exceptions import ClientError

    values = stack_env(home)
    monkeypatch.setenv("AWS_CA_BUNDLE", values["AWS_CA_BUNDLE"])  # boto3 checks the store's
    made = Stack.of_home(home)
    task = f"landing/{task_stem()}"
    producer = (values["FLYWHEEL_LANDING_KEY_ID"], values["FLYWHEEL_LANDING_SECRET_KEY"])
    keys = {
        "runs": values,
        "producer": {**values, **dict(zip(s3.KEY_NAMES, producer, strict=True))},
        "mlflow": {**values, **made.own_key("mlflow")},
        "compute-logs": {**values, **made.own_key("compute-logs")},
    }
    allowed = {
        "runs": {task, "landing/another-task", "labeling", "dvc", "compute-logs"},
        "producer": {task},
        "mlflow": {"mlflow"},
        "compute-logs": {"compute-logs"},
    }
    for holder, env in keys.items():
        client = s3.client(env)
        for prefix in (task, "landing/another-task", "labeling", "dvc", "compute-logs", "mlflow"):
            key = f"{prefix}/access-probe/{holder}"
            if prefix in allowed[holder]:
                client.put_object(Bucket="flywheel", Key=key, Body=b"")
                client.delete_object(Bucket="flywheel", Key=key)
                continue
            with pytest.raises(ClientError) as refused:
                client.put_object(Bucket="flywheel", Key=key, Body=b"")
            assert refused.value.response["Error"]["Code"] == "AccessDenied", (holder, prefix)

    for name, value in values.items():
        monkeypatch.setenv(name, value)
    zone = producer_zone()
    assert zone.write_bytes("access-probe/producer", b"1")  # its S3 client holds its own key
    assert zone.s3.aws_access_key_id == producer[0]
    s3.client(values).delete_object(Bucket="flywheel", Key=f"{task}/access-probe/producer")


def test_a_saved_bucket_is_put_back_with_each_object_s_etag(home: Path, tmp_path, monkeypatch):
    """A bucket's copy (`backup`), put back (`up` after `restore`), keeps each object's ETag: the
    landing sensor knows a file by its ETag. Over 8 MiB boto3 uploads in parts, and the ETag is
    then the parts' (the MD5 of their MD5s, then their count); put back whole, or in parts of
    another size, it would change, and the sensor would take the file again."""
    from boto3.s3.transfer import TransferConfig

    values = stack_env(home)
    monkeypatch.setenv("AWS_CA_BUNDLE", values["AWS_CA_BUNDLE"])
    admin = {**values, **Stack.of_home(home).own_key("admin")}
    client, bucket = s3.client(admin), "etag-probe"
    client.create_bucket(Bucket=bucket)
    uploads = {
        "landing/small.csv": (100_000, TransferConfig()),
        "landing/default-parts.csv": (9 * s3.MiB + 7, TransferConfig()),
        "dvc/five-mb-parts": (12 * s3.MB + 3, TransferConfig(multipart_chunksize=5 * s3.MB)),
    }
    source = tmp_path / "source"
    source.mkdir()
    for key, (size, transfer) in uploads.items():
        path = source / key.replace("/", "_")
        path.write_bytes(os.urandom(size))
        client.upload_file(str(path), bucket, key, Config=transfer)

    def etags() -> dict[str, str]:
        return {key: client.head_object(Bucket=bucket, Key=key)["ETag"] for key in uploads}

    taken = etags()
    assert [etag.rsplit("-", 1)[-1] for etag in taken.values()][1:] == ['2"', '3"']
    saved = tmp_path / "saved"
    assert s3.save(saved, admin, bucket) == 3
    for key in uploads:
        client.delete_object(Bucket=bucket, Key=key)
    assert s3.import_saved(saved, admin, bucket) == 3
    assert etags() == taken
    for key in uploads:
        copy = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert copy == (source / key.replace("/", "_")).read_bytes()
    # Put back without the ETags the copy recorded, as before them: the parts' ETags change.
    (saved / f"{bucket}.imported").rename(saved / bucket)
    assert s3.import_saved(saved, admin, bucket) == 3
    changed = {key for key, etag in etags().items() if etag != taken[key]}
    assert changed == {"landing/default-parts.csv", "dvc/five-mb-parts"}


def test_dagster_reaches_its_database_through_the_pooler(home: Path, env: dict[str, str]):
    """dagster-postgres opens a connection for each storage call (the daemon's loops and the
    landing sensor's ticks here): through PgBouncer the server starts a process for a few."""
    settings = json.loads((home / "stack" / "stack.json").read_text())
    assert env["DAGSTER_PG_PORT"] == str(settings["ports"]["pgbouncer"])
    sessions, transactions = server_counts(home, "dagster")
    time.sleep(12)
    sessions_after, transactions_after = server_counts(home, "dagster")
    # Dagster kept working meanwhile (over 100 transactions), on at most one new session per
    # connection of the pool. Pointed at the server itself, it would start a session for each
    # storage call, far more than the pool holds.
    assert transactions_after - transactions > 100
    assert sessions_after - sessions <= POOL_SIZE, f"{sessions_after - sessions} sessions in 12 s"


def test_each_consumer_logs_in_as_a_role_of_its_own_over_tls_only(home: Path, env: dict[str, str]):
    import psycopg2
    import psycopg2.errors

    from deploy.stack import postgres, warehouse_roles

    settings = json.loads((home / "stack" / "stack.json").read_text())
    port = settings["ports"]["postgres"]
    # Every client of the stack asks for TLS and checks the server's name (libpq's settings).
    assert env["PGSSLMODE"] == "verify-full"
    assert env["DAGSTER_PG_USER"] == "dagster" and env["FLYWHEEL_WAREHOUSE_USER"] == "warehouse"
    assert env["FLYWHEEL_DBT_USER"] == "warehouse_dbt"
    assert "//optuna:" in env["FLYWHEEL_OPTUNA_STORAGE"]

    def connect(role: str, database: str, **options):
        password = settings["roles"].get(role, settings["postgres_password"])
        return psycopg2.connect(
            host="127.0.0.1", port=port, user=role, password=password, dbname=database, **options
        )

    admin = connect(postgres.ROLE, "postgres")
    try:
        with admin.cursor() as cursor:
            cursor.execute(
                "select usename, bool_and(ssl) from pg_stat_ssl join pg_stat_activity using (pid)"
                " where usename is not null group by usename"
            )
            sessions = dict(cursor.fetchall())
            cursor.execute(
                "select rolname from pg_roles where rolname = any(%s) and not rolsuper"
                " and not rolcreatedb and not rolcreaterole",
                (list(postgres.ROLES),),
            )
            modest = {row[0] for row in cursor.fetchall()}
            cursor.execute("select datname, pg_get_userbyid(datdba) from pg_database")
            owners = dict(cursor.fetchall())
    finally:
        admin.close()
    # The daemon, the webserver, the code server (through the pooler) and MLflow's server are
    # connected now, each as its own role, and every session is encrypted.
    assert {"dagster", "mlflow"} <= set(sessions)
    assert all(sessions.values()), sessions
    assert modest == set(postgres.ROLES)
    assert all(owners[database] == database for database in postgres.DATABASES)
    # A role reaches its own database only, and nothing is served without TLS.
    with pytest.raises(psycopg2.OperationalError, match=r"no pg_hba\.conf entry"):
        connect("dagster", "warehouse")
    with pytest.raises(psycopg2.OperationalError, match=r"no pg_hba\.conf entry"):
        connect("warehouse", "warehouse", sslmode="disable")
    connect("warehouse", "warehouse", sslmode="verify-full").close()
    # dbt's role owns every relation dbt built (the runs' dbt steps logged in as it); the
    # steps' role reads them and writes none.
    steps, dbt = connect("warehouse", "warehouse"), connect(warehouse_roles.BUILDER, "warehouse")
    try:
        with steps.cursor() as cursor:
            cursor.execute(
                "select c.relname, pg_get_userbyid(c.relowner) from pg_class c join pg_namespace"
                " n on n.oid = c.relnamespace where n.nspname = 'public' and c.relkind in"
                " ('r', 'v') and c.relname = any(%s)",
                (warehouse_roles.dbt_relations(),),
            )
            owners = dict(cursor.fetchall())
            assert owners and set(owners.values()) == {warehouse_roles.BUILDER}, owners
            model = min(owners)
            cursor.execute(f"select count(*) from {model}")
        refused(steps, f"delete from {model}", f"insert into {model} select * from {model}")
    finally:
        steps.close()
    # dbt's role reads what the steps wrote and writes none of it; the reader writes nothing.
    for role, writes in (
        (warehouse_roles.BUILDER, ()),
        (warehouse_roles.READER, ("create table public.reader_probe (x int)",)),
    ):
        reader = dbt if role == warehouse_roles.BUILDER else connect(role, "warehouse")
        try:
            with reader.cursor() as cursor:
                cursor.execute("select count(*) from raw.flights")
                assert cursor.fetchone()[0] > 0
            refused(
                reader,
                "delete from raw.flights",
                "insert into raw.flights (carrier) values ('XX')",
                "drop table raw.flights",
                "create table raw.probe (x int)",
                *writes,
            )
        finally:
            reader.close()
        with pytest.raises(psycopg2.OperationalError, match=r"no pg_hba\.conf entry"):
            connect(role, "dagster")


def refused(connection, *statements: str) -> None:
    """Each of `statements` is refused to `connection`'s role (permission denied)."""
    import psycopg2.errors

    for statement in statements:
        with connection.cursor() as cursor, pytest.raises(psycopg2.errors.InsufficientPrivilege):
            cursor.execute(statement)
        connection.rollback()


def test_each_process_of_the_stack_holds_only_the_secrets_its_table_allows(home, env):
    """Scanned while a day's run is in its dbt step: the run's process, the code server's, holds
    every secret the run needs; no process holds a secret outside its table
    (deploy/stack/holders.py), the warehouse's password and the object store's key among them."""
    import dagster as dg
    import psutil

    from deploy.secret_scan import SecretScanner
    from deploy.stack import holders

    stack = Stack.of_home(home)
    supervisord = int((stack.supervisor.folder / "supervisord.pid").read_text())
    table = holders.holders(stack.supervisor.url, supervisord)
    scanner = SecretScanner(holders.stack_secrets(stack))
    before = frozenset(r["id"] for r in runs())
    day = "2013-01-11"
    land(env, day)
    with dg.DagsterInstance.get() as instance:
        deadline = time.monotonic() + 300
        while (target := _in_step(instance, "daily_dbt_models", before)) is None:
            assert time.monotonic() < deadline, "no run of the day reached its dbt step"
            time.sleep(0.1)
        hits = scanner.processes(holders=table)
        held = holders.holdings(scanner, table)
        run = psutil.Process(target[1]).environ()

    assert [str(hit) for hit in hits] == []
    assert table.of(target[1], run) == "code_server"
    assert {"FLYWHEEL_WAREHOUSE_PASSWORD", "AWS_SECRET_ACCESS_KEY"} <= {
        hit.secret for value in run.values() for hit in scanner.text(value, "the run")
    }
    assert set(held) == {"supervisord", *SERVICES} - holders.UNREADABLE
    for secret in ("FLYWHEEL_WAREHOUSE_PASSWORD", "AWS_SECRET_ACCESS_KEY"):
        holding = {holder for holder, found in held.items() if secret in found}
        assert holding and holding <= {
            h for h, allowed in holders.HOLDERS.items() if secret in allowed
        }
    assert "FLYWHEEL_WAREHOUSE_PASSWORD" not in held["webserver"] | held["daemon"] | held["mlflow"]
    wait_for(succeeded(day), timeout_s=300, before=before)


def test_mlflow_keeps_an_artifact_in_the_object_store_with_its_share_of_the_settings(
    env: dict[str, str], tmp_path: Path
):
    """MLflow's server, given the object store's key and no other client's secret, proxies an
    artifact to the bucket and back."""
    from mlflow import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    experiment = client.create_experiment(f"artifact-probe-{time.time_ns()}")
    run = client.create_run(experiment).info.run_id
    client.log_text(run, "kept", "probe.txt")

    assert Path(client.download_artifacts(run, "probe.txt", str(tmp_path))).read_text() == "kept"
    listed = s3.client(env).list_objects_v2(Bucket="flywheel", Prefix=f"mlflow/{experiment}/")
    assert [item["Key"] for item in listed["Contents"]] == [
        f"mlflow/{experiment}/{run}/artifacts/probe.txt"
    ]


@pytest.mark.parametrize(
    ("step", "day", "pause_s"),
    [("flights__raw_flights", "2013-01-06", 0.0), ("daily_dbt_models", "2013-01-03", 1.0)],
    ids=["ingestion", "dbt-build"],
)
def test_a_run_killed_mid_step_is_failed_by_run_monitoring_and_retried(
    home, env, step: str, day: str, pause_s: float
):
    import dagster as dg

    before = {r["id"] for r in runs()}
    land(env, day)
    with dg.DagsterInstance.get() as instance:
        deadline = time.monotonic() + 300
        while (target := _in_step(instance, step, before)) is None:
            assert time.monotonic() < deadline, f"no run of the day reached step {step}"
            time.sleep(0.05)
        run_id, pid = target
        time.sleep(pause_s)  # inside the step: dbt, like ingestion, runs in the run's process
        os.kill(pid, signal.SIGKILL)
        finished = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
        assert step not in {entry.step_key for entry in finished}, f"killed after {step} ended"

    def retried(seen: list[dict]) -> bool:
        return any(
            r["tags"].get("dagster/parent_run_id") == run_id and r["status"] == "SUCCESS"
            for r in seen
        )

    seen = wait_for(retried, timeout_s=300, failures_ok=True)
    killed = next(r for r in seen if r["id"] == run_id)
    assert killed["status"] == "FAILURE"  # not STARTED forever
    assert not [r for r in seen if r["status"] in ("STARTED", "STARTING", "QUEUED")]
    expected = len(load().day("flights", day))
    assert day_counts()[day] == (expected, expected)
    # The killed step's logs, left before their last upload, wait in the stack's own folder,
    # which its owner alone may read; no run's are in the machine's temporary folder.
    staged = home / "stack" / "compute-logs"
    assert list((staged / run_id / "compute_logs").iterdir())
    assert stat.S_IMODE(staged.stat().st_mode) == 0o700
    assert not [r["id"] for r in seen if (Path(tempfile.gettempdir()) / r["id"]).exists()]


def _in_step(instance, step: str, before: set[str]) -> tuple[str, int] | None:
    """(run id, pid) of a new started run that has begun `step`, if any."""
    import dagster as dg

    started = instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    for record in started:
        run_id = record.dagster_run.run_id
        if run_id in before:
            continue
        logs = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
        if any(entry.step_key == step for entry in logs):
            return run_id, run_pids(instance, run_id)[0]
    return None


# The moment of a kill that is no step: while the day's run is being launched (the queue has
# taken it and the code server is starting its process; no step has begun).
LAUNCH = "launch"

# Each service SIGKILLed during a day: the day, and when it is killed (during a step of the day's
# run, while it is launched, or as soon as the day lands: while the landing sensor ticks and the
# queue launches). supervisord restarts the service; the day must complete without a hand.
FAULTS = [
    pytest.param("postgres", "2013-01-05", "daily_dbt_models", id="postgres"),
    pytest.param("s3", "2013-01-07", "flights__raw_flights", id="object-store"),
    pytest.param("daemon", "2013-01-04", None, id="daemon"),
    pytest.param("pgbouncer", "2013-01-08", "daily_dbt_models", marks=pytest.mark.slow),
    pytest.param("code_server", "2013-01-09", LAUNCH, marks=pytest.mark.slow),
    pytest.param("webserver", "2013-01-10", None, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("service", "day", "step"), FAULTS)
def test_a_service_killed_during_a_day_is_restarted_and_the_day_completes(
    home, env, service: str, day: str, step: str | None
):
    import dagster as dg

    from deploy.stack.stack import Stack

    supervisor = Stack.of_home(home).supervisor
    before = frozenset(r["id"] for r in runs())
    land(env, day)
    if step == LAUNCH:
        with dg.DagsterInstance.get() as instance:
            deadline = time.monotonic() + 300
            while (launched := _launching(instance, before)) is None:
                assert time.monotonic() < deadline, "no run of the day was launched"
                time.sleep(0.05)
            killed, at = supervisor.pid(service), time.time()
            os.kill(killed, signal.SIGKILL)
            started = instance.all_logs(launched, of_type=dg.DagsterEventType.STEP_START)
            assert not [e for e in started if e.timestamp < at], "killed after a step began"
    else:
        if step is not None:
            with dg.DagsterInstance.get() as instance:
                deadline = time.monotonic() + 300
                while _in_step(instance, step, before) is None:
                    assert time.monotonic() < deadline, f"no run of the day reached step {step}"
                    time.sleep(0.1)
        killed = supervisor.pid(service)
        os.kill(killed, signal.SIGKILL)
    # Restarted by supervisord: a new process, running (PostgreSQL after its crash recovery).
    deadline = time.monotonic() + 120
    while supervisor.pid(service) in (None, killed) or not supervisor.states([service])[
        service
    ].startswith("RUNNING"):
        assert time.monotonic() < deadline, supervisor.states([service])
        time.sleep(0.5)
    seen = wait_for(succeeded(day), timeout_s=300, failures_ok=True, before=before)
    seen = wait_for(settled, timeout_s=120, failures_ok=True)
    # The run lived through the kill, or it failed (a query or a request cut by it) and a retry
    # of it succeeded.
    of_day = [r for r in seen if r["tags"].get("dagster/partition") == day]
    assert of_day[-1]["status"] == "SUCCESS"
    for failed in (r for r in of_day if r["status"] == "FAILURE"):
        retries = [r for r in of_day if r["tags"].get("dagster/parent_run_id") == failed["id"]]
        assert retries, f"run {failed['id']} of {day} failed and was not retried"
    expected = len(load().day("flights", day))
    assert day_counts()[day] == (expected, expected)  # every flight, none twice


def _launching(instance, before: frozenset[str]) -> str | None:
    """The id of a new run being launched: starting, or started with no step begun yet."""
    import dagster as dg

    statuses = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    for record in instance.get_run_records(dg.RunsFilter(statuses=statuses)):
        run_id = record.dagster_run.run_id
        if run_id in before:
            continue
        if not instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START):
            return run_id
    return None


def settled(seen: list[dict]) -> bool:
    """Whether no run is queued, starting or started: none is stuck."""
    return not [r for r in seen if r["status"] in ("QUEUED", "STARTING", "STARTED")]
