"""Preflight: every `FLYWHEEL_ENV=prod` setting is present and every service it names answers.

    python -m pipelines.preflight    one line per service; exit status 1 if any is wrong

A deployment runs it before starting the Dagster processes. Without it a wrong Postgres host
of the Dagster instance ends, after ~12 s of dagster-postgres's retries, in "too many retries
for DB connection" naming no setting, and a wrong bucket or tracking server shows only in the
first run that uses it. Each service gets one attempt with a 5 s timeout.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipelines.lib.datasets import REMOTE_SETTING
from pipelines.lib.errors import ConfigurationError, redact, s3_location
from pipelines.lib.landing_zone import BUCKET_SETTING
from pipelines.lib.tracking import (
    STORAGE_SETTING,
    TRACKING_SETTING,
    tracker_resource,
    tuning_storage,
)
from pipelines.resources import dataset_store, label_exchange, label_store, landing_zone, warehouse
from pipelines.settings import (
    DAGSTER_HOME,
    DBT_USER,
    OPTUNA_STORAGE,
    S3_ENDPOINT_URL,
    TRACKING_URI,
    Setting,
    current_env,
    dbt_password,
    flywheel_home,
    labeling_backend,
)

TIMEOUT_S = 5
# The fields of the instance's `storage.postgres.postgres_db` and libpq's names for them.
PG_FIELDS = {
    "hostname": "host",
    "port": "port",
    "username": "user",
    "password": "password",
    "db_name": "dbname",
}
# Which fields a libpq error points at (its message, in order); anything else: host and port.
PG_FAULTS = (
    ("password authentication failed", ("username", "password")),
    ("no password supplied", ("password",)),
    ('role "', ("username",)),
    ('database "', ("db_name",)),
)


@dataclass(frozen=True)
class Check:
    """One service: what was reached, or what is wrong with the settings that name it."""

    service: str
    detail: str
    problem: str | None = None


def check_settings() -> list[Check]:
    """Check every service of the environment (none for `local`); errors other than a
    ConfigurationError are not configuration problems and propagate."""
    if current_env() == "local":
        return []
    checks = []
    for service, check in CHECKS:
        try:
            checks.append(Check(service, check()))
        except ConfigurationError as e:
            checks.append(Check(service, "", str(e)))
    return checks


def require_settings() -> None:
    """One ConfigurationError listing every wrong setting, if any."""
    problems = [f"{c.service}: {c.problem}" for c in check_settings() if c.problem]
    if problems:
        raise ConfigurationError("\n".join(problems))


def dagster_storage() -> str:
    """Connect to the Postgres of $DAGSTER_HOME/dagster.yaml, as the instance will."""
    import psycopg2

    path = Path(DAGSTER_HOME.required()) / "dagster.yaml"
    if not path.is_file():
        raise ConfigurationError(f"DAGSTER_HOME={path.parent} holds no dagster.yaml")
    storage = (yaml.safe_load(path.read_text()) or {}).get("storage") or {}
    fields = (storage.get("postgres") or {}).get("postgres_db")
    if not fields:
        return f"{path}: no postgres_db storage to check"
    names = {f: _setting_name(value, f, path) for f, value in fields.items() if f in PG_FIELDS}
    unset = [names[f] for f, value in fields.items() if f in names and _value(value) is None]
    if unset:
        raise ConfigurationError(f"{path} needs environment variables {', '.join(unset)}")
    args = {PG_FIELDS[f]: _value(fields[f]) for f in names}
    try:
        psycopg2.connect(**args, connect_timeout=TIMEOUT_S).close()
    except psycopg2.OperationalError as e:
        why = str(e).strip().splitlines()[0]
        at_fault = next((f for text, f in PG_FAULTS if text in why), ("hostname", "port"))
        named = ", ".join(
            names[f] if f == "password" else f"{names[f]}={args[PG_FIELDS[f]]}"
            for f in at_fault
            if f in names
        )
        raise ConfigurationError(f"Dagster instance's Postgres ({named}): {why}") from e
    where = f"{args.get('user')}@{args.get('host')}:{args.get('port')}/{args.get('dbname')}"
    return f"{where} ({', '.join(names.values())})"


def _value(value: object) -> str | None:
    if isinstance(value, dict) and "env" in value:
        return Setting(str(value["env"])).get()
    return str(value)


def _setting_name(value: object, field: str, path: Path) -> str:
    if isinstance(value, dict) and "env" in value:
        return str(value["env"])
    return f"{field} in {path}"


def file_stores() -> str:
    """List the bucket of the landing zone and the label store (the same bucket)."""
    zone = landing_zone("prod")
    zone.check(TIMEOUT_S)
    where = s3_location(S3_ENDPOINT_URL.get())
    return f"{zone.uri}, {label_store('prod').uri} ({BUCKET_SETTING}) at {where}"


def dataset_remote() -> str:
    """List the bucket of the DVC remote."""
    store = dataset_store("prod")
    store.check(TIMEOUT_S)
    return f"{store.remote_url} ({REMOTE_SETTING}) at {s3_location(store.endpoint_url)}"


def warehouse_database() -> str:
    """Connect to the PostgreSQL warehouse, as the assets and dbt's `prod` target will."""
    return f"{warehouse('prod').check(TIMEOUT_S)} (FLYWHEEL_WAREHOUSE_*)"


def dbt_role() -> str:
    """Connect to the warehouse as dbt's own role, as dbt's `prod` target will."""
    if not DBT_USER.get():
        return "the warehouse's role (FLYWHEEL_DBT_USER unset)"
    as_dbt = {"user": DBT_USER.get(), "password": dbt_password()}
    return f"{warehouse('prod').model_copy(update=as_dbt).check(TIMEOUT_S, DBT_USER.name)}"


def tracking_server() -> str:
    """Reach the MLflow tracking server."""
    TRACKING_URI.required()
    with tracker_resource("prod", flywheel_home()).process_config_and_initialize_cm() as tracker:
        tracker.check(TIMEOUT_S)
        return f"{redact(tracker.tracking_uri)} ({TRACKING_SETTING})"


def study_storage() -> str:
    """Open the Optuna study database."""
    OPTUNA_STORAGE.required()
    with tuning_storage("prod", flywheel_home()).process_config_and_initialize_cm() as storage:
        storage.check(TIMEOUT_S)
        return f"{redact(storage.location)} ({STORAGE_SETTING})"


def labeling_backend_check() -> str:
    """Reach the label exchange: Label Studio's API with the token, or the label store's files."""
    exchange = label_exchange("prod")
    exchange.check(TIMEOUT_S)
    return f"{exchange.where} (FLYWHEEL_LABELING={labeling_backend()})"


CHECKS: tuple[tuple[str, Callable[[], str]], ...] = (
    ("Dagster instance", dagster_storage),
    ("warehouse", warehouse_database),
    ("dbt's role", dbt_role),
    ("landing zone", file_stores),
    ("dataset remote", dataset_remote),
    ("MLflow", tracking_server),
    ("Optuna", study_storage),
    ("labeling", labeling_backend_check),
)


def main() -> int:
    """Print one line per service; 1 if any setting is wrong."""
    try:
        current_env()
    except ValueError as e:  # FLYWHEEL_ENV itself
        print(f"FAIL  {e}")
        return 1
    checks = check_settings()
    if not checks:
        print(f"ok    FLYWHEEL_ENV={current_env()}: the embedded defaults need no service")
    for check in checks:
        status = "FAIL" if check.problem else "ok"
        print(f"{status:<5} {check.service:<17} {check.problem or check.detail}")
    return 1 if any(check.problem for check in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
