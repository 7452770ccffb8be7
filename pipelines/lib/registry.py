"""The model registry as the flywheel uses it: the champion alias, decisions, models, profiles.

Every model version is registered by training; the `champion` alias names the one that scores
production. Each decision (promotion, rejection, rollback) is recorded on the version it concerns
as tags, so the registry alone tells who was champion when and why.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from pipelines.lib.runs import live_process
from pipelines.lib.tracking import MlflowTracker, process_wide_store

if TYPE_CHECKING:
    import mlflow.pyfunc

    from ml.baselines import FittedBaselines

CHAMPION = "champion"
PROFILE_ARTIFACT = "monitoring/training_profile.json"
# The tag of a training run naming the DVC hash of the dataset version it trained on.
DATASET_TAG = "dataset.dvc_hash"
# The baselines a challenger's training fitted on its train split (a pickle of
# ml.baselines.FittedBaselines), which its evaluation scores the test split with.
BASELINES_ARTIFACT = "baselines/fitted_baselines.pkl"


# The tag of a model version holding the SHA-256 digest of its stored files (the checkpoint, the
# model's code and its metadata), recorded by training when it registered the version.
DIGEST_TAG = "flywheel.artifact_sha256"
# The prefix of the folders the loaded models' files are in, followed by the loading process's
# pid and start.
MODEL_FOLDER = "flywheel-model-"
# The tag of a promoted version naming the champion it replaced ("" for the first).
PREVIOUS_TAG = "flywheel.previous_champion"


class NoChampionError(LookupError):
    """The registered model has no champion yet: nothing was promoted."""


class ArtifactDigestError(RuntimeError):
    """A model version's stored files are not those it was registered with: not loaded."""


@dataclass(frozen=True)
class ModelVersion:
    """One registered version: its number, training run and tags."""

    name: str
    version: int
    run_id: str
    tags: dict[str, str]

    @property
    def uri(self) -> str:
        """The registry URI that loads exactly this version."""
        return f"models:/{self.name}/{self.version}"


def registered_name(task_name: str) -> str:
    """The registered model of a task."""
    return f"flywheel-{task_name}"


def _version(raw: Any) -> ModelVersion:
    return ModelVersion(raw.name, int(raw.version), raw.run_id, dict(raw.tags or {}))


def model_version(tracker: MlflowTracker, name: str, version: int) -> ModelVersion:
    """One version of a registered model."""
    return _version(tracker.client().get_model_version(name, str(version)))


def champion(tracker: MlflowTracker, name: str) -> ModelVersion | None:
    """The version the champion alias points to, or None before the first promotion."""
    from mlflow.exceptions import MlflowException

    client = tracker.client()
    try:
        return _version(client.get_model_version_by_alias(name, CHAMPION))
    except MlflowException as e:
        # No registered model yet, or a model whose alias was never set (MLflow reports the
        # latter as an invalid parameter); any other error is real. A server with MLflow's
        # authentication denies an alias of a model that does not exist (403) rather than
        # report it missing: the model itself is then looked up.
        missing_alias = e.error_code == "INVALID_PARAMETER_VALUE" and "alias" in str(e)
        if e.error_code == "RESOURCE_DOES_NOT_EXIST" or missing_alias:
            return None
        if e.error_code == "PERMISSION_DENIED" and not _registered(client, name):
            return None
        raise


