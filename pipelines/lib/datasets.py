"""Versioned datasets: Parquet snapshots tracked by DVC and pushed to a remote.

The remote is a local folder by default and an S3 prefix (dvc-s3) in production; it is set in
the DVC repository's git-ignored `config.local`, so the committed config stays machine-neutral.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from pipelines.lib.errors import ConfigurationError, probe_bucket

# Dataset versions `DvcDatasetStore.fetch` keeps, the most recently used first.
FETCHED_VERSIONS = 4

# Where the prod remote comes from (resources.py), named in configuration errors.
REMOTE_SETTING = "FLYWHEEL_DVC_REMOTE"


class DvcCommandError(RuntimeError):
    """A dvc command failed; the message holds the command and what dvc printed."""


@dataclass(frozen=True)
class DatasetVersion:
    """A dataset as DVC tracks it: its content hash, folder and files."""

    dvc_hash: str
    path: Path
    pointer: Path
    files: dict[str, Path]


def dvc_executable() -> str:
    """The dvc of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.prefix) / "bin" / "dvc"
    return str(beside) if beside.exists() else (shutil.which("dvc") or "dvc")


class DvcDatasetStore(dg.ConfigurableResource):
    """Writes dataset splits into a DVC repository and pushes them to its remote."""

    repo_dir: str
    remote_url: str
    endpoint_url: str | None = None
    remote_name: str = "flywheel"
    # Where `fetch` keeps the versions it fetched, one folder per hash (default: beside the
    # repository's own cache, `<repo_dir>/.dvc/tmp/by-hash`).
    cache_dir: str | None = None

    def dvc(self, *args: str) -> str:
        """Run a dvc command in the repository; DvcCommandError with its output if it fails."""
        cmd = [dvc_executable(), *args]
        out = subprocess.run(cmd, cwd=self.repo_dir, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise DvcCommandError(
                f"`dvc {' '.join(args)}` failed in {self.repo_dir}:\n{out.stderr}"
            )
        return out.stdout

    def check(self, timeout_s: float = 5.0) -> None:
        """ConfigurationError naming FLYWHEEL_DVC_REMOTE when its S3 bucket cannot be listed."""
        if not self.remote_url.startswith("s3://"):
            return
        bucket = self.remote_url.removeprefix("s3://").split("/", 1)[0]
        if not bucket:
            raise ConfigurationError(f"{REMOTE_SETTING}={self.remote_url!r} names no bucket")
        probe_bucket(bucket, REMOTE_SETTING, self.endpoint_url, timeout_s)

    def configure_remote(self) -> None:
        """Point the repository's default remote at `remote_url` (machine-local config), as
        `dvc remote add --local --force --default` (and `remote modify endpointurl`) would."""
        from dvc.exceptions import DvcException
        from dvc.repo import Repo

        remote = {"url": self.remote_url}
        if self.endpoint_url:
            remote["endpointurl"] = self.endpoint_url
        try:
            with Repo(self.repo_dir) as repo, repo.config.edit("local") as conf:
                conf["remote"][self.remote_name] = remote
                conf["core"]["remote"] = self.remote_name
        except (DvcException, OSError) as e:
            raise DvcCommandError(
                f"dvc could not set the remote {self.remote_url} in {self.repo_dir}: {e}"
            ) from e

    def save(self, name: str, splits: dict[str, pd.DataFrame]) -> DatasetVersion:
        """Write each split as `datasets/<name>/<split>.parquet`, track the folder, push it.

        DVC runs in this process (its Python API, as `fetch` uses it): as commands, `remote add`,
        `add` and `push` each started a Python and imported DVC, which cost far more than their
        work on a retraining's dataset."""
        from dvc.exceptions import DvcException
        from dvc.repo import Repo

        # A wrong remote fails here in a second, naming its setting, not after dvc's retries.
        self.check()
        # A run's working copy is scratch: a pod starts with none, and every version it writes
        # is pushed to the remote, where everything after reads it (`fetch`).
        if not (Path(self.repo_dir) / ".dvc").is_dir():
            init_repository(Path(self.repo_dir))
        folder = Path(self.repo_dir) / "datasets" / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        files = {}
        for split, frame in splits.items():
            files[split] = folder / f"{split}.parquet"
            # Same rows, same bytes: sorted input and no index make the DVC hash reproducible.
            table = pa.Table.from_pandas(frame, preserve_index=False)
            pq.write_table(table, files[split], compression="zstd")
        pointer = folder.with_name(f"{name}.dvc")
        self.configure_remote()
        try:
            with Repo(self.repo_dir) as repo:
                # No hint on standard output to `git add` the pointer.
                repo.scm_context.quiet = True
                # Absolute paths: the API resolves relative ones from this process's folder.
                repo.add(str(folder))
                repo.push(targets=[str(pointer)], remote=self.remote_name)
        except (DvcException, OSError) as e:
            # A remote folder that is a file, a full disk: DVC's own errors and the system's.
            raise DvcCommandError(
                f"dvc could not add {folder} in {self.repo_dir} and push it to "
                f"{self.remote_url}: {e}"
            ) from e
        return DatasetVersion(read_dvc_hash(pointer), folder, pointer, files)

    def pull(self, name: str) -> Path:
        """Fetch the files of the committed pointer `datasets/<name>.dvc` from the remote."""
        self.check()
        self.configure_remote()
        self.dvc("pull", "--remote", self.remote_name, f"datasets/{name}.dvc")
        return Path(self.repo_dir) / "datasets" / name

    def fetch(self, dvc_hash: str) -> Path:
        """The files of the dataset version `dvc_hash` (a DVC directory hash, `<md5>.dir`), fetched
        from the remote into a folder named by the hash, checksums verified, and reused after
        once its files hash to it again (a folder that does not is set aside and fetched anew).

        Needs only the remote and its credentials, not this repository's history or cache: a
        scratch DVC repository (no git) holds a pointer to the hash and pulls it. The folder
        appears, complete, by one rename, so a killed fetch leaves nothing a later one would
        take for the dataset; two processes fetching at once both end with the same files.
        """
        from dvc.exceptions import DvcException
        from dvc.repo import Repo

        if not dvc_hash.endswith(".dir") or not dvc_hash.removesuffix(".dir").isalnum():
            raise ValueError(f"{dvc_hash!r} is not a DVC directory hash (<md5>.dir)")
        cache = Path(self.cache_dir or Path(self.repo_dir) / ".dvc" / "tmp" / "by-hash")
        target = cache / dvc_hash.removesuffix(".dir")
        if target.is_dir():
            if (found := directory_hash(target)) == dvc_hash:
                os.utime(target)  # the least recently used versions are the ones dropped
                return target
            # Changed or corrupted since it was fetched: set aside, removed, and fetched again
            # from the remote, which DVC checks.
            logging.getLogger(__name__).warning(
                "the cached dataset %s hashes to %s: fetched again from %s",
                target,
                found,
                self.remote_url,
            )
            aside = target.with_name(f".{target.name}-corrupt-{uuid.uuid4().hex[:8]}")
            with contextlib.suppress(FileNotFoundError):  # another fetch set it aside first
                target.rename(aside)
            shutil.rmtree(aside, ignore_errors=True)
        self.check()
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache, prefix=f".{target.name}-") as scratch:
            remote = {"url": self.remote_url, "verify": True}
            if self.endpoint_url:
                remote["endpointurl"] = self.endpoint_url
            try:
                with Repo.init(scratch, no_scm=True) as repo, repo.config.edit("repo") as conf:
                    conf["core"].update(analytics=False, remote=self.remote_name)
                    conf["cache"]["type"] = "copy"
                    conf["remote"][self.remote_name] = remote
                pointer = Path(scratch) / "dataset.dvc"
                out = {"md5": dvc_hash, "hash": "md5", "path": "dataset"}
                pointer.write_text(yaml.safe_dump({"outs": [out]}))
                with Repo(scratch) as repo:
                    repo.pull(targets=[str(pointer)], remote=self.remote_name)
            except DvcException as e:
                damaged = "".join(f"\n  {d}" for d in damaged_objects(scratch, dvc_hash))
                raise DvcCommandError(
                    f"dataset {dvc_hash} could not be fetched from {self.remote_url}: {e}"
                    + (
                        f"\nThe remote's copies that do not match their hash:{damaged}\nRestore "
                        "them from a backup of the bucket, or copy each from a DVC cache that "
                        "holds the version (its files/md5/ path is the same)."
                        if damaged
                        else ""
                    )
                ) from e
            try:
                (Path(scratch) / "dataset").rename(target)
            except OSError:
                if not target.is_dir():  # not another fetch of the same hash that won the race
                    raise
        os.utime(target)
        self._drop_old_versions(cache, keep=target)
        return target

    def _drop_old_versions(self, cache: Path, keep: Path) -> None:
        """Remove all but the FETCHED_VERSIONS most recently used versions (one retraining a
        day would otherwise keep a copy of every dataset it ever trained on), and what killed
        fetches left."""
        versions = sorted(
            (p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        # Scratch folders of fetches killed more than an hour ago go too.
        stale = [
            p
            for p in cache.iterdir()
            if p.name.startswith(".") and time.time() - p.stat().st_mtime > 3600
        ]
        for old in [*versions[FETCHED_VERSIONS:], *stale]:
            if old == keep:
                continue
            with contextlib.suppress(FileNotFoundError):  # another process dropped it first
                shutil.rmtree(old)


def damaged_objects(scratch: str | Path, dvc_hash: str) -> list[str]:
    """What is wrong with the remote's objects of dataset `dvc_hash`, as seen from a scratch
    repository configured with the remote: each object missing, or whose content does not
    hash to its name (a corrupt object in the store), named by its path and file. Empty when
    each is whole, or when the remote cannot be read at all (the fetch's own error says why)."""
    from dvc.repo import Repo

    try:
        with Repo(str(scratch)) as repo:
            odb = repo.cloud.get_remote_odb()
            listing_path = odb.oid_to_path(dvc_hash)
            if not odb.fs.exists(listing_path):
                return [f"{listing_path}: missing (the version's list of files)"]
            damaged = []
            for entry in json.loads(odb.fs.cat_file(listing_path)):
                path = odb.oid_to_path(entry["md5"])
                if not odb.fs.exists(path):
                    damaged.append(f"{path} ({entry['relpath']}): missing")
                elif (found := hashlib.md5(odb.fs.cat_file(path)).hexdigest()) != entry["md5"]:
                    damaged.append(f"{path} ({entry['relpath']}): its content hashes to {found}")
            return damaged
    except Exception:  # a diagnosis only: the fetch's own error is raised
        return []


def directory_hash(folder: Path) -> str:
    """DVC's hash of a directory (`<md5>.dir`): the MD5 of its sorted list of files' MD5s and
    relative paths, as JSON, the way `dvc add` computes it."""
    files = sorted((p.relative_to(folder).as_posix(), p) for p in folder.rglob("*") if p.is_file())
    entries = [{"md5": _md5(path), "relpath": relpath} for relpath, path in files]
    listing = json.dumps(entries, sort_keys=True).encode("utf-8")
    return hashlib.md5(listing, usedforsecurity=False).hexdigest() + ".dir"


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def read_dvc_hash(pointer: Path) -> str:
    """The content hash DVC recorded in a `.dvc` pointer file."""
    outs = yaml.safe_load(pointer.read_text())["outs"]
    return outs[0]["md5"]


def init_repository(data: Path) -> None:
    """A new DVC repository in `data`: `dvc init --subdir` in a new git repository, no telemetry
    (`dvc init` itself reports its use unless told not to by the environment)."""
    data.mkdir(parents=True, exist_ok=True)
    dvc, env = dvc_executable(), {**os.environ, "DVC_NO_ANALYTICS": "1"}
    for command, folder in (
        (["git", "init", "-q"], data.parent),
        ([dvc, "init", "--subdir", "-q"], data),
        ([dvc, "config", "core.analytics", "false"], data),
    ):
        # Quiet (a run's output is its log), but an error is shown whole.
        done = subprocess.run(
            command, cwd=folder, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise DvcCommandError(
                f"`{' '.join(command)}` failed in {folder}:\n{done.stdout}{done.stderr}"
            )
