"""The one environment switch: the same resource keys everywhere, local or prod implementations.

`FLYWHEEL_ENV=local` (default) needs no services: a DuckDB file and a landing folder under
`FLYWHEEL_HOME`. `FLYWHEEL_ENV=prod` reads an S3 landing zone through dagster-aws, and keeps the
warehouse in PostgreSQL (dbt's `prod` target, dbt-postgres, reads the same settings); every
location and secret comes from environment variables.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipelines import settings
from pipelines.lib.datasets import DvcDatasetStore
from pipelines.lib.errors import ConfigurationError
from pipelines.lib.label_exchange import FileLabelExchange, LabelExchange, LabelStudioExchange
from pipelines.lib.landing_zone import LandingZone, LocalLandingZone, S3LandingZone
from pipelines.lib.tuning_workers import (
    KubernetesTuningWorkers,
    LocalTuningWorkers,
    TuningWorkers,
)
from pipelines.lib.warehouse import DuckDBWarehouse, PostgresWarehouse, Warehouse
from pipelines.settings import (
    current_env,
    flywheel_home,
    labeling_backend,
    warehouse_path,
)
from pipelines.task import task_name


def warehouse(env: str | None = None) -> Warehouse:
    """The warehouse of `env`: the DuckDB file, or PostgreSQL in prod (FLYWHEEL_WAREHOUSE_HOST,
    _PORT (5432), _USER, _PASSWORD, _DATABASE: the same variables as dbt's `prod` target). The
    password is given as its variable (`dg.EnvVar`), so the UI shows its name, not its value."""
    if (env or current_env()) == "local":
        return DuckDBWarehouse(path=warehouse_path())
    port = settings.WAREHOUSE_PORT.value()
    if not port.isdigit():
        raise ConfigurationError(f"FLYWHEEL_WAREHOUSE_PORT={port!r}: expected a port number")
    return PostgresWarehouse(
        host=settings.WAREHOUSE_HOST.required(),
        port=int(port),
        user=settings.WAREHOUSE_USER.required(),
        password=secret_setting(settings.WAREHOUSE_PASSWORD),
        database=settings.WAREHOUSE_DATABASE.required(),
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


def _file_store(env: str | None, folder: str, task: str | None) -> LandingZone:
    """The task's own folder under FLYWHEEL_HOME (`<folder>/<task>`), or in prod its own prefix
    in the S3 landing bucket (`<folder's prefix>/<task>`): tasks served side by side never read
    each other's files. `task`: default, the one FLYWHEEL_TASK names."""
    name = task_stem(task)
    if (env or current_env()) == "local":
        return LocalLandingZone(root=str(flywheel_home() / folder / name))
    return S3LandingZone(
        s3=S3Resource(endpoint_url=settings.S3_ENDPOINT_URL.get()),
        bucket=settings.LANDING_BUCKET.required(),
        prefix="/".join(filter(None, (settings.PREFIXES[folder].value().strip("/"), name))),
    )


def landing_zone(env: str | None = None, task: str | None = None) -> LandingZone:
    """The landing zone of `env` and `task`: shared by the pipeline and by the simulator that
    feeds it."""
    return _file_store(env, "landing", task)


def label_store(env: str | None = None, task: str | None = None) -> LandingZone:
    """The labeling outbox (`outbox/`) and inbox (`inbox/<day>/`) of `env` and `task`."""
    return _file_store(env, "labeling", task)


def label_exchange(env: str | None = None, task: str | None = None) -> LabelExchange:
    """Where labeling tasks go and annotations come from (FLYWHEEL_LABELING): the label store's
    outbox and inbox files (`files`, the default), or a Label Studio server (`label-studio`:
    FLYWHEEL_LABEL_STUDIO_URL, _TOKEN, and _PROJECT, default `flywheel-<task>`, the task
    FLYWHEEL_TASK names unless `task` does), whose deliveries land in the label store's inbox."""
    store = label_store(env, task)
    if labeling_backend() == "files":
        return FileLabelExchange(store=store)
    needed = (settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN)
    if missing := [setting.name for setting in needed if not setting.get()]:
        raise ConfigurationError(
            f"FLYWHEEL_LABELING=label-studio needs environment variable {' and '.join(missing)} "
            "(`flywheel-sim label-studio start` prints both for a local server)"
        )
    return LabelStudioExchange(
        url=settings.LABEL_STUDIO_URL.required(),
        token=secret_setting(settings.LABEL_STUDIO_TOKEN),
        project_title=settings.LABEL_STUDIO_PROJECT.get() or per_task(task),
        store=store,
    )


def secret_setting(setting: settings.Setting) -> str:
    """A secret setting as a resource field: its variable (`dg.EnvVar`), read when Dagster
    initializes the resource in a run, never its value, which the UI would show to anyone who
    reaches it. An unset optional one (the password of a warehouse that asks for none) stays
    its default: an EnvVar of an unset variable would fail every run."""
    if not setting.get():
        return setting.value()
    return dg.EnvVar(setting.name)


def dataset_store(env: str | None = None) -> DvcDatasetStore:
    """The DVC repository of datasets (`settings.dataset_repository`) and its remote: a local
    folder or S3 in prod."""
    repo = str(settings.dataset_repository())
    # Where versions fetched by hash are kept (default: inside the repository's .dvc folder).
    cache = settings.DATASET_CACHE.get()
    if (env or current_env()) == "local":
        return DvcDatasetStore(
            repo_dir=repo, remote_url=str(flywheel_home() / "dvc-remote"), cache_dir=cache
        )
    return DvcDatasetStore(
        repo_dir=repo,
        remote_url=settings.DVC_REMOTE.required(),
        endpoint_url=settings.S3_ENDPOINT_URL.get(),
        cache_dir=cache,
    )


def tuning_workers(env: str) -> TuningWorkers:
    """Processes on the embedded defaults, and in prod unless
    `FLYWHEEL_TUNING_WORKERS_ON=kubernetes` (set in the Helm deployment's ConfigMap): then pods
    in `FLYWHEEL_K8S_NAMESPACE`, from `FLYWHEEL_TUNING_IMAGE` or the run's image, with
    `FLYWHEEL_TUNING_WORKER_CPU`, `_MEMORY` and `_GPUS` each."""
    where = settings.TUNING_WORKERS_ON.get()
    if env == "local" or where == "processes":
        return LocalTuningWorkers()
    if where != "kubernetes":
        raise ConfigurationError(
            f"FLYWHEEL_TUNING_WORKERS_ON={where!r}: expected 'processes' or 'kubernetes'"
        )
    gpus = settings.TUNING_WORKER_GPUS.value()
    if not gpus.isdigit():
        raise ConfigurationError(f"FLYWHEEL_TUNING_WORKER_GPUS={gpus!r}: expected a count")
    return KubernetesTuningWorkers(
        namespace=settings.K8S_NAMESPACE.get(),
        image=settings.TUNING_IMAGE.get(),
        service_account=settings.TUNING_SERVICE_ACCOUNT.get(),
        cpu=settings.TUNING_WORKER_CPU.get(),
        memory=settings.TUNING_WORKER_MEMORY.get(),
        gpus=int(gpus),
    )


def retraining_executor(env: str) -> dg.ExecutorDefinition | None:
    """How the retraining job runs its steps: None, in the run's process as every job does; or,
    in prod when `FLYWHEEL_RETRAINING_STEPS_ON=kubernetes` (the Helm deployment's ConfigMap), each
    step as a Kubernetes Job of its own (dagster-k8s's step executor, configured like the run
    launcher), so that the GPU goes to the training step's pod alone, not to the run's."""
    where = settings.RETRAINING_STEPS_ON.value()
    if env == "local" or where == "run":
        return None
    if where != "kubernetes":
        raise ConfigurationError(
            f"FLYWHEEL_RETRAINING_STEPS_ON={where!r}: expected 'run' or 'kubernetes'"
        )
    from dagster_k8s import k8s_job_executor

    # One step at a time: they depend on each other, and a pod per step is enough.
    return k8s_job_executor.configured({"max_concurrent": 1}, name="k8s_steps")


def task_stem(task: str | None = None) -> str:
    """The name of `task`, the one FLYWHEEL_TASK names if None; a task given as a YAML path is
    named by its file."""
    return Path(task or task_name()).stem


def per_task(task: str | None = None) -> str:
    """The name of what each task has its own of (the MLflow experiment, the Label Studio
    project): `flywheel-<task>`."""
    return f"flywheel-{task_stem(task)}"


def build_resources(
    env: str | None = None, task: str | None = None
) -> dict[str, dg.ConfigurableResource]:
    """Every resource of the code location, keyed by role, for `env` and `task` (default: the
    one FLYWHEEL_TASK names)."""
    # dbt and MLflow are imported here, not at module level: the simulator imports this module
    # for the landing zone and should not pay for parsing the dbt project or importing MLflow.
    from pipelines.lib.tracking import tracker_resource, tuning_storage

    env = env or current_env()
    return {
        "landing_zone": landing_zone(env, task),
        "label_store": label_store(env, task),
        "label_exchange": label_exchange(env, task),
        "dataset_store": dataset_store(env),
        "tracker": tracker_resource(env, flywheel_home(), per_task(task)),
        "tuning_storage": tuning_storage(env, flywheel_home()),
        "tuning_workers": tuning_workers(env),
        **warehouse_resources(env),
    }
