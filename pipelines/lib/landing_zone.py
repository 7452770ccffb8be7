"""The landing zone: where production files arrive. A local folder by default, an S3 prefix in prod.

Both implementations expose the same small interface, so the landing sensor, the ingestion
assets and the simulator never know which one they talk to.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_aws.s3 import S3Resource
from pydantic import PrivateAttr

from pipelines.lib.errors import probe_bucket, s3_errors
from pipelines.settings import environment_of

# Where the prod bucket comes from (resources.py), named in configuration errors.
BUCKET_SETTING = "FLYWHEEL_LANDING_BUCKET"
# What else chooses the credentials and region of a client built from the same settings.
CLIENT_ENVIRONMENT = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION")


@dataclass(frozen=True, order=True)
class LandingFile:
    """A file in the landing zone; `version` changes whenever its content is replaced."""

    key: str
    version: str
    size: int


def changed_files(files: list[LandingFile], cursor: str | None) -> tuple[list[LandingFile], str]:
    """The files new or replaced since `cursor`, and the cursor that marks them seen."""
    # The cursor maps every file seen to its version: a replaced file (new version) is taken
    # again, an unchanged one never twice, and nothing is skipped whatever the listing order.
    seen: dict[str, str] = json.loads(cursor) if cursor else {}
    return _changed(files, seen), json.dumps(_versions(files), sort_keys=True)


def _changed(files: list[LandingFile], seen: dict[str, str]) -> list[LandingFile]:
    return [f for f in files if seen.get(f.key) != f.version]


def _versions(files: list[LandingFile]) -> dict[str, str]:
    return {f.key: f.version for f in files}


@dataclass(frozen=True)
class SettledChanges:
    """What `settled_changes` found: the files to take now, how many new or replaced files wait
    for the listing to settle, and the cursor to store."""

    files: list[LandingFile]
    waiting: int
    cursor: str
    listing: str | None = None  # the digest of the listing the files were taken from


def settled_changes(
    files: list[LandingFile], cursor: str | None, settles: Callable[[str], bool] | None = None
) -> SettledChanges:
    """The files new or replaced since `cursor`, taken only once the zone has listed exactly the
    same files (those whose key `settles` accepts, default all) at two evaluations in a row.

    A producer writes a landing of several files (a day's feeds, the dimension tables) one file
    at a time, and an evaluation can fall between two of them: taking what is listed at once
    would split one landing into several runs, as the evaluations happen to fall. Waiting for an
    unchanged listing takes it whole, one evaluation interval later (the quiet period of
    Airflow's S3KeysUnchangedSensor, one interval long). Removed files are no change to take;
    files that `settles` refuses (a stray file rewritten every minute, say) never hold the
    others back.
    """
    seen, settling = _landing_cursor(cursor)
    changed, listing = _changed(files, seen), _versions(files)
    counted = {k: v for k, v in listing.items() if settles is None or settles(k)}
    digest = hashlib.sha256(json.dumps(counted, sort_keys=True).encode()).hexdigest()
    if any(f.key in counted for f in changed) and digest != settling:
        waiting = json.dumps({"seen": seen, "settling": digest}, sort_keys=True)
        return SettledChanges([], len(changed), waiting)
    return SettledChanges(changed, 0, json.dumps({"seen": listing}, sort_keys=True), digest)


def held_back(taken: SettledChanges, previous: str | None, keys: Collection[str]) -> str:
    """`taken`'s cursor with `keys` left untaken, as `previous` had them: the next evaluation
    finds them new or replaced again and, if the listing is still the same, takes them at once
    (the listing they were found in has settled already)."""
    before = _landing_cursor(previous)[0]
    seen = json.loads(taken.cursor)["seen"]
    for key in keys:
        if key in before:
            seen[key] = before[key]
        else:
            seen.pop(key, None)
    return json.dumps({"seen": seen, "settling": taken.listing}, sort_keys=True)


def landing_settled(cursor: str | None) -> bool:
    """Whether a `settled_changes` cursor holds no changes waiting for the listing to settle."""
    return _landing_cursor(cursor)[1] is None


def seen_keys(cursor: str | None) -> set[str]:
    """The keys of the files a `settled_changes` cursor has taken."""
    return set(_landing_cursor(cursor)[0])


def _landing_cursor(cursor: str | None) -> tuple[dict[str, str], str | None]:
    state = json.loads(cursor) if cursor else {}
    if not isinstance(state.get("seen"), dict):  # a `changed_files` cursor: what it has seen
        return state, None
    return state["seen"], state.get("settling")


class LandingZone(dg.ConfigurableResource, ABC):
    """Read and write files by key ('<feed>/2013-01-01.csv') under one root."""

    @abstractmethod
    def list_files(self, prefix: str = "") -> list[LandingFile]:
        """Every file whose key starts with `prefix`, sorted by key."""

    @abstractmethod
    def read_bytes(self, key: str) -> bytes:
        """The content of `key`; FileNotFoundError naming the key if it is absent."""

    @abstractmethod
    def write_bytes(self, key: str, data: bytes) -> bool:
        """Write `key` atomically; False (and no write) if it already holds exactly `data`."""

    @property
    @abstractmethod
    def uri(self) -> str:
        """Where the root lives, for logs and metadata."""

    def check(self, timeout_s: float = 5.0) -> None:
        """ConfigurationError naming the setting at fault when the zone cannot be reached."""


class LocalLandingZone(LandingZone):
    """A landing zone in a local folder (the embedded default)."""

    root: str

    @property
    def uri(self) -> str:
        return str(Path(self.root).resolve())

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in Path(key).parts:
            raise ValueError(f"landing key {key!r} must be a relative path inside the landing zone")
        return Path(self.root) / key

    def list_files(self, prefix: str = "") -> list[LandingFile]:
        root = Path(self.root)
        # Walk only the folder the prefix names ("inbox/2013-01-0" -> inbox/), not the root.
        start = root / prefix.rpartition("/")[0] if "/" in prefix else root
        if not start.is_dir():
            return []
        files = []
        for path in start.rglob("*"):
            if not path.is_file() or path.name.startswith(".tmp-"):
                continue
            key = path.relative_to(root).as_posix()
            if key.startswith(prefix):
                st = path.stat()
                # Every write renames a new inode into place, so the inode changes the version
                # even where mtime is too coarse to tell two same-size writes apart.
                version = f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"
                files.append(LandingFile(key, version, st.st_size))
        return sorted(files)

    def read_bytes(self, key: str) -> bytes:
        path = self._path(key)
        if not path.is_file():
            raise FileNotFoundError(f"no file {key!r} in landing zone {self.uri}")
        return path.read_bytes()

    def write_bytes(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        if path.is_file() and path.read_bytes() == data:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write beside the target, then rename: a reader never sees a half-written file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return True


class S3LandingZone(LandingZone):
    """A landing zone under an S3 prefix, through dagster-aws's S3Resource."""

    # A nested resource, not ResourceDependency: under postponed annotations Dagster cannot
    # resolve ResourceDependency[...] and rejects a plain S3Resource instance.
    s3: S3Resource
    bucket: str
    prefix: str = ""
    _cached_client: Any = PrivateAttr(default=None)

    def _client(self) -> Any:
        if self._cached_client is None:
            self._cached_client = _shared_client(self)
        return self._cached_client

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _object_key(self, key: str) -> str:
        return f"{self.prefix.rstrip('/')}/{key}" if self.prefix else key

    def check(self, timeout_s: float = 5.0) -> None:
        # One attempt with short timeouts and the S3 resource's credentials (the default ones
        # unless it names a key); the operations below retry as the S3 resource says.
        key = (self.s3.aws_access_key_id, self.s3.aws_secret_access_key)
        root = f"{self.prefix.rstrip('/')}/" if self.prefix else ""
        probe_bucket(self.bucket, BUCKET_SETTING, self.s3.endpoint_url, timeout_s, key, root)

    def list_files(self, prefix: str = "") -> list[LandingFile]:
        client = self._client()
        root = f"{self.prefix.rstrip('/')}/" if self.prefix else ""
        files = []
        with s3_errors(self.bucket, BUCKET_SETTING, self.s3.endpoint_url):
            for page in client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=root + prefix
            ):
                for obj in page.get("Contents", []):
                    key = obj["Key"][len(root) :]
                    files.append(LandingFile(key, obj["ETag"].strip('"'), obj["Size"]))
        return sorted(files)

    def read_bytes(self, key: str) -> bytes:
        client = self._client()
        with s3_errors(self.bucket, BUCKET_SETTING, self.s3.endpoint_url):
            try:
                obj = client.get_object(Bucket=self.bucket, Key=self._object_key(key))
            except client.exceptions.NoSuchKey as e:
                raise FileNotFoundError(f"no file {key!r} in landing zone {self.uri}") from e
            return obj["Body"].read()

    def write_bytes(self, key: str, data: bytes) -> bool:
        client = self._client()
        object_key = self._object_key(key)
        with s3_errors(self.bucket, BUCKET_SETTING, self.s3.endpoint_url):
            try:
                etag = client.head_object(Bucket=self.bucket, Key=object_key)["ETag"].strip('"')
            except client.exceptions.ClientError as e:
                # A HEAD answer has no body, so a missing bucket is a bare 404 too: the
                # put_object below names it.
                if e.response["Error"]["Code"] not in ("404", "NoSuchKey", "NotFound"):
                    raise
                etag = None
            # A single-part upload's ETag is the MD5 of its content: same bytes, same ETag.
            if etag == hashlib.md5(data).hexdigest():
                return False
            client.put_object(Bucket=self.bucket, Key=object_key, Body=data)  # atomic in S3
        return True


# A process's S3 clients, one per bucket and settings. Dagster builds a sensor's resources anew
# at every tick, and a new client loads botocore's service model again after probing the bucket
# (a request): in an idle code server of the stack, that was the largest share of its CPU.
# boto3 clients are thread-safe and refresh expiring credentials themselves.
_CLIENTS: dict[str, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _shared_client(zone: S3LandingZone) -> Any:
    """The client of `zone`'s bucket and S3 settings, built (and the bucket probed) once."""
    settings = zone.s3.model_dump(mode="json")
    environment = environment_of(CLIENT_ENVIRONMENT)
    key = json.dumps([zone.bucket, settings, environment], sort_keys=True)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            # A wrong bucket or endpoint fails here in a second, not after the client's
            # retries; a failed probe is not kept, so the next call probes again.
            zone.check()
            _CLIENTS[key] = zone.s3.get_client()
        return _CLIENTS[key]
