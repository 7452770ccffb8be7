"""Experiment tracking and tuning storage: MLflow runs and registry, Optuna study storage.

Locally both live under `FLYWHEEL_HOME`: an MLflow SQLite store (tracking and model registry)
with artifacts beside it, and one Optuna journal file per study. In production the tracking
server comes from `MLFLOW_TRACKING_URI` and the studies from an RDB URL
(`FLYWHEEL_OPTUNA_STORAGE`), so every worker and pod sees the same state.
"""

from __future__ import annotations

import fcntl
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import PrivateAttr

from pipelines.lib.errors import ConfigurationError, reason, redact
from pipelines.settings import OPTUNA_STORAGE, REPO_ROOT, TRACKING_URI

# MLflow and Optuna are imported where they are used: the code location loads this module in
# every run's step processes, and only the training step needs them.
if TYPE_CHECKING:
    import mlflow
    import optuna
    from mlflow import MlflowClient
    from mlflow.entities import Metric
    from optuna.trial import FrozenTrial

    TrialCallback = Callable[[optuna.Study, FrozenTrial], None]


SQLITE_PREFIX = "sqlite:///"
# The experiment of a tracker given none; the code location gives each task its own
# (pipelines.resources.per_task).
DEFAULT_EXPERIMENT = "flywheel"
# Where the prod locations come from (tracker_resource, tuning_storage), named in errors.
TRACKING_SETTING = TRACKING_URI.name
STORAGE_SETTING = OPTUNA_STORAGE.name


class MlflowTracker(dg.ConfigurableResource):
    """An MLflow tracking store and model registry, and the experiment training runs go to."""

    tracking_uri: str
    registry_uri: str | None = None
    experiment: str = DEFAULT_EXPERIMENT
    # Used only when the experiment is created; a tracking server chooses its own otherwise.
    artifact_location: str | None = None
    _reachable: bool = PrivateAttr(default=False)

    def check(self, timeout_s: float = 5.0) -> None:
        """ConfigurationError naming MLFLOW_TRACKING_URI when its server does not answer."""
        if self._reachable or not self.tracking_uri.startswith(("http://", "https://")):
            return
        _probe_server(self.tracking_uri, timeout_s)
        self._reachable = True

    def client(self) -> MlflowClient:
        """A client bound to this store, independent of the process-wide MLflow settings."""
        # MLflow retries a refused connection for minutes; a wrong URI fails here in seconds.
        self.check()
        from mlflow import MlflowClient

        with _first_opening(self.tracking_uri, self.registry_uri) as first:
            client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.registry_uri)
            if first:
                client.search_registered_models(max_results=1)  # opens the registry's store too
        return client

    def experiment_id(self) -> str:
        """The id of the experiment, created (with the artifact location) on first use."""
        from mlflow.exceptions import MlflowException

        client = self.client()
        experiment = client.get_experiment_by_name(self.experiment)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return client.create_experiment(
                self.experiment, artifact_location=self.artifact_location
            )
        except MlflowException as e:
            # Another run created it between the lookup and the creation.
            if e.error_code != "RESOURCE_ALREADY_EXISTS":  # as registry.champion reads codes
                raise
            experiment = client.get_experiment_by_name(self.experiment)
            if experiment is None:
                raise
            return experiment.experiment_id

    @contextmanager
    def start_run(self, run_name: str, tags: dict[str, str]) -> Iterator[mlflow.ActiveRun]:
        """Start the active (parent) run; fluent calls inside it (`log_model`) go to this store."""
        import mlflow

        experiment_id = self.experiment_id()
        with (
            process_wide_store(self.tracking_uri, self.registry_uri),
            mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=tags) as run,
        ):
            yield run

    def log_metrics(
        self, run_id: str, metrics: dict[str, float], history: Sequence[dict[str, float]] = ()
    ) -> None:
        """Log final metrics, and per-epoch records (each with an "epoch") as metric steps."""
        from mlflow.entities import Metric

        entries = [Metric(k, float(v), _now_ms(), 0) for k, v in metrics.items()]
        entries += _epoch_metrics(history, _now_ms())
        self.client().log_batch(run_id, metrics=entries)

    def log_params(self, run_id: str, params: dict[str, object]) -> None:
        """Log parameters of a run."""
        from mlflow.entities import Param

        self.client().log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def trial_callback(self, parent_run_id: str, monitor: str = "val/logloss") -> TrialCallback:
        """An Optuna callback logging each finished trial as a run nested under the parent.

        Nested runs inherit the parent's own tags (dataset hash, commit, Dagster run id) and get
        the trial's parameters, state, device, wall seconds and per-epoch validation metrics.
        """
        from mlflow.entities import Param, RunStatus
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
        from optuna.trial import TrialState

        client = self.client()
        parent = client.get_run(parent_run_id)
        inherited = {k: v for k, v in parent.data.tags.items() if not k.startswith("mlflow.")}

        def log_trial(study: optuna.Study, trial: FrozenTrial) -> None:
            tags = inherited | {
                MLFLOW_PARENT_RUN_ID: parent_run_id,
                "optuna.study": study.study_name,
                "optuna.trial_number": str(trial.number),
                "optuna.trial_state": trial.state.name,
                "device": str(trial.user_attrs.get("device", "unknown")),
            }
            start = _ms(trial.datetime_start)
            run = client.create_run(
                parent.info.experiment_id, start, tags, run_name=f"trial-{trial.number}"
            )
            client.log_batch(
                run.info.run_id,
                metrics=trial_metrics(trial, monitor, start),
                params=[Param(k, str(v)) for k, v in trial.params.items()],
            )
            ok = trial.state in (TrialState.COMPLETE, TrialState.PRUNED)
            status = RunStatus.to_string(RunStatus.FINISHED if ok else RunStatus.FAILED)
            client.set_terminated(run.info.run_id, status, _ms(trial.datetime_complete))

        return log_trial

    def end_abandoned(self, dagster_run_ids: Sequence[str]) -> list[str]:
        """End as KILLED the runs still RUNNING that Dagster runs `dagster_run_ids` started; their
        ids. A run whose process was killed (SIGKILL, the OOM killer) never ended its own: its
        retry calls this for the attempts before it, which would otherwise stay RUNNING for ever."""
        from mlflow.entities import RunStatus

        if not dagster_run_ids:
            return []
        client, experiment_id = self.client(), self.experiment_id()
        ended = []
        for dagster_run_id in dagster_run_ids:
            running = client.search_runs(
                [experiment_id],
                f"tags.`dagster.run_id` = '{dagster_run_id}' and attributes.status = 'RUNNING'",
            )
            for run in running:
                client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.KILLED))
                ended.append(run.info.run_id)
        return ended

    def run_url(self, run_id: str) -> str | None:
        """A link to the run in the tracking server's UI (None for a local store)."""
        if not self.tracking_uri.startswith(("http://", "https://")):
            return None
        run = self.client().get_run(run_id)
        base = self.tracking_uri.rstrip("/")
        return f"{base}/#/experiments/{run.info.experiment_id}/runs/{run_id}"


