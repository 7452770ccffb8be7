"""Step retries for outages: a step that met an unreachable service is retried with back-off;
one that failed on anything else fails at once with its own error (pipelines/lib/outages.py,
pipelines/defs/runs/retries.py)."""

import errno
import socket
import urllib.error
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
import requests
from botocore.exceptions import ClientError, EndpointConnectionError
from dagster._utils.error import SerializableErrorInfo
from dagster_aws.s3 import S3Resource
from dagster_dbt.errors import DagsterDbtCliRuntimeError
from dvc.exceptions import UploadError
from mlflow.exceptions import MlflowException, RestException

from pipelines.defs.runs import retries
from pipelines.defs.runs.retries import OutageOutlastedRetriesError, is_guarded, retry_outages
from pipelines.lib.datasets import DvcCommandError
from pipelines.lib.errors import ConfigurationError, probe_bucket
from pipelines.lib.landing_zone import S3LandingZone
from pipelines.lib.outages import outage
from pipelines.lib.warehouse.base import WarehouseLockedError

WAITS = (0.01, 0.02, 0.03)


@pytest.fixture
def short_waits(monkeypatch) -> tuple[float, ...]:
    """Waits of a few hundredths of a second, without jitter, so a test sees every retry."""
    monkeypatch.setattr(retries, "BACKOFF_S", WAITS)
    monkeypatch.setattr(retries, "JITTER", 0.0)
    return WAITS


@pytest.fixture(scope="module")
def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def caused(error: BaseException, cause: BaseException) -> BaseException:
    """`error` as raised `from cause`."""
    try:
        raise error from cause
    except BaseException as raised:
        return raised


def s3_error(code: str, status: int) -> ClientError:
    response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "GetObject")  # type: ignore[arg-type]


def psycopg_error(message: str) -> Exception:
    import psycopg2

    return psycopg2.OperationalError(message)


def lost_request() -> MlflowException:
    """What MLflow's REST client raises once its own retries of a refused connection are spent:
    raised while handling the connection error, not from it."""
    lost = requests.exceptions.ConnectionError("Max retries exceeded: Connection refused")
    error = MlflowException(f"API request to http://mlflow/api failed with exception {lost}")
    error.__context__ = lost
    return error


S3_UNREACHABLE = "S3 endpoint http://s3:9000 (FLYWHEEL_S3_ENDPOINT_URL) is unreachable"
DBT_FAILED = "The dbt CLI process with command\n\n`dbt build`\n\nfailed with exit code `1`."
# (error, the service an outage names, or None where the error is no outage)
TABLE = {
    "connection refused": (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "a service"),
    "connection reset": (ConnectionResetError(errno.ECONNRESET, "reset by peer"), "a service"),
    "socket timeout": (TimeoutError("timed out"), "a service"),
    "host unreachable": (OSError(errno.EHOSTUNREACH, "No route to host"), "a service"),
    "name resolution for now": (socket.gaierror(socket.EAI_AGAIN, "try again"), "a service"),
    "S3 unreachable, as the landing zone names it": (
        caused(
            ConfigurationError(S3_UNREACHABLE),
            EndpointConnectionError(endpoint_url="http://s3:9000/landing"),
        ),
        "S3",
    ),
    "S3 slow down": (s3_error("SlowDown", 503), "S3"),
    "S3 internal error": (s3_error("InternalError", 500), "S3"),
    "DVC push cut off": (
        caused(DvcCommandError("dvc could not push"), UploadError(2)),
        "S3",
    ),
    "MLflow unreachable, as the tracker names it": (
        caused(
            ConfigurationError(
                "MLflow tracking server http://m (MLFLOW_TRACKING_URI) is unreachable"
            ),
            urllib.error.URLError(ConnectionRefusedError(errno.ECONNREFUSED, "refused")),
        ),
        "MLflow",
    ),
    "MLflow request lost": (lost_request(), "MLflow"),
    "MLflow temporarily unavailable": (
        RestException({"error_code": "TEMPORARILY_UNAVAILABLE", "message": "busy"}),
        "MLflow",
    ),
    "MLflow lost its database": (
        RestException(
            {"error_code": "INTERNAL_ERROR", "message": "server closed the connection unexpectedly"}
        ),
        "MLflow",
    ),
    "MLflow 503 from a proxy": (
        MlflowException("API request to endpoint /x failed with error code 503 != 200"),
        "MLflow",
    ),
    "PostgreSQL refused": (
        psycopg_error('connection to server at "db", port 5432 failed: Connection refused'),
        "PostgreSQL",
    ),
    "warehouse restarting, as its check names it": (
        caused(
            ConfigurationError("warehouse PostgreSQL (FLYWHEEL_WAREHOUSE_HOST=db, _PORT=5432)"),
            psycopg_error("FATAL:  the database system is starting up"),
        ),
        "the warehouse",
    ),
    "dbt lost the warehouse": (
        DagsterDbtCliRuntimeError(f"{DBT_FAILED}\nDatabase Error\n  could not connect to server"),
        "the warehouse",
    ),
    # Deterministic: each fails again however long it waits.
    "a bad input": (ValueError("humidity must be a number"), None),
    "a missing file": (FileNotFoundError("no file 'x.csv' in landing zone"), None),
    "a full disk": (OSError(errno.ENOSPC, "No space left on device"), None),
    "a host name that does not exist": (socket.gaierror(socket.EAI_NONAME, "unknown"), None),
    "a missing bucket": (
        caused(ConfigurationError("bucket 'x' does not exist"), s3_error("NoSuchBucket", 404)),
        None,
    ),
    "S3 access denied": (s3_error("AccessDenied", 403), None),
    "a certificate refused": (requests.exceptions.SSLError("certificate verify failed"), None),
    "MLflow bad parameter": (
        RestException({"error_code": "INVALID_PARAMETER_VALUE", "message": "bad"}),
        None,
    ),
    "MLflow bug": (RestException({"error_code": "INTERNAL_ERROR", "message": "KeyError"}), None),
    "a wrong password": (
        caused(
            ConfigurationError("warehouse PostgreSQL (FLYWHEEL_WAREHOUSE_USER, _PASSWORD)"),
            psycopg_error('FATAL:  password authentication failed for user "flywheel"'),
        ),
        None,
    ),
    "a partition lock held too long": (
        caused(
            WarehouseLockedError("warehouse stayed locked"),
            psycopg_error("canceling statement due to lock timeout"),
        ),
        None,
    ),
    "a failed dbt test": (
        DagsterDbtCliRuntimeError(f"{DBT_FAILED}\nFailure in test unique_stg_flights_id (2)"),
        None,
    ),
    "a blocking check": (dg.Failure("refused by the volume check", allow_retries=False), None),
}