def _registered(client: Any, name: str) -> bool:
    """Whether the registered model `name` exists (an error but its absence is raised)."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise
    return True


def versions(tracker: MlflowTracker, name: str) -> list[ModelVersion]:
    """Every version of a registered model, oldest first."""
    found = tracker.client().search_model_versions(f"name = '{name}'")
    return sorted((_version(v) for v in found), key=lambda v: v.version)


def record_decision(
    tracker: MlflowTracker,
    name: str,
    version: int,
    decision: str,
    reason: str,
    promote: bool,
) -> ModelVersion | None:
    """Tag a version with a decision; move the champion alias to it if `promote`.

    Returns the champion the alias pointed to before (None if there was none).
    """
    client = tracker.client()
    previous = champion(tracker, name)
    tags = {
        "flywheel.decision": decision,
        "flywheel.reason": reason,
        "flywheel.decided_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if promote:
        tags[PREVIOUS_TAG] = str(previous.version) if previous else ""
        client.set_registered_model_alias(name, CHAMPION, str(version))
    for key, value in tags.items():
        client.set_model_version_tag(name, str(version), key, value)
    return previous


def rollback(tracker: MlflowTracker, name: str, to_version: int | None = None) -> ModelVersion:
    """Point the champion alias back to `to_version` (default: the champion before this one)."""
    current = champion(tracker, name)
    if current is None:
        raise NoChampionError(f"{name} has no champion: there is nothing to roll back")
    if to_version is None:
        previous = current.tags.get(PREVIOUS_TAG, "")
        if not previous:
            raise NoChampionError(
                f"{name} version {current.version} was the first champion: name a version "
                "to roll back to"
            )
        to_version = int(previous)
    known = {v.version for v in versions(tracker, name)}
    if to_version not in known:
        raise ValueError(f"{name} has no version {to_version}; versions: {sorted(known)}")
    if to_version == current.version:
        raise ValueError(f"version {to_version} is already the champion of {name}")
    reason = f"rolled back from version {current.version} by an operator"
    record_decision(tracker, name, to_version, "rollback", reason, promote=True)
    return model_version(tracker, name, to_version)


def log_json(tracker: MlflowTracker, run_id: str, payload: dict, artifact_file: str) -> None:
    """Store a JSON document as an artifact of a run."""
    tracker.client().log_dict(run_id, payload, artifact_file)


def read_json(tracker: MlflowTracker, run_id: str, artifact_file: str) -> dict:
    """Read a JSON artifact of a run."""
    return json.loads(read_bytes(tracker, run_id, artifact_file))


def read_bytes(tracker: MlflowTracker, run_id: str, artifact_file: str) -> bytes:
    """Read an artifact file of a run."""
    with tempfile.TemporaryDirectory() as folder:
        return Path(tracker.client().download_artifacts(run_id, artifact_file, folder)).read_bytes()


def log_png(tracker: MlflowTracker, run_id: str, png: bytes, artifact_file: str) -> None:
    """Store a PNG image as an artifact of a run."""
    log_bytes(tracker, run_id, png, artifact_file)


def log_bytes(tracker: MlflowTracker, run_id: str, data: bytes, artifact_file: str) -> None:
    """Store bytes as an artifact file of a run."""
    artifact = Path(artifact_file)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / artifact.name
        path.write_bytes(data)
        tracker.client().log_artifact(run_id, str(path), str(artifact.parent) or None)


def log_baselines(tracker: MlflowTracker, run_id: str, baselines: FittedBaselines) -> None:
    """Keep the baselines a challenger's training fitted with its run."""
    log_bytes(tracker, run_id, baselines.dumps(), BASELINES_ARTIFACT)


def read_baselines(tracker: MlflowTracker, run_id: str) -> FittedBaselines | None:
    """The baselines a training run kept, or None if it kept none (a run of an older
    version of the project)."""
    from ml.baselines import FittedBaselines

    folder, name = BASELINES_ARTIFACT.rsplit("/", 1)
    stored = {Path(a.path).name for a in tracker.client().list_artifacts(run_id, folder)}
    if name not in stored:
        return None
    return FittedBaselines.loads(read_bytes(tracker, run_id, BASELINES_ARTIFACT))


