"""Look for secrets' values wherever a deployment could show them: what Dagster's UI shows (the
resources' config, every run's tags and config, every event of the event log), compute logs,
MLflow's runs, processes' command lines and environments, and Kubernetes objects.

A hit names where, and which secret by its name, never its value. The caller gives the values
by name; a deployment's own come from its environment (`pipelines.settings.environment_of`):

    scanner = SecretScanner(environment_of(SECRET_SETTINGS))
    hits = scanner.instance(instance) + scanner.compute_logs(instance) + scanner.processes()
    assert not hits, "\\n".join(map(str, hits))

`scan` runs every check it is given the input of. Where a deployment says who may hold what
(`Holders`: the stack's table, deploy/stack/holders.py), a secret found in one of its processes
that may not hold it is a hit, whichever variable it is in.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

if TYPE_CHECKING:
    import dagster as dg

# The settings of this project's deployments that hold a secret (docs/deployment.md, Secrets).
SECRET_SETTINGS = (
    "DAGSTER_PG_PASSWORD",
    "FLYWHEEL_WAREHOUSE_PASSWORD",
    "FLYWHEEL_DBT_PASSWORD",
    "FLYWHEEL_OPTUNA_STORAGE",
    "FLYWHEEL_LABEL_STUDIO_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_PASSWORD",
    "FLYWHEEL_DAGSTER_PASSWORD",
    "FLYWHEEL_LANDING_SECRET_KEY",
)
# A shorter value would be found by chance: a scan that always fails is as useless as one
# that never does.
MIN_LENGTH = 6


@dataclass(frozen=True)
class Holders:
    """Who may hold which secret: `of(pid, environment)` names the holder a process belongs to
    (None: a process outside the table, held to the variables that carry the secrets), and
    `may_hold[holder]` the secrets it may hold; a holder the table lacks may hold none."""

    of: Callable[[int, Mapping[str, str]], str | None]
    may_hold: Mapping[str, Collection[str]]


@dataclass(frozen=True)
class Hit:
    """A secret found: where, and the secret's name."""

    where: str
    secret: str

    def __str__(self) -> str:
        return f"{self.where}: {self.secret}"