# SQLite stores this process has seen initialized (or initialized itself).
_INITIALIZED: set[str] = set()


@contextmanager
def _first_opening(tracking_uri: str, registry_uri: str | None) -> Iterator[bool]:
    """Around a process's first opening of a local SQLite store: an exclusive lock, yielding True.

    MLflow creates and migrates an empty database's tables in whichever process opens it first,
    with no lock: runs starting together on a fresh home (four partitions of the daily job) race
    through the migrations, and all but one fail on tables or columns the others just made. The
    lock is on a file beside the database; by the time a process holds it, any other's creation
    has finished. Later openings in the process, and other stores, yield False without a lock.
    A SQLite registry apart from a SQLite tracking store shares the tracking database's lock; a
    server on either side takes no lock (the server creates its own tables). A process killed
    inside releases the lock with its file; what it left of MLflow's migrations is not repaired
    here.
    """
    uris = {tracking_uri, registry_uri or tracking_uri}
    if not all(uri.startswith(SQLITE_PREFIX) for uri in uris) or uris <= _INITIALIZED:
        yield False
        return
    db = Path(tracking_uri.removeprefix(SQLITE_PREFIX))
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(f"{db.name}.init-lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released on close, or by the kernel if killed
        yield True
    _INITIALIZED.update(uris)


def trial_metrics(trial: FrozenTrial, monitor: str, timestamp: int) -> list[Metric]:
    """Per-epoch metrics of a trial, its best monitored value, wall seconds and epochs run.

    A `history` user attribute (records of all `val/*` metrics per epoch) is used when the
    objective stores one; otherwise the monitored metric comes from the values the pruning
    callback reported, one per epoch.
    """
    from mlflow.entities import Metric

    history = trial.user_attrs.get("history")
    if history is None:
        history = [{"epoch": step, monitor: v} for step, v in trial.intermediate_values.items()]
    metrics = _epoch_metrics(history, timestamp)
    if trial.value is not None:
        metrics.append(Metric(f"best/{monitor}", float(trial.value), timestamp, 0))
    for name in ("wall_seconds", "epochs_run"):
        if name in trial.user_attrs:
            metrics.append(Metric(f"trial/{name}", float(trial.user_attrs[name]), timestamp, 0))
    return metrics


def git_commit(repo: Path = REPO_ROOT) -> str:
    """The commit checked out at `repo`, or "unknown" where it is not a git checkout."""
    try:
        result = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except FileNotFoundError:  # no git executable, as in slim runtime images
        return "unknown"
    return result.stdout.strip() if result.returncode == 0 else "unknown"


def tracker_resource(env: str, home: Path, experiment: str = DEFAULT_EXPERIMENT) -> MlflowTracker:
    """The tracker of `env`, its runs in `experiment`: a SQLite store under `home` locally,
    `MLFLOW_TRACKING_URI` in prod."""
    if env == "local":
        root = home / "mlflow"
        return MlflowTracker(
            tracking_uri=f"{SQLITE_PREFIX}{root / 'mlflow.db'}",
            artifact_location=(root / "artifacts").as_uri(),
            experiment=experiment,
        )
    return MlflowTracker(tracking_uri=dg.EnvVar(TRACKING_SETTING), experiment=experiment)


def _probe_server(uri: str, timeout_s: float) -> None:
    import http.client
    import ssl
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return  # it answered: what it said is for MLflow's own requests to report
    except (OSError, http.client.HTTPException) as e:
        # TLS is MLflow's to judge (MLFLOW_TRACKING_INSECURE_TLS, MLFLOW_TRACKING_SERVER_CERT_PATH).
        if isinstance(getattr(e, "reason", e), ssl.SSLError):
            return
        raise ConfigurationError(
            f"MLflow tracking server {redact(uri)} ({TRACKING_SETTING}) is unreachable: {reason(e)}"
        ) from e


class TuningStorage(dg.ConfigurableResource):
    """Where Optuna studies live: a folder of journal files, or an RDB URL (`scheme://...`)."""

    location: str

    def check(self, timeout_s: float = 5.0) -> None:
        """ConfigurationError naming FLYWHEEL_OPTUNA_STORAGE when its database cannot be opened."""
        if "://" in self.location:
            _open_database(self.location, timeout_s)

    def for_study(self, study_name: str) -> str:
        """The storage of one study, as `ml.config.TuneConfig.storage` takes it; a database is
        opened first, so a wrong URL fails before training starts, not deep inside the study."""
        if "://" in self.location:
            self.check()
            return self.location
        return str(Path(self.location) / f"{study_name}.journal")


def tuning_storage(env: str, home: Path) -> TuningStorage:
    """Study storage of `env`: journals under `home/optuna`, `FLYWHEEL_OPTUNA_STORAGE` in prod."""
    if env == "local":
        return TuningStorage(location=str(home / "optuna"))
    return TuningStorage(location=dg.EnvVar(STORAGE_SETTING))


def _open_database(url: str, timeout_s: float) -> None:
    import sqlalchemy
    from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

    named = f"Optuna study storage {redact(url)} ({STORAGE_SETTING})"
    try:
        parsed = sqlalchemy.make_url(url)
        # libpq and MySQL drivers wait minutes for a silent host unless told otherwise.
        timeout = {"connect_timeout": max(1, round(timeout_s))}
        connect_args = timeout if parsed.get_backend_name() in ("postgresql", "mysql") else {}
        engine = sqlalchemy.create_engine(parsed, connect_args=connect_args)
    except (ArgumentError, NoSuchModuleError) as e:
        raise ConfigurationError(f"{named} is not a database URL SQLAlchemy knows: {e}") from e
    except ImportError as e:
        raise ConfigurationError(
            f"{named} needs a database driver that is not installed ({e}); name an installed "
            "one in the URL, e.g. postgresql+psycopg2://"
        ) from e
    try:
        with engine.connect():
            pass
    except DBAPIError as e:
        why = str(e.orig).strip().splitlines()[0] if e.orig is not None else reason(e)
        raise ConfigurationError(f"{named} cannot be opened: {why}") from e
    finally:
        engine.dispose()


@contextmanager
def process_wide_store(tracking_uri: str, registry_uri: str | None) -> Iterator[None]:
    import mlflow
    from mlflow.environment_variables import MLFLOW_REGISTRY_URI

    # Fluent calls such as mlflow.pyfunc.log_model only use the process-wide store, which MLflow
    # also exports to the environment; both are restored so that nothing outlives the run.
    tracking_before = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    registry_before = MLFLOW_REGISTRY_URI.get()
    mlflow.set_tracking_uri(tracking_uri)
    if registry_uri is not None:
        mlflow.set_registry_uri(registry_uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(tracking_before)
        if registry_uri is not None:
            mlflow.set_registry_uri(registry_before)
            if registry_before is None:
                MLFLOW_REGISTRY_URI.unset()


def _epoch_metrics(history: Sequence[dict[str, float]], timestamp: int) -> list[Metric]:
    from mlflow.entities import Metric

    return [
        Metric(k, float(v), timestamp, int(record["epoch"]))
        for record in history
        for k, v in record.items()
        if k != "epoch"
    ]


def _ms(moment: datetime | None) -> int | None:
    return int(moment.timestamp() * 1000) if moment is not None else None


def _now_ms() -> int:
    from mlflow.utils.time import get_current_time_millis

    return get_current_time_millis()
