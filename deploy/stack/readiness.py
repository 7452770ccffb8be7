"""Whether the stack's Dagster processes are ready: the code server has loaded its code location,
the daemon's loops have all beaten; and before they start, whether the settings are."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil

from deploy.stack.processes import StackError

# A load that failed on its database connection: Dagster retries one for a few seconds, which a
# PostgreSQL still recovering, a pooler refusing logins until it reaches it again, or a machine
# too loaded to answer in time can outlast.
DATABASE_UNREACHABLE = ("too many retries for DB connection", "psycopg2.OperationalError")
RELOAD_TIMEOUT_S = 60


def code_server_ready(host: str, port: int) -> bool:
    """Whether the code server on `host`:`port` answers with its loaded code location;
    StackError with the location's error if it could not load it. A load that failed only on
    reaching its database is asked for again, as for any service still starting: the caller's
    deadline bounds the wait, and the code server's log holds each failure."""
    from dagster._api.list_repositories import sync_list_repositories_grpc
    from dagster._core.errors import DagsterUserCodeProcessError, DagsterUserCodeUnreachableError
    from dagster._grpc.client import DagsterGrpcClient

    client = DagsterGrpcClient(port=port, host=host)
    try:
        sync_list_repositories_grpc(client)
    except DagsterUserCodeUnreachableError:  # not listening yet: it is still loading
        return False
    except DagsterUserCodeProcessError as error:
        if not any(sign in str(error) for sign in DATABASE_UNREACHABLE):
            raise StackError(f"the code location could not be loaded:\n{error}") from error
        # A reload not answered in time is still loading: the next call asks again.
        with contextlib.suppress(DagsterUserCodeUnreachableError):
            client.reload_code(timeout=RELOAD_TIMEOUT_S)
        return False
    return True


def daemon_ready(pid: int | None, dagster_home: Path) -> bool:
    """Whether the daemon (process `pid`) has beaten in its sensor, schedule, run-queue and
    monitoring loops since it started, on the instance of `dagster_home`."""
    import dagster as dg
    from dagster_postgres.utils import DagsterPostgresException

    needed = {"SENSOR", "SCHEDULER", "QUEUED_RUN_COORDINATOR", "MONITORING"}
    if pid is None:
        return False
    process = psutil.Process(pid)
    try:
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
            beats = instance.get_daemon_heartbeats()
    except DagsterPostgresException:  # the database not reached in Dagster's retries: not yet
        return False
    fresh = {kind for kind, beat in beats.items() if beat.timestamp >= process.create_time()}
    return needed <= fresh


def preflight() -> None:
    """Every setting the code location and its runs need names a service that answers
    (pipelines/preflight.py), before the Dagster processes start."""
    from pipelines.lib.errors import ConfigurationError
    from pipelines.preflight import require_settings

    try:
        require_settings()
    except ConfigurationError as e:
        raise StackError(f"the stack's settings fail their checks:\n{e}") from e
