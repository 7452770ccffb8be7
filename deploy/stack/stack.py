"""The production-shaped stack on one machine: every service a separate process, listening on one
address (127.0.0.1 unless `FLYWHEEL_STACK_ADDRESS` named another when the stack was made).

PostgreSQL (Dagster's storage, reached through PgBouncer; MLflow's backend store, Optuna's
studies), an S3-compatible object store (SeaweedFS: landing zone, labeling, DVC remote, MLflow's
artifacts), an MLflow tracking server, the code location as a gRPC server, the Dagster daemon and
the webserver, each run by supervisord, which restarts a service that dies.
Everything lives under `$FLYWHEEL_HOME/stack`: `up` starts what is not running and is
idempotent; `down` stops the processes and keeps the state, so `up` again resumes, as it does
after a crash or a reboot (every part keeps its state on disk as it goes).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from deploy.stack import instance, mlflow_auth, pgbouncer, postgres, proxy, s3, shares, state, tls
from deploy.stack.processes import http_ok, write_atomically
from deploy.stack.readiness import code_server_ready, daemon_ready, preflight
from deploy.stack.supervisor import Service, Supervisor
from deploy.stack.warehouse_roles import environment as warehouse_environment
from pipelines.settings import SENSOR_INTERVAL, SETTINGS, environment_of

REPO = Path(__file__).resolve().parents[2]
BUCKET = "flywheel"
PORTS = ("postgres", *s3.PORTS, "mlflow", "code_server", "webserver", "pgbouncer")
# The viewers' webserver and the login in front of both (deploy/stack/proxy.py).
PORTS += ("webserver_viewer", "ui")
# Started in this order, stopped in the reverse one.
SERVICES = ("postgres", "pgbouncer", "s3", "mlflow", "code_server", "daemon")
SERVICES += ("webserver", "webserver_viewer", "proxy")
# The database (and role) whose clients reach PostgreSQL through the pooler: Dagster's, whose
# storage opens a connection for each call. MLflow's server and SQLAlchemy's engines of the others
# keep theirs.
POOLED = "dagster"


@dataclass(frozen=True)
class Stack:
    """The stack whose state is under `root` (`$FLYWHEEL_HOME/stack`)."""

    root: Path

    @classmethod
    def of_home(cls, home: Path) -> Stack:
        return cls(home / "stack")

    @property
    def supervisor(self) -> Supervisor:
        return Supervisor(self.root)

    @property
    def pg_data(self) -> Path:
        return self.root / "postgres"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace.yaml"

    @property
    def env_file(self) -> Path:
        return self.root / "stack.env"

    @property
    def objects(self) -> Path:
        """The object store's data."""
        return self.root / "objects"

    @property
    def proxy(self) -> Path:
        """The login in front of the Dagster UI: its identities and nginx's files."""
        return self.root / "proxy"

    @property
    def identities(self) -> Path:
        return self.root / "s3-identities.json"

    @cached_property
    def settings(self) -> dict:
        """Addresses, ports and secrets, chosen once and kept (`stack.json`, readable by its
        owner only)."""
        return state.chosen(self.root, PORTS)

    @property
    def address(self) -> str:
        """Where the services listen and are reached."""
        return self.settings["address"]

    @property
    def code_server_address(self) -> str:
        """Where the code server listens and is reached (the runs it starts are where it is)."""
        return self.settings["code_server_address"]

    def environment(self) -> dict[str, str]:
        """The `FLYWHEEL_ENV=prod` settings of this stack, the code server's (`shares.SHARES`)."""
        chosen, host = self.settings, self.address
        ports = chosen["ports"]
        endpoint = f"https://{host}:{ports['s3']}"
        return {
            "FLYWHEEL_ENV": "prod",
            "FLYWHEEL_HOME": str(self.root.parent),
            "DAGSTER_HOME": str(self.dagster_home),
            # Where the runs' compute logs wait for their upload to the bucket (its owner's only).
            "FLYWHEEL_COMPUTE_LOG_DIR": str(self.root / "compute-logs"),
            # Dagster reaches its database through the pooler.
            "DAGSTER_PG_HOST": host,
            "DAGSTER_PG_PORT": str(ports["pgbouncer"]),
            "DAGSTER_PG_USER": "dagster",
            "DAGSTER_PG_PASSWORD": chosen["roles"]["dagster"],
            "DAGSTER_PG_DB": "dagster",
            **self.own_key("flywheel"),  # the runs' key of the object store (s3.IDENTITIES)
            "AWS_DEFAULT_REGION": "us-east-1",
            "FLYWHEEL_S3_ENDPOINT_URL": endpoint,
            "MLFLOW_S3_ENDPOINT_URL": endpoint,
            "FLYWHEEL_LANDING_BUCKET": BUCKET,
            "FLYWHEEL_DVC_REMOTE": f"s3://{BUCKET}/dvc",
            "FLYWHEEL_DVC_REPO": str(self.root / "checkout" / "data"),
            # The warehouse (dbt's `prod` target too): the steps' role, and dbt's own.
            **warehouse_environment(host, ports["postgres"], chosen["roles"]),
            "MLFLOW_TRACKING_URI": f"https://{host}:{ports['mlflow']}",
            # MLflow's server asks every client for a user (deploy/stack/mlflow_auth.py).
            "MLFLOW_TRACKING_USERNAME": mlflow_auth.RUNS_USER,
            "MLFLOW_TRACKING_PASSWORD": chosen["secrets"]["mlflow_runs"],
            "FLYWHEEL_OPTUNA_STORAGE": self.postgres_url("optuna"),
            # Every client of PostgreSQL (Dagster, dbt, the warehouse, MLflow's store, Optuna),
            # of the object store and of MLflow's server checks the server's certificate and
            # name (TLS only: none of them listens in plain text).
            **self.certificates.client_environment(),
            "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
            # The stack's clients' own (no service's share: shares.CLIENTS_ONLY): the landing
            # producer's key, and the webserver's GraphQL API, through the login as the operator.
            **self.own_key("landing", ("FLYWHEEL_LANDING_KEY_ID", "FLYWHEEL_LANDING_SECRET_KEY")),
            "FLYWHEEL_DAGSTER_URL": f"https://{host}:{ports['ui']}",
            "FLYWHEEL_DAGSTER_USER": proxy.CLIENT,
            "FLYWHEEL_DAGSTER_PASSWORD": chosen["secrets"]["ui_operator"],
            # The code location's settings (pipelines/settings.py), as the shell that starts the
            # stack sets them. On one machine every sensor is evaluated at each pass of the
            # daemon's sensor loop (every 5 s), not every 30-60 s, so a simulated day is not spent
            # waiting for them: an interval of 5 s would skip every other pass, by jitter.
            SENSOR_INTERVAL: "1",
            **environment_of(SETTINGS),
        }

    def own_key(self, identity: str, names: tuple[str, str] = s3.KEY_NAMES) -> dict[str, str]:
        """The object store's key of `identity` (s3.IDENTITIES), as a client's variables."""
        return dict(zip(names, (identity, state.s3_keys(self.settings)[identity]), strict=True))

    def postgres_url(self, role: str | None = None) -> str:
        """The URL of a consumer's `role` to its database; without one, the administrator's URL
        of the server, without a database (the stack's own commands only)."""
        chosen, host = self.settings, self.address
        port = chosen["ports"]["postgres"]
        # psycopg2 (dagster-postgres's driver) for every client; SQLAlchemy 2.1 defaults to 3.
        if role is None:
            password = chosen["postgres_password"]
            return f"postgresql+psycopg2://{postgres.ROLE}:{password}@{host}:{port}"
        password = chosen["roles"][role]
        return f"postgresql+psycopg2://{role}:{password}@{host}:{port}/{role}"

    @property
    def certificates(self) -> tls.Certificates:
        return tls.Certificates(self.root / "tls")

    def write_files(self) -> None:
        """The stack's Dagster instance, workspace, environment file and dataset repository."""
        env = self.environment()
        self.dagster_home.mkdir(parents=True, exist_ok=True)
        Path(env["FLYWHEEL_COMPUTE_LOG_DIR"]).mkdir(mode=0o700, exist_ok=True)
        shutil.copyfile(REPO / "deploy" / "dagster.stack.yaml", self.dagster_home / "dagster.yaml")
        port = self.settings["ports"]["code_server"]
        self.workspace.write_text(
            "# The code location of the stack, served by `dagster code-server start`.\n"
            f"load_from:\n  - grpc_server:\n      host: {self.code_server_address}\n"
            f"      port: {port}\n      location_name: flywheel\n"
        )
        mlflow_auth.write_config(self.root / mlflow_auth.CONFIG, self.postgres_url("mlflow"))
        proxy.ensure_client(self.proxy, env["FLYWHEEL_DAGSTER_PASSWORD"])
        lines = "".join(f"{key}={value}\n" for key, value in env.items())
        write_atomically(self.env_file, lines, mode=0o600)
        checkout = Path(env["FLYWHEEL_DVC_REPO"])
        if not (checkout / ".dvc").exists():
            from pipelines.lib.datasets import init_repository

            init_repository(checkout)

    def services(self) -> dict[str, Service]:
        """The stack's processes, by name, each with its share of the settings."""
        env, bin_dir = self.environment(), Path(sys.executable).parent
        ports, host = self.settings["ports"], self.address
        dagster = [str(bin_dir / "dagster")]
        pooler = self.root / "pgbouncer" / "pgbouncer.ini"
        defined = {
            "postgres": Service(
                "postgres",
                postgres.server_command(
                    self.pg_data,
                    host,
                    ports["postgres"],
                    self.certificates.certificate,
                    self.certificates.key,
                ),
                lambda: postgres.accepting(self.postgres_url()),
                stop_signal="INT",  # fast shutdown: sessions are ended, nothing is lost
                user=postgres.SERVER_USER,
            ),
            "pgbouncer": Service(
                "pgbouncer",
                pgbouncer.command(pooler),
                lambda: pgbouncer.ready(
                    host, ports["pgbouncer"], POOLED, self.settings["roles"][POOLED]
                ),
                user=postgres.SERVER_USER,
            ),
            "s3": Service(
                "s3",
                s3.command(
                    self.objects,
                    self.supervisor.logs / "s3",
                    self.identities,
                    host,
                    ports,
                    self.certificates,
                ),
                lambda: s3.ready(env["FLYWHEEL_S3_ENDPOINT_URL"], self.certificates.authority),
                # Its parts stop one after the other, the filer after its clients' streams time out,
                # and the master and the gateway then keep retrying them: what is left to stop
                # holds nothing unwritten (an object is on disk when acknowledged), so it is killed.
                stop_wait_s=s3.STOP_WAIT_S,
            ),
            "mlflow": Service(
                "mlflow",
                [
                    # Its uvicorn child outlives a server killed on its own, holding the port.
                    *[sys.executable, "-m", "deploy.stack.reap", "--service", "mlflow"],
                    *["--supervisor", self.supervisor.url, "--"],
                    *[str(bin_dir / "mlflow"), "server", "--host", host],
                    *["--port", str(ports["mlflow"]), "--workers", "1"],
                    *["--artifacts-destination", f"s3://{BUCKET}/mlflow"],
                    *["--app-name", "basic-auth"],
                    "--uvicorn-opts",
                    f"--ssl-certfile {self.certificates.certificate} "
                    f"--ssl-keyfile {self.certificates.key}",
                ],
                lambda: http_ok(
                    f"{env['MLFLOW_TRACKING_URI']}/health", self.certificates.authority
                ),
                env={
                    # The backend store's URL holds the password: environment, not command line.
                    # Its own key of the object store: the `mlflow/` prefix only.
                    **self.own_key("mlflow"),
                    "MLFLOW_BACKEND_STORE_URI": self.postgres_url("mlflow"),
                    # No job runner: its consumers serve MLflow's GenAI jobs, which flywheel does
                    # not use, and are processes that take CPU on an otherwise idle stack.
                    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
                    **mlflow_auth.server_environment(
                        self.root / mlflow_auth.CONFIG, self.settings["secrets"]
                    ),
                },
            ),
            "code_server": Service(
                "code_server",
                [
                    *dagster,
                    *["code-server", "start", "-m", "pipelines.definitions", "-a", "defs"],
                    *["-h", self.code_server_address, "-p", str(ports["code_server"])],
                    *["--location-name", "flywheel"],
                ],
                lambda: code_server_ready(self.code_server_address, ports["code_server"]),
            ),
            "daemon": Service(
                "daemon",
                [str(bin_dir / "dagster-daemon"), "run", "-w", str(self.workspace)],
                lambda: daemon_ready(self.supervisor.pid("daemon"), self.dagster_home),
                env=self.own_key("compute-logs"),
            ),
            **proxy.services(
                bin_dir,
                self.workspace,
                ports,
                self.proxy / "nginx.conf",
                env["FLYWHEEL_DAGSTER_URL"],
                (env["FLYWHEEL_DAGSTER_USER"], env["FLYWHEEL_DAGSTER_PASSWORD"]),
                self.certificates.authority,
                self.own_key("compute-logs"),
            ),
        }
        return shares.given(env, defined)

    def up(self, say: Callable[[str], None] = print, timeout_s: float = 180.0) -> None:
        """Start every part that is not running, in order; each is ready before the next."""
        began = time.monotonic()
        # This process reads the stack's instance too (is the daemon beating?).
        os.environ.update(self.environment())
        self.write_files()
        if postgres.init_cluster(self.pg_data, self.settings["postgres_password"]):
            say(f"initialised a PostgreSQL cluster in {self.pg_data}")
        tls.ensure(self.certificates.folder, postgres.SERVER_USER, self.address)
        self.configure_proxy()
        # PostgreSQL's clients: the services' address (the pooler's too), and the runs'.
        clients = list(dict.fromkeys([self.address, self.code_server_address]))
        postgres.write_hba(self.pg_data, clients)
        s3.write_identities(self.identities, BUCKET, state.s3_keys(self.settings))
        self.objects.mkdir(parents=True, exist_ok=True)
        (self.supervisor.logs / "s3").mkdir(parents=True, exist_ok=True)
        services = self.services()
        supervisor = self.supervisor
        if leftovers := supervisor.leftovers():
            say(f"stopped {len(leftovers)} services left running by a supervisord that died")
        if supervisor.launch(list(services.values()), timeout_s):
            say(f"supervisord   {supervisor.socket}")
        for name in SERVICES:
            if name == "pgbouncer":
                self.prepare_databases()
            if name == "code_server":
                preflight()
            if supervisor.start(services[name], timeout_s):
                say(f"{name:<13} {describe(self, name)}")
            if name == "mlflow":
                mlflow_auth.ensure_runs_user(os.environ, self.settings["secrets"], say)
            if name == "s3":
                admin = {**os.environ, **self.own_key("admin")}
                s3.ensure_bucket(admin, BUCKET)
                s3.sync_writes(self.address, self.settings["ports"])
                imported = s3.import_saved(self.root / "s3", admin, BUCKET)
                if imported:
                    say(f"imported {imported} objects saved by the former S3 endpoint")
        instance.open_warehouse_pool(self.dagster_home)
        ui = self.environment()["FLYWHEEL_DAGSTER_URL"]
        say(f"stack up in {time.monotonic() - began:.0f} s; the Dagster UI: {ui}")
        say("its login: the stack's operator (FLYWHEEL_DAGSTER_USER and _PASSWORD in stack.env);")
        say("add people with `python -m deploy.stack add-user NAME --role viewer|operator`")
        say(f"its settings (FLYWHEEL_ENV=prod; secrets, readable by you only): {self.env_file}")

    def configure_proxy(self) -> None:
        """The login's files (deploy/stack/proxy.py), from its identities as they are now."""
        log = self.supervisor.logs / "proxy-access.log"
        proxy.configure(self.proxy, self.address, self.settings["ports"], self.certificates, log)

    def add_user(self, name: str, role: str) -> str:
        """A new identity of the Dagster UI (see deploy/stack/proxy.py), in effect at once on a
        running stack; its password, which nothing keeps (its hash only)."""
        password = secrets.token_urlsafe(18)
        proxy.add_user(self.proxy, name, role, password)
        self.configure_proxy()
        self.supervisor.signal("proxy", "HUP")  # nginx reloads its configuration
        return password

    def prepare_databases(self) -> None:
        """The databases, Dagster's tables and the pooler's settings (PostgreSQL is up)."""
        postgres.create_databases(self.postgres_url())
        postgres.ensure_roles(self.postgres_url(), self.settings["roles"])
        instance.create_tables(self.postgres_url("dagster"))
        pgbouncer.configure(
            self.root / "pgbouncer",
            self.address,
            self.settings["ports"]["pgbouncer"],
            self.settings["ports"]["postgres"],
            POOLED,
            postgres.scram_secret(self.postgres_url(), POOLED),
            self.certificates,
        )

    def down(self, say: Callable[[str], None] = print) -> None:
        """Stop every process, the last started first; the state stays on disk."""
        for name in self.supervisor.stop(list(reversed(SERVICES))):
            say(f"stopped {name}")
        if self.supervisor.shutdown():
            say("stopped supervisord")

    def status(self) -> dict[str, str]:
        """Each part's state as supervisord sees it (RUNNING with its pid and uptime, BACKOFF
        while it is being restarted, FATAL once supervisord gave up on it...)."""
        return self.supervisor.states(SERVICES)


def describe(stack: Stack, name: str) -> str:
    """Where a part listens."""
    ports, host = stack.settings["ports"], stack.address
    where = {
        "daemon": "sensors, schedules, run queue, run monitoring",
        "postgres": f"{host}:{ports['postgres']}",
        "pgbouncer": f"{host}:{ports['pgbouncer']} (Dagster's database, pooled)",
        "s3": f"https://{host}:{ports['s3']} (SeaweedFS, objects in {stack.objects})",
        "code_server": f"grpc://{stack.code_server_address}:{ports['code_server']}",
        "mlflow": f"https://{host}:{ports['mlflow']}",
        "proxy": f"https://{host}:{ports['ui']} (the Dagster UI, behind a login)",
    }
    return where.get(name) or f"http://127.0.0.1:{ports[name]} (reached through the proxy)"
