"""Settings of the code location beyond the environment switch, read when the definitions are
built: a deployment sets them in the code server's environment (the stack passes on those of the
shell that starts it), so every run the daemon launches uses the same.

- `FLYWHEEL_TRIALS`, `FLYWHEEL_MAX_EPOCHS`, `FLYWHEEL_VALIDATION_DAYS`, `FLYWHEEL_TEST_DAYS`: the
  retraining job's budget and held-out windows (its run config; a run may override them),
  default 1 trial of 12 epochs, 7 and 7 days. The one trial is the `ml` defaults, early-stopped
  on the validation week; more trials add configurations drawn by the sampler and picked on that
  week, a choice made on the simulation's report (docs/benchmarks.md, The whole year).
- `FLYWHEEL_MEMBERS`: networks in each challenger, trained side by side from their own
  initialisations and averaged (a deep ensemble; the trials train one each), default 3.
- `FLYWHEEL_TUNING_WORKERS`: worker processes tuning each challenger's study together (default
  1, in the training step's own process); more need an RDB study storage
  (`FLYWHEEL_OPTUNA_STORAGE`) for their heartbeats.
- `FLYWHEEL_SENSOR_INTERVAL_S`: the least seconds between two evaluations of every sensor
  (default: each sensor's own, 30 or 60 s).
- `FLYWHEEL_TASK`: the task the code location serves, a name under `pipelines/tasks/` or a
  YAML file's path (default: the one task file there marked `default: true`).

This module is the only one that reads the environment: the rest of the project asks it for a
setting by name (`Setting`), so each setting's default is defined once, here. Every setting,
its default and its meaning: docs/configuration.md (tests/test_docs.py checks it against this).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

S3_ENDPOINT_SETTING = "FLYWHEEL_S3_ENDPOINT_URL"


class ConfigurationError(RuntimeError):
    """A setting (an environment variable) is missing or wrong; the message names it."""


REPO_ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENTS = ("local", "prod")
LABELING_BACKENDS = ("files", "label-studio")


@dataclass(frozen=True)
class Setting:
    """An environment variable and its default (None: unset means none, or required)."""

    name: str
    default: str | None = None

    def get(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The variable's value, or the default when it is unset or empty."""
        return (os.environ if environ is None else environ).get(self.name) or self.default

    def value(self, environ: Mapping[str, str] | None = None) -> str:
        """As `get`, with an empty string where there is neither a value nor a default."""
        return self.get(environ) or ""

    def required(self, environ: Mapping[str, str] | None = None) -> str:
        """The variable's value; an error naming it when there is none."""
        if not (value := self.get(environ)):
            raise ConfigurationError(
                f"FLYWHEEL_ENV={current_env()} needs environment variable {self.name}"
            )
        return value