def artifact_digest(folder: Path) -> str:
    """The SHA-256 digest of every file under `folder`: their paths and contents, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _download(stores: tuple[str, str | None], uri: str, into: str) -> Path:
    import mlflow.artifacts

    with process_wide_store(*stores):
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=into))


def seal(tracker: MlflowTracker, name: str, version: int) -> str:
    """Record the digest of a newly registered version's stored files on it (`DIGEST_TAG`):
    every later load checks the files against it. Returns the digest."""
    with tempfile.TemporaryDirectory(prefix="flywheel-seal-") as folder:
        digest = artifact_digest(_download(_stores(tracker), f"models:/{name}/{version}", folder))
    tracker.client().set_model_version_tag(name, str(version), DIGEST_TAG, digest)
    return digest


def load_model(tracker: MlflowTracker, version: ModelVersion) -> mlflow.pyfunc.PyFuncModel:
    """The registered version as an MLflow pyfunc model, its files checked against the digest
    recorded when it was registered (`ArtifactDigestError` if they differ). Cached per
    process: a version's files are checked once, when a process first loads them."""
    return _load_model(_stores(tracker), version.uri, version.tags.get(DIGEST_TAG))


def _stores(tracker: MlflowTracker) -> tuple[str, str | None]:
    return tracker.tracking_uri, tracker.registry_uri


@lru_cache(maxsize=4)
def _load_model(
    stores: tuple[str, str | None], uri: str, expected: str | None
) -> mlflow.pyfunc.PyFuncModel:
    import mlflow.pyfunc

    # Loaded from the very files checked, so nothing can change between the check and the load;
    # the folder stays while the process may use the model's code.
    folder = model_folder()
    local = _download(stores, uri, folder)
    if expected is not None and (found := artifact_digest(local)) != expected:
        shutil.rmtree(folder, ignore_errors=True)
        raise ArtifactDigestError(
            f"{uri}: its stored files' SHA-256 digest is {found}, not the {expected} recorded "
            "when it was registered: a file was changed or corrupted in the artifact store, "
            "and the model is not loaded"
        )
    with process_wide_store(*stores):
        return mlflow.pyfunc.load_model(str(local))


def model_folder() -> str:
    """A new folder in the temporary folder for a model this process loads, removed when the
    process exits; and, first, the folders of processes that ended without removing theirs (a
    killed run's): a scoring run's process loads a model each day, and each copy would stay.
    A folder is named after its process and that process's start (pids are reused)."""
    for left in Path(tempfile.gettempdir()).glob(f"{MODEL_FOLDER}*@*-*"):
        pid, _, started = left.name.removeprefix(MODEL_FOLDER).partition("-")[0].partition("@")
        with contextlib.suppress(ValueError):  # not a name this function gave
            if live_process(int(pid), float(started)) is None:
                shutil.rmtree(left, ignore_errors=True)
    ours = f"{os.getpid()}@{psutil.Process().create_time():.2f}"
    folder = tempfile.mkdtemp(prefix=f"{MODEL_FOLDER}{ours}-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def serving_model(
    tracker: MlflowTracker, current: ModelVersion
) -> tuple[ModelVersion, mlflow.pyfunc.PyFuncModel, list[str]]:
    """The model that scores production: the champion `current`, or, when its files fail their
    check, the newest champion before it (`flywheel.previous_champion`, in turn) whose files
    pass. Returns the version served, its model, and why each newer champion was refused;
    raises `ArtifactDigestError` when no champion's files pass."""
    refused: list[str] = []
    seen: set[int] = set()
    version: ModelVersion | None = current
    while version is not None and version.version not in seen:
        seen.add(version.version)
        try:
            return version, load_model(tracker, version), refused
        except ArtifactDigestError as e:
            refused.append(str(e))
        previous = version.tags.get(PREVIOUS_TAG, "")
        version = model_version(tracker, version.name, int(previous)) if previous else None
    raise ArtifactDigestError(
        "; ".join(refused) + ". No champion before it has files that pass their check: "
        "nothing is scored. Register a new model (a retraining) or restore the files."
    )