class SecretScanner:
    """Finds the values of `secrets` (by name) in text, in each form a value takes when it is
    written down: as it is, escaped in JSON once or twice (Dagster's snapshots hold config as
    JSON inside JSON), URL-quoted; a URL's password (a database URL's) is looked for alone too.
    """

    def __init__(self, secrets: Mapping[str, str]):
        short = sorted(name for name, value in secrets.items() if len(value) < MIN_LENGTH)
        if short:
            raise ValueError(
                f"{', '.join(short)}: shorter than {MIN_LENGTH} characters, found by chance"
            )
        self.names = tuple(secrets)
        self._forms = {name: _forms(value) for name, value in secrets.items()}

    def text(self, data: str | bytes, where: str) -> list[Hit]:
        """A hit for each secret `data` holds."""
        raw = data if isinstance(data, bytes) else data.encode("utf-8", "backslashreplace")
        return [
            Hit(where, name)
            for name, forms in self._forms.items()
            if any(form in raw for form in forms)
        ]

    def repository(self, code: object) -> list[Hit]:
        """What a code location sends the UI (`RepositorySnap`): each resource's config, as its
        page shows it, then the rest (jobs' snapshots with their resources' config defaults,
        assets, sensors). `code`: Definitions, a RepositoryDefinition, a RemoteRepository (as a
        workspace loads it from a running code server) or its RepositorySnap."""
        import dagster as dg
        from dagster._core.remote_representation.external_data import RepositorySnap

        if isinstance(code, dg.Definitions):
            code = code.get_repository_def()
        if isinstance(code, dg.RepositoryDefinition):
            # How a code server turns its definitions into what it sends the webserver.
            code = RepositorySnap.from_def(code)
        snap = getattr(code, "repository_snap", code)
        hits = []
        for resource in snap.resources or []:
            hits += self.text(dg.serialize_value(resource), f"resource {resource.name!r}")
        named = {hit.secret for hit in hits}
        rest = self.text(dg.serialize_value(snap), f"code location {snap.name!r}'s snapshot")
        return hits + [hit for hit in rest if hit.secret not in named]

    def instance(self, instance: dg.DagsterInstance) -> list[Hit]:
        """Every run's record (tags, config), the job snapshot its page shows, and every event
        of its event log (log messages, metadata, errors); the events of no run too."""
        import dagster as dg

        hits, snapshots = [], set()
        for run in instance.get_runs():
            where = f"run {run.run_id}"
            hits += self.text(dg.serialize_value(run), f"{where} (tags, config)")
            if run.job_snapshot_id and run.job_snapshot_id not in snapshots:
                snapshots.add(run.job_snapshot_id)
                snapshot = instance.get_job_snapshot(run.job_snapshot_id)
                hits += self.text(dg.serialize_value(snapshot), f"{where}'s job snapshot")
            hits += self._events(instance, run.run_id, where)
        # Events reported without a run (runless asset events) have an empty run id.
        return hits + self._events(instance, "", "events of no run")

    def _events(self, instance: dg.DagsterInstance, run_id: str, where: str) -> list[Hit]:
        import dagster as dg

        hits = []
        for number, entry in enumerate(instance.all_logs(run_id)):
            kind = entry.dagster_event_type.value if entry.dagster_event_type else "message"
            label = f"{where}, event {number} ({kind})"
            hits += self.text(dg.serialize_value(entry), label)
        return hits

    def compute_logs(self, instance: dg.DagsterInstance) -> list[Hit]:
        """Every step's standard output and error of every run, read through the instance's
        compute log manager, wherever it keeps them (files, an object store)."""
        hits = []
        for run_id, log_key, stream in captured_logs(instance):
            data = instance.compute_log_manager.get_log_data_for_type(log_key, stream, 0, None)[0]
            where = f"run {run_id}'s {stream.value} of {'/'.join(log_key[2:])}"
            hits += self.text(data or b"", where)
        return hits

    def folder(self, folder: Path) -> list[Hit]:
        """Every file under `folder` (compute logs: each step's stdout and stderr)."""
        return [
            hit
            for path in sorted(Path(folder).rglob("*"))
            if path.is_file()
            for hit in self.text(path.read_bytes(), f"file {path}")
        ]

    def tracking_store(self, tracking_uri: str) -> list[Hit]:
        """Every MLflow experiment's tags and every run's params and tags, deleted ones too."""
        from mlflow import MlflowClient
        from mlflow.entities import ViewType

        client = MlflowClient(tracking_uri=tracking_uri)
        hits = []
        experiments = _pages(
            lambda token: client.search_experiments(view_type=ViewType.ALL, page_token=token)
        )
        for experiment in experiments:
            hits += self._pairs(experiment.tags, f"MLflow experiment {experiment.name!r} tag")
            for run in _runs(client, experiment.experiment_id):
                where = f"MLflow run {run.info.run_id}"
                hits += self._pairs(run.data.params, f"{where} param")
                hits += self._pairs(run.data.tags, f"{where} tag")
        return hits

    def _pairs(self, pairs: Mapping[str, str], where: str) -> list[Hit]:
        return [hit for k, v in pairs.items() for hit in self.text(f"{k}={v}", f"{where} {k!r}")]

    def processes(
        self, allowed: Collection[str] | None = None, holders: Holders | None = None
    ) -> list[Hit]:
        """Every process's command line, which every user of the machine can read, and the
        environment of each process this user may read. Environment variables are how secrets
        reach processes: one found in a variable `allowed` (default: the secrets' own names)
        is not a hit, one in any other variable is. A process `holders` names a holder of
        is held to its table instead: a secret it may not hold is a hit in any variable."""
        import psutil

        allowed = set(self.names if allowed is None else allowed)
        hits = []
        for process in psutil.process_iter(["pid", "name", "cmdline"]):
            where = f"process {process.info['pid']} ({process.info['name']})"
            hits += self.text("\0".join(process.info["cmdline"] or []), f"{where} command line")
            try:
                environment = process.environ()
            except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
                continue  # another user's, or gone
            holder = holders.of(process.info["pid"], environment) if holders else None
            if holder is not None:
                hits += self.held(environment, holder, holders.may_hold.get(holder, ()), where)
                continue
            for variable, value in environment.items():
                if variable not in allowed:
                    hits += self.text(value, f"{where} environment variable {variable}")
        return hits

    def held(
        self, environment: Mapping[str, str], holder: str, may_hold: Collection[str], where: str
    ) -> list[Hit]:
        """A hit for each secret in `environment`, a process of `holder`'s, that `may_hold`
        (the holder's secrets) lacks."""
        return [
            hit
            for variable, value in environment.items()
            for hit in self.text(value, f"{where} of {holder}, environment variable {variable}")
            if hit.secret not in may_hold
        ]

    def objects(self, objects: Mapping[str, Any]) -> list[Hit]:
        """Kubernetes objects by name, as dicts or the client's models (rendered as the API
        receives them), or anything else JSON can write."""
        hits = []
        for name, value in objects.items():
            if hasattr(value, "openapi_types"):  # a model of the Kubernetes client
                from kubernetes.client import ApiClient

                value = ApiClient().sanitize_for_serialization(value)
            hits += self.text(json.dumps(value, default=str), name)
        return hits