@pytest.mark.parametrize("case", TABLE)
def test_outages_are_told_from_errors_that_fail_again(case):
    error, service = TABLE[case]
    found = outage(error)
    assert (found.service if found else None) == service


def test_what_the_clients_raise_at_a_closed_port_is_an_outage(closed_port, monkeypatch):
    import psycopg2

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    endpoint = f"http://127.0.0.1:{closed_port}"
    raised = []
    for call in (
        lambda: probe_bucket("landing", "FLYWHEEL_LANDING_BUCKET", endpoint, 2.0),
        lambda: requests.get(f"{endpoint}/health", timeout=2),
        lambda: psycopg2.connect(host="127.0.0.1", port=closed_port, connect_timeout=2),
    ):
        with pytest.raises(Exception) as error:
            call()
        raised.append(error.value)
    assert [outage(e).service if outage(e) else None for e in raised] == [
        "S3",
        "a service",
        "PostgreSQL",
    ]


def attempts_of(result: dg.ExecuteInProcessResult, step: str) -> tuple[int, list]:
    """How many times `step` started, and its STEP_UP_FOR_RETRY events."""
    events = result.events_for_node(step)
    starts = [e for e in events if e.event_type_value in ("STEP_START", "STEP_RESTARTED")]
    return len(starts), [e for e in events if e.event_type_value == "STEP_UP_FOR_RETRY"]


def step_error(result: dg.ExecuteInProcessResult) -> SerializableErrorInfo:
    """The error the one failed step failed with, as the UI shows it (under Dagster's wrapper)."""
    (failure,) = result.get_step_failure_events()
    error = failure.step_failure_data.error
    return error.cause if error.cls_name == "DagsterExecutionStepExecutionError" else error


