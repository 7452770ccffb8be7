"""The stack's connection pooler in front of Dagster's database: the distribution's PgBouncer.

dagster-postgres holds no connection open (SQLAlchemy's NullPool, so that no instance keeps
connections): the daemon, the code server's sensor ticks and every run open a connection for each
storage call, dozens a second on an idle stack with its sensors on, and PostgreSQL starts a
server process for each. PgBouncer (session pooling) keeps the server connections and hands them
out: a client's connection costs a socket, not a process. Clients log in with the role's password
as before; PgBouncer checks it against the role's SCRAM verifier (`auth_file`, no password on
disk) and logs in to the server with the client's own SCRAM keys.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from deploy.stack import postgres, tls
from deploy.stack.processes import write_atomically

PACKAGE = "pgbouncer"
# Server connections per database: the daemon's threads, the webserver, the code server's ticks
# and up to four runs (deploy/dagster.stack.yaml) at once; a client beyond them waits its turn.
POOL_SIZE = 20
MAX_CLIENTS = 400


def binary() -> Path:
    """`pgbouncer`: /usr/sbin's or PATH's, installed from the distribution's packages when
    missing and running as root."""
    return postgres.installed(PACKAGE, _find, "PgBouncer (no pgbouncer in /usr/sbin or on PATH)")


def _find() -> Path | None:
    on_path = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    return Path(on_path) if on_path else None


def configure(
    folder: Path,
    host: str,
    port: int,
    server_port: int,
    role: str,
    secret: str,
    certificates: tls.Certificates,
) -> Path:
    """Write the pooler's settings under `folder` (listening on `host`:`port`, serving the
    database of `role`, named like it, of the server on `host`:`server_port`, to that role
    alone, whose SCRAM verifier is `secret`), installing PgBouncer first where it is missing; the
    path of its configuration file. TLS on both sides: clients must ask for it, and the pooler
    checks the server's certificate as the clients would."""
    binary()
    folder.mkdir(parents=True, exist_ok=True)
    postgres.give_to_server_user(folder)
    users = folder / "users.txt"
    write_atomically(users, f'"{role}" "{secret}"\n', mode=0o600)
    served = f"{role} = host={host} port={server_port} dbname={role}\n"
    config = folder / "pgbouncer.ini"
    write_atomically(
        config,
        f"""[databases]
{served}
[pgbouncer]
listen_addr = {host}
listen_port = {port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {users}
pool_mode = session
default_pool_size = {POOL_SIZE}
max_client_conn = {MAX_CLIENTS}
; a server connection is checked before it is handed out again: after a PostgreSQL restart a
; client never gets one the server ended
server_check_delay = 0
; after a failed login to the server (PostgreSQL restarting), every client is refused until the
; pooler tries again: 1 s, not the default 15 s that Dagster's retries (1 s) do not outlast
server_login_retry = 1
; the log holds errors and the minute's statistics, not a line per client connection
log_connections = 0
log_disconnections = 0
client_tls_sslmode = require
client_tls_cert_file = {certificates.certificate}
client_tls_key_file = {certificates.key}
server_tls_sslmode = verify-full
server_tls_ca_file = {certificates.authority}
""",
    )
    if os.geteuid() == 0:
        for path in (users, config):
            shutil.chown(path, postgres.SERVER_USER, postgres.SERVER_USER)
    return config


def command(config: Path) -> list[str]:
    """The pooler in the foreground (its log on standard error); run it as the server's user
    when root (PgBouncer refuses to run as root). `configure` installed it where it was
    missing."""
    return [str(_find() or PACKAGE), str(config)]


def ready(host: str, port: int, role: str, password: str) -> bool:
    """Whether the pooler on `host`:`port` logs `role` in to its database and answers a query."""
    import psycopg2

    try:
        connection = psycopg2.connect(
            host=host,
            port=port,
            user=role,
            password=password,
            dbname=role,
            connect_timeout=2,
        )
    except psycopg2.OperationalError:
        return False
    try:
        with connection.cursor() as cursor:
            cursor.execute("select 1")
            return cursor.fetchone() == (1,)
    finally:
        connection.close()