ENV = Setting("FLYWHEEL_ENV", "local")
HOME = Setting("FLYWHEEL_HOME")
TASK_NAME = Setting("FLYWHEEL_TASK")
WAREHOUSE_PATH = Setting("FLYWHEEL_WAREHOUSE_PATH")
WAREHOUSE_HOST = Setting("FLYWHEEL_WAREHOUSE_HOST")
WAREHOUSE_PORT = Setting("FLYWHEEL_WAREHOUSE_PORT", "5432")
WAREHOUSE_USER = Setting("FLYWHEEL_WAREHOUSE_USER")
WAREHOUSE_PASSWORD = Setting("FLYWHEEL_WAREHOUSE_PASSWORD", "")
# dbt's own role, where it has one (it builds the models; the steps' role writes the raw tables):
# unset, dbt logs in as FLYWHEEL_WAREHOUSE_USER with its password.
DBT_USER = Setting("FLYWHEEL_DBT_USER")
DBT_PASSWORD = Setting("FLYWHEEL_DBT_PASSWORD")
WAREHOUSE_DATABASE = Setting("FLYWHEEL_WAREHOUSE_DATABASE")
LANDING_BUCKET = Setting("FLYWHEEL_LANDING_BUCKET")
# Each file store's prefix inside the landing bucket, by the store's folder.
PREFIXES = {
    "landing": Setting("FLYWHEEL_LANDING_PREFIX", "landing"),
    "labeling": Setting("FLYWHEEL_LABELING_PREFIX", "labeling"),
}
S3_ENDPOINT_URL = Setting(S3_ENDPOINT_SETTING)
# Default: $FLYWHEEL_HOME/checkout/data (`dataset_repository`), made where it is missing.
DVC_REPO = Setting("FLYWHEEL_DVC_REPO")
DVC_REMOTE = Setting("FLYWHEEL_DVC_REMOTE")
DATASET_CACHE = Setting("FLYWHEEL_DATASET_CACHE")
LABELING = Setting("FLYWHEEL_LABELING", "files")
LABEL_STUDIO_URL = Setting("FLYWHEEL_LABEL_STUDIO_URL")
LABEL_STUDIO_TOKEN = Setting("FLYWHEEL_LABEL_STUDIO_TOKEN")
LABEL_STUDIO_PROJECT = Setting("FLYWHEEL_LABEL_STUDIO_PROJECT")
DAGSTER_URL = Setting("FLYWHEEL_DAGSTER_URL")
# Who the webserver's clients log in as behind the stack's login (deploy/stack/proxy.py).
DAGSTER_USER = Setting("FLYWHEEL_DAGSTER_USER")
DAGSTER_PASSWORD = Setting("FLYWHEEL_DAGSTER_PASSWORD")
# The landing producer's own key of the object store (the simulator lands its days with it),
# where it has one: the runs' key (AWS_ACCESS_KEY_ID) otherwise.
LANDING_KEY_ID = Setting("FLYWHEEL_LANDING_KEY_ID")
LANDING_SECRET_KEY = Setting("FLYWHEEL_LANDING_SECRET_KEY")
DAGSTER_HOME = Setting("DAGSTER_HOME")
TRACKING_URI = Setting("MLFLOW_TRACKING_URI")
OPTUNA_STORAGE = Setting("FLYWHEEL_OPTUNA_STORAGE")
DBT_KEEP_TARGETS = Setting("FLYWHEEL_DBT_KEEP_TARGETS")
# Which triggers request a retraining, comma-separated (drift, performance, schedule, or none),
# in place of the task's monitoring.retrain_on: what the simulation's policies play.
RETRAIN_ON = Setting("FLYWHEEL_RETRAIN_ON")
TUNING_WORKERS_ON = Setting("FLYWHEEL_TUNING_WORKERS_ON", "processes")
# Where the retraining's steps run: in the run's own process (`run`), or each in a Kubernetes pod
# of its own (`kubernetes`), the training step's alone with a GPU.
RETRAINING_STEPS_ON = Setting("FLYWHEEL_RETRAINING_STEPS_ON", "run")
K8S_NAMESPACE = Setting("FLYWHEEL_K8S_NAMESPACE", "default")
TUNING_IMAGE = Setting("FLYWHEEL_TUNING_IMAGE")
TUNING_SERVICE_ACCOUNT = Setting("FLYWHEEL_TUNING_SERVICE_ACCOUNT")
TUNING_WORKER_CPU = Setting("FLYWHEEL_TUNING_WORKER_CPU", "2")
TUNING_WORKER_MEMORY = Setting("FLYWHEEL_TUNING_WORKER_MEMORY", "8Gi")
TUNING_WORKER_GPUS = Setting("FLYWHEEL_TUNING_WORKER_GPUS", "0")
# The one-machine stack's addresses (deploy/stack/state.py), and the authorities `requests`
# trusts, which the stack adds its own to (deploy/stack/tls.py).
STACK_ADDRESS = Setting("FLYWHEEL_STACK_ADDRESS")
STACK_CODE_SERVER_ADDRESS = Setting("FLYWHEEL_STACK_CODE_SERVER_ADDRESS")
REQUESTS_CA_BUNDLE = Setting("REQUESTS_CA_BUNDLE")


def current_env() -> str:
    """The environment named by FLYWHEEL_ENV (default `local`); anything else is an error."""
    env = ENV.value()
    if env not in ENVIRONMENTS:
        raise ValueError(f"FLYWHEEL_ENV={env!r}: expected one of {', '.join(ENVIRONMENTS)}")
    return env


def flywheel_home() -> Path:
    """The git-ignored state directory of the embedded defaults (FLYWHEEL_HOME)."""
    return Path(HOME.get() or REPO_ROOT / ".flywheel").resolve()


