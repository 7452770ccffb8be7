"""What each service of the stack gets of the stack's settings (`Stack.environment`, its
`stack.env`): only the variables it needs, so a service holds no other's secret.

supervisord starts with the machine's basics only (`supervisor.BASE`), so each service holds
its share and its own variables (`Service.env`), and the processes it starts inherit no more.
The code server gets every setting: the runs it starts (the `DefaultRunLauncher` asks it for each
run's process) and their tuning workers need them all. The daemon and the webserver load the
instance only: its storage, and its compute logs in the bucket, which the daemon writes (a
backfill's log) and the UI reads. No service holds the UI's operator password, which the
stack's clients use (`CLIENTS_ONLY`). Which secret each may then hold: deploy/stack/holders.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from deploy.stack.supervisor import Service

# The object store's region and the authority its certificate is checked against; its key is
# each service's own (`Stack.own_key`: MLflow's, the compute logs'), limited to its prefixes.
OBJECT_STORE = ("AWS_DEFAULT_REGION", "AWS_CA_BUNDLE")
# libpq's settings: TLS, checked against the stack's authority.
POSTGRES_CLIENT = ("PGSSLMODE", "PGSSLROOTCERT")
# What Dagster's instance reads (deploy/dagster.stack.yaml): its storage through the pooler, its
# compute logs in the bucket and their folder before the upload.
INSTANCE = (
    *("DAGSTER_HOME", "FLYWHEEL_COMPUTE_LOG_DIR"),
    *("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD"),
    "DAGSTER_PG_DB",
    *POSTGRES_CLIENT,
    *("FLYWHEEL_LANDING_BUCKET", "FLYWHEEL_S3_ENDPOINT_URL", *OBJECT_STORE),
)
# Each service's share of the stack's settings; None: all of them. PostgreSQL and PgBouncer
# read their files, the object store its identities' file. MLflow's server gets its backend
# store's URL and its authentication's secrets as its own variables
# (`mlflow_auth.server_environment`) and its key of the object store as its own variables.
# nginx, in front of the webservers, reads its files only.
SHARES: dict[str, tuple[str, ...] | None] = {
    "postgres": (),
    "pgbouncer": (),
    "s3": (),
    "mlflow": (*OBJECT_STORE, "MLFLOW_S3_ENDPOINT_URL", *POSTGRES_CLIENT),
    "code_server": None,
    "daemon": INSTANCE,
    "webserver": INSTANCE,
    "webserver_viewer": INSTANCE,
    "proxy": (),
}
# The stack's clients' credentials: for the Dagster UI (an operator's) and the landing producer's
# key of the object store. In stack.env for the simulation, in no service's share, the code
# server's included.
CLIENTS_ONLY = ("FLYWHEEL_DAGSTER_USER", "FLYWHEEL_DAGSTER_PASSWORD")
CLIENTS_ONLY += ("FLYWHEEL_LANDING_KEY_ID", "FLYWHEEL_LANDING_SECRET_KEY")


def share(name: str, settings: Mapping[str, str]) -> dict[str, str]:
    """The variables of the stack's `settings` that service `name` gets."""
    names = SHARES[name]
    if names is None:
        return {key: value for key, value in settings.items() if key not in CLIENTS_ONLY}
    return {key: settings[key] for key in names if key in settings}


def given(settings: Mapping[str, str], services: Mapping[str, Service]) -> dict[str, Service]:
    """`services`, each with its share of `settings` beneath its own variables."""
    return {
        name: dataclasses.replace(service, env={**share(name, settings), **(service.env or {})})
        for name, service in services.items()
    }