def warnings_of(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [
        e.user_message
        for e in instance.all_logs(run_id)
        if e.level == 30 and e.dagster_event is None  # logging.WARNING, from the step's log
    ]


class DayConfig(dg.Config):
    day: str


def flaky_service(failures: int, error: Callable[[], Exception]) -> tuple[list[int], Callable]:
    """A call that raises a new `error()` the first `failures` times, recording each attempt."""
    attempts: list[int] = []

    def call() -> int:
        attempts.append(len(attempts))
        if len(attempts) <= failures:
            raise error()
        return len(attempts)

    return attempts, call


@pytest.mark.parametrize("shape", ["function", "generator"])
def test_a_step_that_meets_an_outage_twice_is_retried_twice_and_completes(short_waits, shape):
    attempts, call = flaky_service(
        2, lambda: EndpointConnectionError(endpoint_url="http://s3:9000/x")
    )

    if shape == "function":  # with a context and run config, as the training step has

        @dg.asset
        def day_table(context: dg.AssetExecutionContext, config: DayConfig) -> int:
            assert config.day == "2013-01-02" and context.has_partition_key is False
            return call()

    else:  # as the dbt assets yield their events

        @dg.asset
        def day_table():
            yield dg.Output(call())

    instance = dg.DagsterInstance.ephemeral()
    config = (
        {"ops": {"day_table": {"config": {"day": "2013-01-02"}}}} if shape == "function" else None
    )
    result = dg.materialize([retry_outages(day_table)], instance=instance, run_config=config)
    assert result.success and len(attempts) == 3
    assert result.output_for_node("day_table") == 3
    started, retried = attempts_of(result, "day_table")
    assert started == 3
    assert [e.event_specific_data.seconds_to_wait for e in retried] == list(short_waits[:2])
    logged = warnings_of(instance, result.run_id)
    assert len(logged) == 2
    for number, (line, wait) in enumerate(zip(logged, short_waits, strict=False), start=1):
        assert line.startswith("S3 unreachable (EndpointConnectionError: Could not connect")
        assert f"retry {number} of {len(short_waits)}" in line
        assert line.endswith(f"in {wait:.3g} s")


@pytest.mark.parametrize(
    "error",
    [
        ValueError("a bad input"),
        DagsterDbtCliRuntimeError(f"{DBT_FAILED}\nFailure in test not_null_stg_flights_id (1)"),
    ],
    ids=["bad input", "failed dbt test"],
)
def test_an_error_that_is_no_outage_fails_at_once_with_its_own_error(short_waits, error):
    attempts, call = flaky_service(1, lambda: error)

    @dg.asset
    def day_table() -> int:
        return call()

    result = dg.materialize([retry_outages(day_table)], raise_on_error=False)
    assert not result.success and len(attempts) == 1
    started, retried = attempts_of(result, "day_table")
    assert (started, retried) == (1, [])
    failed = step_error(result)
    assert failed.cls_name == type(error).__name__
    assert str(error).splitlines()[-1] in failed.message


def test_an_outage_that_outlasts_the_retries_fails_the_run_naming_service_and_error(short_waits):
    attempts, call = flaky_service(
        99, lambda: ConnectionResetError(errno.ECONNRESET, "reset by peer")
    )

    @dg.asset
    def day_table() -> int:
        return call()

    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([retry_outages(day_table)], instance=instance, raise_on_error=False)
    assert not result.success
    assert len(attempts) == len(short_waits) + 1
    failed = step_error(result)
    assert failed.cls_name == OutageOutlastedRetriesError.__name__
    assert f"stayed unreachable through {len(short_waits)} retries" in failed.message
    assert "ConnectionResetError: [Errno 104] reset by peer" in failed.message
    # The last error in full, once: as the cause of the failure.
    assert failed.cause.cls_name == "ConnectionResetError"
    assert failed.to_string().count("reset by peer") == 2  # the message and the cause
    assert len(warnings_of(instance, result.run_id)) == len(short_waits)


def test_every_asset_of_the_definitions_retries_outages(flywheel):
    assets = [a for a in flywheel.defs.assets if isinstance(a, dg.AssetsDefinition)]
    assert len(assets) > 10
    assert [a.node_def.name for a in assets if not is_guarded(a)] == []


def test_a_landing_zone_outage_is_retried_through_the_definitions_then_named(
    flywheel, short_waits, closed_port, monkeypatch
):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    endpoint = f"http://127.0.0.1:{closed_port}"
    zone = S3LandingZone(s3=S3Resource(endpoint_url=endpoint), bucket="landing")
    airports = flywheel.defs.get_assets_def(flywheel.key("raw_airports"))
    result = dg.materialize(
        [airports],
        resources={"landing_zone": zone, "warehouse": flywheel.resource},
        instance=flywheel.instance,
        raise_on_error=False,
    )
    assert not result.success
    started, retried = attempts_of(result, airports.node_def.name)
    assert (started, len(retried)) == (len(short_waits) + 1, len(short_waits))
    failed = step_error(result)
    assert failed.cls_name == OutageOutlastedRetriesError.__name__
    assert failed.message.startswith(
        f"pipelines.defs.runs.retries.OutageOutlastedRetriesError: S3 stayed unreachable through "
        f"{len(short_waits)} retries"
    )
    # The landing zone's own error, naming the setting: in the message, and in full as the cause.
    assert f"S3 endpoint {endpoint} (FLYWHEEL_S3_ENDPOINT_URL) is unreachable" in failed.message
    assert failed.cause.cls_name == "ConfigurationError"


COUNTER = "FLYWHEEL_TEST_ATTEMPTS_FILE"


@dg.asset
def refused_once() -> int:
    """Refused at its first attempt, in whatever process runs it (the count is in a file)."""
    import os

    path = Path(os.environ[COUNTER])
    path.write_text(path.read_text() + "x")
    if len(path.read_text()) == 1:
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    return 1


def multiprocess_job() -> dg.JobDefinition:
    """The job of `refused_once` on the multiprocess executor, loaded again in each step's process
    (so the short wait is set here: the test's patch is in its own process only)."""
    retries.BACKOFF_S = (0.01,)
    return dg.Definitions(
        assets=[retry_outages(refused_once)],
        jobs=[dg.define_asset_job("refused_job", executor_def=dg.multiprocess_executor)],
    ).resolve_job_def("refused_job")


@pytest.mark.integration  # a process per step: seconds of imports each
def test_a_step_in_a_process_of_its_own_is_retried_too(tmp_path, monkeypatch):
    counter = tmp_path / "attempts"
    counter.write_text("")
    monkeypatch.setenv(COUNTER, str(counter))
    monkeypatch.setattr(retries, "BACKOFF_S", (0.01,))
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        job = dg.reconstructable(multiprocess_job)
        with dg.execute_job(job, instance=instance) as result:
            assert result.success
            retried = [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert counter.read_text() == "xx" and len(retried) == 1