def dataset_repository() -> Path:
    """The DVC repository dataset versions are written to (FLYWHEEL_DVC_REPO): by default in
    the state folder, so runs never write into the checkout; a team that commits its dataset
    pointers names its checkout's `data/`."""
    return Path(DVC_REPO.get() or flywheel_home() / "checkout" / "data")


def dbt_password() -> str:
    """dbt's password: FLYWHEEL_DBT_PASSWORD where FLYWHEEL_DBT_USER names dbt's own role, else
    the warehouse's (FLYWHEEL_WAREHOUSE_PASSWORD)."""
    return (DBT_PASSWORD if DBT_USER.get() else WAREHOUSE_PASSWORD).get() or ""


def warehouse_path() -> str:
    """The DuckDB database dbt and the assets share (FLYWHEEL_WAREHOUSE_PATH)."""
    # dbt_project/profiles.yml falls back to the same file: <repo>/.flywheel/warehouse.duckdb.
    return WAREHOUSE_PATH.get() or str(flywheel_home() / "warehouse.duckdb")


def labeling_backend() -> str:
    """The labeling backend named by FLYWHEEL_LABELING (default `files`)."""
    backend = LABELING.value()
    if backend not in LABELING_BACKENDS:
        raise ConfigurationError(
            f"FLYWHEEL_LABELING={backend!r}: expected one of {', '.join(LABELING_BACKENDS)}"
        )
    return backend


def environment_of(names: Iterable[str]) -> dict[str, str]:
    """The variables of `names` that are set (and not empty), as the environment has them: what
    a process passes on to the services it starts, or what a cached state depends on."""
    return {name: os.environ[name] for name in names if os.environ.get(name)}


# Each setting of the retraining job: (op, config field, default).
RETRAINING_SETTINGS = {
    "FLYWHEEL_TRIALS": ("challenger_model", "n_trials", 1),
    "FLYWHEEL_MAX_EPOCHS": ("challenger_model", "max_epochs", 12),
    "FLYWHEEL_MEMBERS": ("challenger_model", "members", 3),
    "FLYWHEEL_VALIDATION_DAYS": ("training_dataset", "validation_days", 7),
    "FLYWHEEL_TEST_DAYS": ("training_dataset", "test_days", 7),
    "FLYWHEEL_TUNING_WORKERS": ("challenger_model", "workers", 1),
}


def retraining_default(name: str) -> int:
    """The default of retraining setting `name`: the one definition the op configs, the command
    line and the docs share."""
    return RETRAINING_SETTINGS[name][2]


SENSOR_INTERVAL = "FLYWHEEL_SENSOR_INTERVAL_S"
TASK = "FLYWHEEL_TASK"
# The label exchange (pipelines/resources.py: label_exchange).
LABELING_SETTINGS = (
    "FLYWHEEL_LABELING",
    "FLYWHEEL_LABEL_STUDIO_URL",
    "FLYWHEEL_LABEL_STUDIO_TOKEN",
    "FLYWHEEL_LABEL_STUDIO_PROJECT",
)
# What the shell that starts a deployment may set for the code location.
SETTINGS = (*RETRAINING_SETTINGS, SENSOR_INTERVAL, TASK, *LABELING_SETTINGS)


def positive_int(name: str, environ: Mapping[str, str] | None = None) -> int | None:
    """Environment variable `name` as a whole number >= 1, None when unset; an error naming it
    otherwise."""
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name}={value!r}: expected a whole number >= 1")
    return int(value)


def retraining_settings(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """Each retraining setting's value: from the environment, else its default."""
    return {
        name: value if (value := positive_int(name, environ)) is not None else default
        for name, (_, _, default) in RETRAINING_SETTINGS.items()
    }


def retraining_run_config(values: Mapping[str, int] | None = None) -> dict:
    """The retraining job's run config of setting `values` (default: the environment's)."""
    ops: dict[str, dict] = {}
    for name, value in (values or retraining_settings()).items():
        op, field, _ = RETRAINING_SETTINGS[name]
        ops.setdefault(op, {"config": {}})["config"][field] = value
    return {"ops": ops}


def sensor_interval_s(environ: Mapping[str, str] | None = None) -> int | None:
    """The least seconds between two evaluations of every sensor, or None for their own."""
    return positive_int(SENSOR_INTERVAL, environ)
