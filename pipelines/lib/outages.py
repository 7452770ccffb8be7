"""Outages: which errors say that a service was out of reach for a while, and which service.

A step that fails because the object store, the MLflow server or a PostgreSQL database (the
warehouse, Optuna's storage) is restarting or cut off succeeds once it is back; a step that
fails on a failed dbt test, a blocking check, a bad file or a wrong bucket fails again however
long it waits, and should fail at once. `outage` tells the two apart from what the error and
its causes are: a connection refused, reset or timed out, a 5xx or throttled answer, a database
shutting down or starting up. An error it does not know is not an outage.

Types are matched by name along each error's MRO, so that classifying an error never imports
the libraries (MLflow, DVC) that a step may not have loaded.
"""

from __future__ import annotations

import errno
import re
import socket
from dataclasses import dataclass

from pipelines.lib.errors import causes

# Errors that are about the connection, whatever the service said or would have said.
TRANSIENT_TYPES = frozenset(
    {
        "builtins.ConnectionError",  # refused, reset, aborted, broken pipe
        "builtins.TimeoutError",
        "botocore.exceptions.EndpointConnectionError",
        "botocore.exceptions.ConnectTimeoutError",
        "botocore.exceptions.ReadTimeoutError",
        "botocore.exceptions.ConnectionClosedError",
        "urllib3.exceptions.NewConnectionError",
        "urllib3.exceptions.ConnectTimeoutError",
        "urllib3.exceptions.ReadTimeoutError",
        "urllib3.exceptions.ProtocolError",
        "requests.exceptions.ConnectionError",
        "requests.exceptions.Timeout",
        # What urllib3 raises once its own retries of 429 and 5xx answers are spent.
        "requests.exceptions.RetryError",
        "aiohttp.client_exceptions.ClientConnectionError",
        "aiohttp.client_exceptions.ServerTimeoutError",
        # DVC logs why each file failed and raises only the count; the remote was listed
        # just before (`DvcDatasets.check`), so a transfer failing after it is the outage.
        "dvc.exceptions.FileTransferError",
    }
)
# Subclasses of the above that a wait does not cure: a certificate or a proxy is a setting.
NEVER_TRANSIENT_TYPES = frozenset(
    {
        "requests.exceptions.SSLError",
        "requests.exceptions.ProxyError",
        "botocore.exceptions.SSLError",
        "botocore.exceptions.ProxyConnectionError",
        "aiohttp.client_exceptions.ClientSSLError",
    }
)
TRANSIENT_ERRNOS = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN})
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# S3's codes for "slow down" and "try again", whatever the status they come with.
TRANSIENT_S3_CODES = frozenset(
    {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling"}
)
# PostgreSQL's connection exceptions (class 08), and a server shutting down or starting up.
TRANSIENT_SQLSTATES = ("08", "57P01", "57P02", "57P03")
# What libpq, and dbt passing on its errors, say when the connection is lost or never made.
CONNECTION_LOST = re.compile(
    r"connection refused|could not connect to server|server closed the connection"
    r"|terminating connection due to administrator command|connection reset by peer"
    r"|the database system is (?:starting up|shutting down|in recovery mode)"
    r"|timeout expired|connection timed out|could not receive data from server"
    r"|no connection to the server|connection already closed",
    re.IGNORECASE,
)
# MLflow's message for a 5xx answer that was not JSON (a proxy's): the status is only in it.
MLFLOW_STATUS = re.compile(r"failed with error code (\d{3}) != 200")

# Who an error came from, by the package of its type or the words of its message (the
# project's own errors name the service and its setting).
SERVICES = (
    (("botocore", "boto3", "s3fs", "aiobotocore", "dvc"), ("S3 ", "FLYWHEEL_DVC_REMOTE"), "S3"),
    (("mlflow",), ("MLflow", "MLFLOW_TRACKING_URI"), "MLflow"),
    (("dagster_dbt", "pipelines.lib.warehouse"), ("warehouse",), "the warehouse"),
    ((), ("Optuna",), "Optuna's study storage"),
    (("psycopg2", "psycopg", "sqlalchemy"), (), "PostgreSQL"),
)
UNKNOWN_SERVICE = "a service"


@dataclass(frozen=True)
class Outage:
    """An error that a wait may cure: the service it came from, the error as raised (the
    project's own errors name the service and its setting) and the cause that makes it one."""

    service: str
    error: BaseException
    cause: BaseException

    def describe(self) -> str:
        """The error as raised, in one line: "ConfigurationError: S3 endpoint ... unreachable"."""
        text = str(self.error).strip().splitlines()
        return type(self.error).__name__ + (f": {text[0]}" if text else "")


def outage(error: BaseException) -> Outage | None:
    """The outage that `error` (or one of its causes) reports, None if it reports none."""
    chain = causes(error)
    transient = next((e for e in chain if is_transient(e)), None)
    if transient is None:
        return None
    return Outage(service_of(chain), error, transient)


def is_transient(error: BaseException) -> bool:
    """Whether `error` itself, not its causes, says that the service was out of reach."""
    names = type_names(error)
    if names & NEVER_TRANSIENT_TYPES:
        return False
    if names & TRANSIENT_TYPES:
        return True
    if isinstance(error, socket.gaierror):
        return error.errno == socket.EAI_AGAIN  # "temporary failure in name resolution"
    if isinstance(error, OSError) and error.errno in TRANSIENT_ERRNOS:
        return True
    return _answer_is_transient(error, names)


def _answer_is_transient(error: BaseException, names: frozenset[str]) -> bool:
    """Whether the service answered, and what it answered says "try again later"."""
    if "botocore.exceptions.ClientError" in names:
        response = getattr(error, "response", {})
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = response.get("Error", {}).get("Code")
        return status in TRANSIENT_STATUSES or code in TRANSIENT_S3_CODES
    if "requests.exceptions.HTTPError" in names:
        response = getattr(error, "response", None)
        return getattr(response, "status_code", None) in TRANSIENT_STATUSES
    if "mlflow.exceptions.RestException" in names:
        # A 500 is also a bug on the server: only one that lost its own database is transient.
        status = error.get_http_status_code()  # type: ignore[attr-defined]
        return status in TRANSIENT_STATUSES - {500} or bool(CONNECTION_LOST.search(str(error)))
    if "mlflow.exceptions.MlflowException" in names:
        status = MLFLOW_STATUS.search(str(error))
        return status is not None and int(status.group(1)) in TRANSIENT_STATUSES - {500}
    if names & {"psycopg2.Error", "psycopg.Error"}:
        state = getattr(error, "pgcode", None) or getattr(error, "sqlstate", None)
        if state:
            return state.startswith(TRANSIENT_SQLSTATES)
        return bool(CONNECTION_LOST.search(str(error)))
    if "dagster_dbt.errors.DagsterDbtCliRuntimeError" in names:
        return bool(CONNECTION_LOST.search(str(error)))
    return False


def service_of(chain: list[BaseException]) -> str:
    """The service that the errors of `chain` (outermost first) name, first named first."""
    for error in chain:
        names, text = type_names(error), str(error)
        for packages, words, service in SERVICES:
            if any(n.startswith(f"{p}.") for n in names for p in packages):
                return service
            if any(w in text for w in words):
                return service
    return UNKNOWN_SERVICE


def type_names(error: BaseException) -> frozenset[str]:
    """`module.Class` of the type of `error` and of each of its bases."""
    return frozenset(f"{t.__module__}.{t.__qualname__}" for t in type(error).__mro__)