def captured_logs(instance: dg.DagsterInstance) -> Iterator[tuple[str, list[str], Any]]:
    """(run id, log key, stream) of every compute log the instance's runs captured, as their
    event logs name them (listing an object store's keys trips on the partial uploads' names)."""
    import dagster as dg
    from dagster._core.storage.compute_log_manager import ComputeIOType

    manager = instance.compute_log_manager
    for run in instance.get_runs():
        captured = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.LOGS_CAPTURED)
        keys = dict.fromkeys(e.dagster_event.event_specific_data.file_key for e in captured)
        for file_key in keys:
            log_key = list(manager.build_log_key_for_run(run.run_id, file_key))
            for stream in (ComputeIOType.STDOUT, ComputeIOType.STDERR):
                yield run.run_id, log_key, stream


def scan(
    secrets: Mapping[str, str],
    *,
    instance: dg.DagsterInstance | None = None,
    code: object = None,
    compute_logs: Path | None = None,
    tracking_uri: str | None = None,
    processes: bool = False,
    allowed_variables: Collection[str] | None = None,
    holders: Holders | None = None,
    objects: Mapping[str, Any] | None = None,
) -> list[Hit]:
    """The hits of every check given its input (`SecretScanner`'s methods say what each reads)."""
    scanner = SecretScanner(secrets)
    hits = scanner.repository(code) if code is not None else []
    if instance is not None:
        hits += scanner.instance(instance)
    if compute_logs is not None:
        hits += scanner.folder(compute_logs)
    if tracking_uri is not None:
        hits += scanner.tracking_store(tracking_uri)
    if processes:
        hits += scanner.processes(allowed_variables, holders)
    return hits + scanner.objects(objects or {})


def _forms(value: str) -> frozenset[bytes]:
    parts = {value}
    try:
        password = urlsplit(value).password
    except ValueError:  # not a URL after all (a bracket where a host would be)
        password = None
    if password and len(unquote(password)) >= MIN_LENGTH:
        parts |= {password, unquote(password)}
    forms = set()
    for part in parts:
        once = json.dumps(part)[1:-1]
        forms |= {part, once, json.dumps(once)[1:-1], quote(part, safe="")}
    return frozenset(form.encode() for form in forms)


def _runs(client: Any, experiment_id: str) -> Iterator[Any]:
    from mlflow.entities import ViewType

    return _pages(
        lambda token: client.search_runs(
            [experiment_id], run_view_type=ViewType.ALL, max_results=1000, page_token=token
        )
    )


def _pages(fetch: Callable[[str | None], Any]) -> Iterator[Any]:
    """Every item of a paged MLflow search: `fetch(page_token)` gives a page and the next token."""
    token = None
    while True:
        page = fetch(token)
        yield from page
        if not (token := page.token):
            return
