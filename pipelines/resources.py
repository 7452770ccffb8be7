"""The one environment switch: the same resource keys everywhere, local or prod implementations.

`FLYWHEEL_ENV=local` (default) needs no services: a DuckDB file and a landing folder under
`FLYWHEEL_HOME`. `FLYWHEEL_ENV=prod` reads an S3 landing zone through dagster-aws, and keeps the
warehouse in PostgreSQL (dbt's `prod` target, dbt-postgres, reads the same settings); every
location and secret comes from environment variables.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipelines.lib.datasets import DvcDatasetStore
from pipelines.lib.errors import ConfigurationError
from pipelines.lib.label_exchange import FileLabelExchange, LabelExchange, LabelStudioExchange
from pipelines.lib.landing_zone import LandingZone, LocalLandingZone, S3LandingZone
from pipelines.lib.warehouse import DuckDBWarehouse, PostgresWarehouse, Warehouse

REPO_ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENTS = ("local", "prod")


def current_env() -> str:
    """The environment named by FLYWHEEL_ENV (default `local`); anything else is an error."""
    env = os.environ.get("FLYWHEEL_ENV", "local")
    if env not in ENVIRONMENTS:
        raise ValueError(f"FLYWHEEL_ENV={env!r}: expected one of {', '.join(ENVIRONMENTS)}")
    return env


def flywheel_home() -> Path:
    """The git-ignored state directory of the embedded defaults (FLYWHEEL_HOME)."""
    return Path(os.environ.get("FLYWHEEL_HOME", REPO_ROOT / ".flywheel")).resolve()


def warehouse_path() -> str:
    """The DuckDB database dbt and the assets share (FLYWHEEL_WAREHOUSE_PATH)."""
    # dbt_project/profiles.yml falls back to the same file: <repo>/.flywheel/warehouse.duckdb.
    return os.environ.get("FLYWHEEL_WAREHOUSE_PATH", str(flywheel_home() / "warehouse.duckdb"))


def warehouse(env: str | None = None) -> Warehouse:
    """The warehouse of `env`: the DuckDB file, or PostgreSQL in prod (FLYWHEEL_WAREHOUSE_HOST,
    _PORT (5432), _USER, _PASSWORD, _DATABASE: the same variables as dbt's `prod` target)."""
    if (env or current_env()) == "local":
        return DuckDBWarehouse(path=warehouse_path())
    port = os.environ.get("FLYWHEEL_WAREHOUSE_PORT", "5432")
    if not port.isdigit():
        raise ConfigurationError(f"FLYWHEEL_WAREHOUSE_PORT={port!r}: expected a port number")
    return PostgresWarehouse(
        host=required_env("FLYWHEEL_WAREHOUSE_HOST"),
        port=int(port),
        user=required_env("FLYWHEEL_WAREHOUSE_USER"),
        password=os.environ.get("FLYWHEEL_WAREHOUSE_PASSWORD", ""),
        database=required_env("FLYWHEEL_WAREHOUSE_DATABASE"),
    )


def warehouse_resources(env: str | None = None) -> dict[str, dg.ConfigurableResource]:
    """The warehouse of `env` and the dbt that builds it (its target named like `env`)."""
    from pipelines.lib.dbt import FlywheelDbtCliResource, dbt_executable, dbt_project

    env = env or current_env()
    return {
        "warehouse": warehouse(env),
        "dbt": FlywheelDbtCliResource(
            project_dir=dbt_project, target=env, dbt_executable=dbt_executable()
        ),
    }


def required_env(name: str) -> str:
    """The value of environment variable `name`; a clear error naming it when unset."""
    value = os.environ.get(name)
    if not value:
        raise ConfigurationError(f"FLYWHEEL_ENV={current_env()} needs environment variable {name}")
    return value


def _file_store(env: str | None, folder: str) -> LandingZone:
    """A local folder under FLYWHEEL_HOME, or a prefix of the S3 landing bucket in prod."""
    if (env or current_env()) == "local":
        return LocalLandingZone(root=str(flywheel_home() / folder))
    return S3LandingZone(
        s3=S3Resource(endpoint_url=os.environ.get("FLYWHEEL_S3_ENDPOINT_URL")),
        bucket=required_env("FLYWHEEL_LANDING_BUCKET"),
        prefix=os.environ.get(f"FLYWHEEL_{folder.upper()}_PREFIX", folder),
    )


def landing_zone(env: str | None = None) -> LandingZone:
    """The landing zone of `env`: shared by the pipeline and by the simulator that feeds it."""
    return _file_store(env, "landing")


def label_store(env: str | None = None) -> LandingZone:
    """The labeling outbox (`outbox/`) and inbox (`inbox/<day>/`) of `env`."""
    return _file_store(env, "labeling")


LABELING_BACKENDS = ("files", "label-studio")


def labeling_backend() -> str:
    """The labeling backend named by FLYWHEEL_LABELING (default `files`)."""
    backend = os.environ.get("FLYWHEEL_LABELING", "files")
    if backend not in LABELING_BACKENDS:
        raise ConfigurationError(
            f"FLYWHEEL_LABELING={backend!r}: expected one of {', '.join(LABELING_BACKENDS)}"
        )
    return backend


def label_exchange(env: str | None = None, task: str = "flights") -> LabelExchange:
    """Where labeling tasks go and annotations come from (FLYWHEEL_LABELING): the label store's
    outbox and inbox files (`files`, the default), or a Label Studio server (`label-studio`:
    FLYWHEEL_LABEL_STUDIO_URL, _TOKEN, and _PROJECT, default `flywheel-<task>`), whose
    deliveries land in the label store's inbox."""
    store = label_store(env)
    if labeling_backend() == "files":
        return FileLabelExchange(store=store)
    needed = ("FLYWHEEL_LABEL_STUDIO_URL", "FLYWHEEL_LABEL_STUDIO_TOKEN")
    if missing := [name for name in needed if not os.environ.get(name)]:
        raise ConfigurationError(
            f"FLYWHEEL_LABELING=label-studio needs environment variable {' and '.join(missing)} "
            "(`flywheel-sim label-studio start` prints both for a local server)"
        )
    return LabelStudioExchange(
        url=os.environ["FLYWHEEL_LABEL_STUDIO_URL"],
        token=os.environ["FLYWHEEL_LABEL_STUDIO_TOKEN"],
        project_title=os.environ.get("FLYWHEEL_LABEL_STUDIO_PROJECT", f"flywheel-{task}"),
        store=store,
    )


def dataset_store(env: str | None = None) -> DvcDatasetStore:
    """The DVC repository of datasets (`data/`) and its remote: a local folder or S3 in prod."""
    repo = os.environ.get("FLYWHEEL_DVC_REPO", str(REPO_ROOT / "data"))
    # Where versions fetched by hash are kept (default: inside the repository's .dvc folder).
    cache = os.environ.get("FLYWHEEL_DATASET_CACHE") or None
    if (env or current_env()) == "local":
        return DvcDatasetStore(
            repo_dir=repo, remote_url=str(flywheel_home() / "dvc-remote"), cache_dir=cache
        )
    return DvcDatasetStore(
        repo_dir=repo,
        remote_url=required_env("FLYWHEEL_DVC_REMOTE"),
        endpoint_url=os.environ.get("FLYWHEEL_S3_ENDPOINT_URL"),
        cache_dir=cache,
    )


def build_resources(env: str | None = None) -> dict[str, dg.ConfigurableResource]:
    """Every resource of the code location, keyed by role, for `env`."""
    # dbt and MLflow are imported here, not at module level: the simulator imports this module
    # for the landing zone and should not pay for parsing the dbt project or importing MLflow.
    from pipelines.lib.tracking import tracker_resource, tuning_storage
    from pipelines.lib.tuning_workers import tuning_workers

    env = env or current_env()
    return {
        "landing_zone": landing_zone(env),
        "label_store": label_store(env),
        "label_exchange": label_exchange(env),
        "dataset_store": dataset_store(env),
        "tracker": tracker_resource(env, flywheel_home()),
        "tuning_storage": tuning_storage(env, flywheel_home()),
        "tuning_workers": tuning_workers(env),
        **warehouse_resources(env),
    }
