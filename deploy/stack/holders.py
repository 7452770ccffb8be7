"""Who on the stack may hold which secret: the table the secret scan holds every process of the
stack to (deploy/secret_scan.py), where a secret found in a process outside it is a hit.

Each service gets only its share of the stack's settings (deploy/stack/shares.py) and the
processes it starts inherit no more, so a process is the holder its service is: a run's
process is the code server's.
"""

from __future__ import annotations

from collections.abc import Mapping

from deploy import secret_scan
from deploy.stack import mlflow_auth, shares, state, warehouse_roles
from deploy.stack.stack import Stack

# The stack's secrets that no setting carries, by the names the scan gives them.
ADMIN_PASSWORD = "the stack's administrator password"
READER_PASSWORD = "the warehouse reader's password"
# The MLflow server's own secrets: its backend store's URL (the `mlflow` role's password), the
# administrator's password and the session key of its authentication app.
MLFLOW_SERVER = frozenset(
    {"MLFLOW_BACKEND_STORE_URI", "MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY"}
)
# The object store's keys but the runs' (AWS_SECRET_ACCESS_KEY in stack.env), by the names the
# scan gives them (deploy/stack/s3.py, IDENTITIES).
S3_KEYS = {
    "admin": "the object store's administrator key",
    "mlflow": "the object store's MLflow key",
    "compute-logs": "the object store's compute logs key",
}
INSTANCE_SECRETS = frozenset({"DAGSTER_PG_PASSWORD", S3_KEYS["compute-logs"]})
# Which secret each process of the stack may hold, the processes a service starts with it.
# supervisord, PostgreSQL, PgBouncer and the object store hold none: the server and the pooler
# read their passwords' verifiers, the store its identity, from their files, and nginx checks
# the UI's passwords against their hashes. Nothing of the stack holds the administrator's, the
# reader's or the UI operator's password, nor the object store's administrator key or the
# landing producer's: `stack up`, `backup` and the people and clients using them do. MLflow,
# the webserver and the daemon hold keys of the object store limited to their prefixes; the
# runs' key is the code server's.
HOLDERS: dict[str, frozenset[str]] = {
    "supervisord": frozenset(),
    "postgres": frozenset(),
    "pgbouncer": frozenset(),
    "s3": frozenset(),
    "mlflow": frozenset({S3_KEYS["mlflow"], *MLFLOW_SERVER}),
    "code_server": frozenset(secret_scan.SECRET_SETTINGS) - set(shares.CLIENTS_ONLY),
    "daemon": INSTANCE_SECRETS,
    "webserver": INSTANCE_SECRETS,
    "webserver_viewer": INSTANCE_SECRETS,
    "proxy": frozenset(),
}


# The services whose processes' environments the scan cannot read on a running stack: nginx
# writes its process title over its environment's memory, which /proc then shows. Their share
# of the settings is empty (deploy/stack/shares.py), and their command lines are scanned.
UNREADABLE = frozenset({"proxy"})


def stack_secrets(stack: Stack) -> dict[str, str]:
    """Every secret of `stack`, by name: the settings that hold one, the MLflow server's own,
    and the passwords only the stack's files hold."""
    settings, kept = stack.environment(), stack.settings
    server = mlflow_auth.server_environment(stack.root / mlflow_auth.CONFIG, kept["secrets"])
    return {
        **{name: settings[name] for name in secret_scan.SECRET_SETTINGS if settings.get(name)},
        "MLFLOW_BACKEND_STORE_URI": stack.postgres_url("mlflow"),
        **{name: value for name, value in server.items() if name in MLFLOW_SERVER},
        **{
            S3_KEYS[name]: secret for name, secret in state.s3_keys(kept).items() if name in S3_KEYS
        },
        ADMIN_PASSWORD: kept["postgres_password"],
        READER_PASSWORD: kept["roles"][warehouse_roles.READER],
    }


def holders(url: str, supervisord: int | None) -> secret_scan.Holders:
    """The scan's table for the stack whose supervisord answers at `url`, with pid `supervisord`:
    a process is the service supervisord names in its environment (inherited by what the
    service starts), or supervisord itself."""

    def of(pid: int, environment: Mapping[str, str]) -> str | None:
        if pid == supervisord:
            return "supervisord"
        if environment.get("SUPERVISOR_SERVER_URL") != url:
            return None
        return environment.get("SUPERVISOR_PROCESS_NAME", "supervisord")

    return secret_scan.Holders(of, HOLDERS)


def holdings(scanner: secret_scan.SecretScanner, table: secret_scan.Holders) -> dict[str, set]:
    """The secrets found in the environments of the processes `table` places, by holder (each
    holder that has a process, even one holding none): what the scan of the table read."""
    import psutil

    found: dict[str, set] = {}
    for process in psutil.process_iter():
        try:
            environment = process.environ()
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        holder = table.of(process.pid, environment)
        if holder is not None:
            held = found.setdefault(holder, set())
            held |= {
                hit.secret for value in environment.values() for hit in scanner.text(value, "")
            }
    return found
