"""The stack's PostgreSQL: the distribution's server, a cluster under FLYWHEEL_HOME, on loopback.

Run as root, the server's commands run as the `postgres` user (PostgreSQL refuses root), which
then owns the cluster's folder. The cluster's bootstrap role (`flywheel`, a superuser) only
administers it: each consumer logs in as a role of its own, no superuser, that owns its one
database and may connect to no other (`pg_hba.conf`), over TLS only. The passwords are in the
stack's secrets.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from deploy.stack import warehouse_roles
from deploy.stack.processes import StackError, free_port, write_atomically

PACKAGE = "postgresql"
SERVER_USER = "postgres"
ROLE = "flywheel"
INSTALL_LOCK = "/var/lock/flywheel-postgresql-install.lock"
DATABASES = ("dagster", "mlflow", "optuna", "warehouse")
# Each database's consumer logs in as the role named like it: Dagster's storage, MLflow's backend
# store, Optuna's studies, and the warehouse's owner (the pipeline's steps).
CONSUMER_ROLES = DATABASES
# Every role with a password of its own: the consumers', and the warehouse's others (dbt's, the
# reader's: deploy/stack/warehouse_roles.py).
ROLES = (*CONSUMER_ROLES, *warehouse_roles.ROLES)


def binaries() -> Path:
    """The folder of `initdb` and `pg_ctl`: the newest /usr/lib/postgresql/<version>/bin, or PATH's;
    installed from the distribution's packages when missing and running as root."""
    return installed(
        PACKAGE, _find, "PostgreSQL's server (no initdb under /usr/lib/postgresql/*/bin or on PATH)"
    )


def installed(package: str, find: Callable[[], Path | None], what: str) -> Path:
    """What `find` finds, after installing `package` from the distribution's packages when it
    finds nothing and this process runs as root with apt-get; StackError naming `what` and the
    package if still nothing."""
    found = find()
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        # Two stacks starting at once (two homes, or parallel tests) install once: apt-get
        # would refuse the second while the first holds dpkg's lock.
        with open(INSTALL_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            found = find()
            if found is None:
                _install(package)
                found = find()
    if found is None:
        raise StackError(
            f"{what} is not installed: install the `{package}` package (e.g. "
            f"`sudo apt-get install -y {package}`)"
        )
    return found


def _install(package: str) -> None:
    print(f"installing {package} from the distribution's packages (apt-get)", flush=True)
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StackError(f"`{' '.join(command)}` failed:\n{done.stderr[-2000:]}")


def _find() -> Path | None:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=_version)
    if versions:
        return versions[-1].parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _version(initdb: Path) -> int:
    name = initdb.parent.parent.name
    return int(name) if name.isdigit() else 0


def as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", SERVER_USER, "--", *command]


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(as_server_user(command), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StackError(f"{what} failed (`{' '.join(command)}`):\n{done.stdout}{done.stderr}")


def give_to_server_user(folder: Path) -> None:
    """Make `folder` the server user's; StackError naming a folder above it that user cannot
    enter."""
    if os.geteuid() != 0:
        return
    for parent in folder.parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            raise StackError(
                f"PostgreSQL runs as user {SERVER_USER!r}, which cannot enter {parent} (mode "
                f"{oct(mode & 0o777)}): put FLYWHEEL_HOME where that user can reach it, or "
                f"`chmod o+x {parent}`"
            )
    shutil.chown(folder, SERVER_USER, SERVER_USER)


def init_cluster(data: Path, password: str) -> bool:
    """Initialise a cluster in `data` (if there is none) with the stack's role; whether it did.

    initdb writes into a sibling folder renamed to `data` once complete, so a killed initdb
    leaves no half-made cluster behind.
    """
    if (data / "PG_VERSION").exists():
        return False
    bin_dir = binaries()
    partial = data.with_name(f".{data.name}.initdb")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    give_to_server_user(partial)
    secret = partial.with_name(f".{data.name}.password")
    secret.touch(mode=0o600)
    secret.write_text(password)
    if os.geteuid() == 0:
        shutil.chown(secret, SERVER_USER, SERVER_USER)
    try:
        _run(
            [
                *[str(bin_dir / "initdb"), "-D", str(partial), "-U", ROLE, f"--pwfile={secret}"],
                *["--auth-host=scram-sha-256", "--auth-local=scram-sha-256"],
                *["--encoding=UTF8", "--locale=C"],
            ],
            "initdb",
        )
    finally:
        secret.unlink(missing_ok=True)
    partial.rename(data)
    return True


def start(data: Path, port: int, log: Path) -> None:
    """Start the cluster on 127.0.0.1:`port` (TCP only), waiting until it accepts connections."""
    bin_dir = binaries()
    log.parent.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and not log.exists():
        log.touch()
        shutil.chown(log, SERVER_USER, SERVER_USER)
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories=''"
    _run(
        [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "start"],
        f"starting PostgreSQL (its log: {log})",
    )


def server_command(data: Path, host: str, port: int, certificate: Path, key: Path) -> list[str]:
    """The server in the foreground on `host`:`port` (TCP only, TLS with `certificate`), for a
    process manager."""
    return [
        *[str(binaries() / "postgres"), "-D", str(data)],
        *["-c", f"listen_addresses={host}", "-c", f"port={port}"],
        *["-c", "unix_socket_directories="],
        *["-c", "ssl=on", "-c", f"ssl_cert_file={certificate}", "-c", f"ssl_key_file={key}"],
        *["-c", "ssl_min_protocol_version=TLSv1.2"],
    ]


def write_hba(data: Path, clients: Sequence[str] = ("127.0.0.1",)) -> None:
    """Who may log in to what from the addresses `clients` (`pg_hba.conf`, read at start and on
    reload): over TLS only, the administrator to any database and to replication (the base
    backup of `python -m deploy.stack backup`), each consumer's role to its own database, the
    warehouse's other roles (dbt's, the reader) to the warehouse."""
    rows = []
    for client in clients:
        cidr = f"{client}/{128 if ':' in client else 32}"
        rows.append(f"hostssl all {ROLE} {cidr} scram-sha-256")
        rows.append(f"hostssl replication {ROLE} {cidr} scram-sha-256")
        rows += [f"hostssl {role} {role} {cidr} scram-sha-256" for role in CONSUMER_ROLES]
        rows += [f"hostssl warehouse {role} {cidr} scram-sha-256" for role in warehouse_roles.ROLES]
    path = data / "pg_hba.conf"
    text = "# Written by the stack at each start (deploy/stack/postgres.py).\n"
    write_atomically(path, text + "\n".join(rows) + "\n", mode=0o600)
    if os.geteuid() == 0:
        shutil.chown(path, SERVER_USER, SERVER_USER)


def ensure_roles(url: str, passwords: dict[str, str]) -> None:
    """Every role of `ROLES` (no superuser, no role or database creation) with its password;
    each consumer's owning its database and everything in it, which no other role may connect
    to, and the warehouse's others with their grants (deploy/stack/warehouse_roles.py).
    Idempotent; a stack whose databases the administrator owned hands them over, objects and
    all."""
    import psycopg2

    connection = psycopg2.connect(_libpq(url))
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            for role in ROLES:
                cursor.execute("select 1 from pg_roles where rolname = %s", (role,))
                verb = "alter" if cursor.fetchone() else "create"
                cursor.execute(
                    f'{verb} role "{role}" login nosuperuser nocreatedb nocreaterole '
                    "noreplication password %s",
                    (passwords[role],),
                )
            for role in CONSUMER_ROLES:
                cursor.execute(f'alter database "{role}" owner to "{role}"')
                cursor.execute(f'revoke all on database "{role}" from public')
    finally:
        connection.close()
    for role in CONSUMER_ROLES:
        _hand_over(url, role)
    warehouse_roles.ensure(_libpq(url), warehouse_roles.dbt_relations())


# Everything the administrator owns in a database, handed to the database's role: schemas, then
# tables (their indexes and their columns' sequences follow), views, other sequences, types.
HAND_OVER = """
do $$
declare item record;
begin
  for item in select nspname from pg_namespace where nspowner = %(admin)s::regrole
      and nspname !~ '^pg_' and nspname <> 'information_schema' loop
    execute format('alter schema %%I owner to %%I', item.nspname, %(role)s);
  end loop;
  -- Relations, then the sequences no table took along (a column's sequence moves with it).
  for kinds in 1..2 loop
    for item in select c.oid::regclass as name, c.relkind from pg_class c
        join pg_namespace n on n.oid = c.relnamespace
        where c.relowner = %(admin)s::regrole and n.nspname !~ '^pg_'
          and n.nspname <> 'information_schema'
          and c.relkind = any(case kinds when 1 then '{r,p,v,m,f}'::"char"[]
                                         else '{S}'::"char"[] end) loop
      execute format('alter %%s %%s owner to %%I', case item.relkind
        when 'v' then 'view' when 'm' then 'materialized view' when 'f' then 'foreign table'
        when 'S' then 'sequence' else 'table' end, item.name, %(role)s);
    end loop;
  end loop;
  for item in select t.oid::regtype as name from pg_type t
      join pg_namespace n on n.oid = t.typnamespace
      where t.typowner = %(admin)s::regrole and t.typtype in ('e', 'd')
        and n.nspname !~ '^pg_' and n.nspname <> 'information_schema' loop
    execute format('alter type %%s owner to %%I', item.name, %(role)s);
  end loop;
end $$;
"""


def _hand_over(url: str, role: str) -> None:
    import psycopg2

    connection = psycopg2.connect(_libpq(url).removesuffix("/postgres") + f"/{role}")
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute(HAND_OVER, {"admin": ROLE, "role": role})
    finally:
        connection.close()


def accepting(url: str) -> bool:
    """Whether the server at `url` (without a database) takes a session: not while it starts
    or recovers from a crash."""
    import psycopg2

    try:
        psycopg2.connect(_libpq(url), connect_timeout=2).close()
    except psycopg2.OperationalError:
        return False
    return True


def running(data: Path) -> bool:
    """Whether the cluster in `data` has a live server."""
    bin_dir = binaries()
    done = subprocess.run(
        as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "status"]),
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def stop(data: Path) -> bool:
    """Stop the cluster's server (fast shutdown: sessions are ended, nothing is lost)."""
    if not (data / "PG_VERSION").exists() or not running(data):
        return False
    _run([str(binaries() / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], "pg_ctl stop")
    return True


def scram_secret(url: str, role: str) -> str:
    """`role`'s SCRAM verifier as the server stores it (no password: what a pooler checks
    clients against, and logs in with on their behalf), read with the administrator's `url`."""
    import psycopg2

    connection = psycopg2.connect(_libpq(url))
    try:
        with connection.cursor() as cursor:
            cursor.execute("select rolpassword from pg_authid where rolname = %s", (role,))
            (secret,) = cursor.fetchone()
    finally:
        connection.close()
    if not secret or not secret.startswith("SCRAM-SHA-256$"):
        raise StackError(f"role {role!r} has no SCRAM-SHA-256 password on the stack's server")
    return secret


def create_databases(url: str) -> None:
    """Create the stack's databases that do not exist yet, through the role's connection."""
    import psycopg2

    connection = psycopg2.connect(_libpq(url))
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute("select datname from pg_database")
            present = {row[0] for row in cursor.fetchall()}
            for name in DATABASES:
                if name not in present:
                    cursor.execute(f'create database "{name}"')
    finally:
        connection.close()


def warehouse_settings(url: str, database: str = "warehouse") -> dict[str, str]:
    """The FLYWHEEL_WAREHOUSE_* settings of `database` on the server of SQLAlchemy URL `url`."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return {
        "FLYWHEEL_WAREHOUSE_HOST": parsed.host or "127.0.0.1",
        "FLYWHEEL_WAREHOUSE_PORT": str(parsed.port or 5432),
        "FLYWHEEL_WAREHOUSE_USER": parsed.username or ROLE,
        "FLYWHEEL_WAREHOUSE_PASSWORD": parsed.password or "",
        "FLYWHEEL_WAREHOUSE_DATABASE": database,
    }


@contextmanager
def scratch_database(url: str, name: str) -> Iterator[dict[str, str]]:
    """A new, empty database `name` on the server of `url` (dropped on exit, sessions and all);
    yields its FLYWHEEL_WAREHOUSE_* settings."""
    import psycopg2

    def admin(statement: str) -> None:
        connection = psycopg2.connect(_libpq(url))
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute(statement)
        finally:
            connection.close()

    admin(f'create database "{name}"')
    try:
        yield warehouse_settings(url, name)
    finally:
        admin(f'drop database if exists "{name}" with (force)')


def _libpq(url: str) -> str:
    """The SQLAlchemy URL `url` (no database) as libpq's, to the `postgres` database."""
    return url.replace("postgresql+psycopg2://", "postgresql://", 1) + "/postgres"


@contextmanager
def scratch_server(home: Path) -> Iterator[str]:
    """A server of its own under `home` on a free loopback port, with the stack's role and
    databases, stopped on exit (tests and benchmarks); yields its SQLAlchemy URL without a
    database (`<url>/optuna` and the others exist). `home`'s parents must let the server's
    user pass."""
    data, password = home / "data", secrets.token_hex(12)
    init_cluster(data, password)
    port = free_port()
    start(data, port, home / "postgres.log")
    url = f"postgresql+psycopg2://{ROLE}:{password}@127.0.0.1:{port}"
    try:
        create_databases(url)
        yield url
    finally:
        stop(data)
