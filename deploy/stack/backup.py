"""`python -m deploy.stack backup DIR` and `restore DIR`: the stack's state at one point, taken
while it runs, and put back into a FLYWHEEL_HOME with no stack in it.

A backup takes, in this order:

1. the whole PostgreSQL cluster (Dagster's runs, events and sensor cursors; MLflow's runs,
   registry and users; Optuna's studies; the warehouse; every role with its password), with
   `pg_basebackup` as the administrator over TLS: `postgres/base.tar` and `postgres/pg_wal.tar`,
   the WAL written while it was copied, which brings the copy to one consistent point;
2. every object of the bucket (`s3/flywheel`): landing zone, labeling, DVC remote, MLflow's
   artifacts, compute logs;
3. the dataset repository (`checkout/`: DVC pointer files and their git history, without DVC's
   cache, which the remote in the bucket holds), the login's identities (`proxy/users.json`)
   and `stack.json` (its passwords: the folder is readable by its owner only).

The order is the consistency argument. Every object a database row refers to (a landing file
the sensor's cursor has seen, an MLflow artifact, a dataset version) was written before the row
was committed, so before the database copy's point; objects are only ever added (nothing in the
pipeline deletes one), so the bucket, copied after, holds them all. It may hold more, written
after that point: a landing file the restored sensor has not seen is new to it and is taken
once, as the original's sensor would have taken it. The same holds for the dataset repository,
whose commits are only added. `manifest.json`, written last, says what was taken, when, how big,
and the PostgreSQL version; `restore` refuses a folder without it or whose parts differ from it.

Label Studio is not part of the stack: a labeling server the stack is pointed at
(FLYWHEEL_LABELING=label-studio) keeps its data itself, and a local one started by
`flywheel-sim label-studio start` under `$FLYWHEEL_HOME/label-studio/`.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from deploy.stack import postgres, s3
from deploy.stack.processes import StackError, write_atomically
from deploy.stack.stack import BUCKET, Stack
from pipelines.settings import LABEL_STUDIO_URL

MANIFEST = "manifest.json"
FORMAT = 1
# What a whole backup holds, relative to its folder; the login's identities are optional.
REQUIRED = ("postgres/base.tar", "postgres/pg_wal.tar", f"s3/{BUCKET}", "checkout", "stack.json")
USERS = "proxy/users.json"
# The folders of DVC's `.dvc/` left out: its cache (every version in it is in the remote, the
# bucket) and its scratch.
SKIPPED = {"cache", "tmp"}


def backup(stack: Stack, folder: Path, say: Callable[[str], None] = print) -> dict:
    """Take the running `stack`'s state into `folder` (new or empty; mode 0700, files 0600);
    the manifest."""
    if not (stack.root / "stack.json").exists():
        raise StackError(f"no stack in {stack.root}: nothing to back up")
    if folder.exists() and any(folder.iterdir()):
        raise StackError(f"{folder} is not empty: back up into a new folder")
    env = stack.environment()
    os.environ.update(env)  # the S3 client's certificate authority
    if not postgres.accepting(stack.postgres_url()):
        raise StackError(
            f"the stack in {stack.root} is not running: start it (`python -m deploy.stack up`)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    began, parts = time.monotonic(), {}
    say(f"backing up {stack.root} into {folder}")

    started = time.monotonic()
    client = base_backup(stack, folder / "postgres")
    parts["postgres"] = part(folder, "postgres", started, say, "the cluster, WAL streamed")
    started = time.monotonic()
    s3.save(folder / "s3", {**env, **stack.own_key("admin")}, BUCKET)  # every prefix
    parts[f"s3/{BUCKET}"] = part(folder, f"s3/{BUCKET}", started, say, f"the bucket {BUCKET!r}")
    started = time.monotonic()
    shutil.copytree(stack.root / "checkout", folder / "checkout", symlinks=True, ignore=skipped)
    parts["checkout"] = part(folder, "checkout", started, say, "the dataset repository")
    shutil.copyfile(stack.root / "stack.json", folder / "stack.json")
    parts["stack.json"] = part(folder, "stack.json", time.monotonic(), say, "addresses, secrets")
    if (stack.root / USERS).exists():
        (folder / "proxy").mkdir()
        shutil.copyfile(stack.root / USERS, folder / USERS)
        parts[USERS] = part(folder, USERS, time.monotonic(), say, "the login's identities")
    private(folder)

    manifest = {
        "format": FORMAT,
        "taken_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "stack": str(stack.root),
        "postgresql": {"major": major_of(folder / "postgres/base.tar"), "client": client},
        "label_studio": env.get(LABEL_STUDIO_URL.name) or None,
        "parts": parts,
        "seconds": round(time.monotonic() - began, 1),
    }
    write_atomically(folder / MANIFEST, json.dumps(manifest, indent=2), mode=0o600)
    say(f"backup whole in {manifest['seconds']} s: {folder / MANIFEST}")
    if manifest["label_studio"]:
        say(f"not in it: the Label Studio at {manifest['label_studio']} keeps its own data")
    return manifest


def base_backup(stack: Stack, target: Path) -> str:
    """`pg_basebackup` of the cluster into `target` (tar format, WAL streamed), as the
    administrator over TLS; the client's version."""
    tool = str(postgres.binaries() / "pg_basebackup")
    chosen = stack.settings
    env = {
        **os.environ,
        "PGPASSWORD": chosen["postgres_password"],  # never on a command line
        **stack.certificates.client_environment(),  # verify-full against the stack's authority
    }
    command = [
        *[tool, "-h", stack.address, "-p", str(chosen["ports"]["postgres"])],
        *["-U", postgres.ROLE, "-D", str(target), "-Ft", "-X", "stream"],
        # A checkpoint at once, not spread over minutes of the server's checkpoint interval.
        *["--checkpoint=fast", "--no-password", "--label=flywheel backup"],
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # A server started before its pg_hba.conf let the administrator replicate has not
        # read the file `up` writes now.
        hint = "\n(restart the stack: `down`, then `up`)" if "pg_hba.conf" in done.stderr else ""
        raise StackError(f"pg_basebackup failed:\n{done.stdout}{done.stderr}{hint}")
    version = subprocess.run([tool, "--version"], capture_output=True, text=True, check=True)
    return version.stdout.strip()


def skipped(folder: str, names: list[str]) -> set[str]:
    """What the dataset repository's copy leaves out: DVC's cache and scratch, and git's lock
    files (a commit under way when copied would leave one that stops the next)."""
    left = {name for name in names if name.endswith(".lock")}
    if Path(folder).name == ".dvc":
        left |= SKIPPED & set(names)
    return left


def part(folder: Path, name: str, started: float, say: Callable[[str], None], what: str) -> dict:
    """A part's entry in the manifest (files, bytes, seconds), said as a progress line."""
    files, size = measure(folder / name)
    seconds = round(time.monotonic() - started, 1)
    say(f"{name:<17} {what}: {files} file{'s' * (files != 1)}, {size / 1e6:.1f} MB in {seconds} s")
    return {"files": files, "bytes": size, "seconds": seconds}


def measure(path: Path) -> tuple[int, int]:
    """How many files are at `path` (itself, or under it) and their bytes."""
    if path.is_file():
        return 1, path.stat().st_size
    found = [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    return len(found), sum(p.stat().st_size for p in found)


def private(folder: Path) -> None:
    """Make everything under `folder` its owner's only: folders 0700, files 0600."""
    for where, folders, files in os.walk(folder):
        for name in folders:
            (Path(where) / name).chmod(0o700)
        for name in files:
            path = Path(where) / name
            if not path.is_symlink():
                path.chmod(0o600)


def major_of(base: Path) -> str:
    """The PostgreSQL major version of the cluster in a base backup's tar (its PG_VERSION)."""
    with tarfile.open(base) as tar:
        member = tar.extractfile("PG_VERSION")
        return member.read().decode().strip() if member else ""


def restore(root: Path, folder: Path, say: Callable[[str], None] = print) -> None:
    """Put the backup in `folder` back as the stack under `root` (`$FLYWHEEL_HOME/stack`, absent
    or empty): the cluster, the bucket's copy (put into the store at the next `up`), the dataset
    repository, the login's identities, and `stack.json` without its ports (the next `up`
    chooses free ones) but with its passwords, which the restored roles have."""
    manifest = read_manifest(folder)
    if root.exists() and any(root.iterdir()):
        raise StackError(
            f"{root} is not empty: restore into a FLYWHEEL_HOME with no stack in it "
            "(or move that folder away first)"
        )
    taken, here = manifest["postgresql"]["major"], server_major()
    if taken != here:
        raise StackError(
            f"the backup in {folder} is of a PostgreSQL {taken} cluster, and this machine's "
            f"server is PostgreSQL {here}: restore where PostgreSQL {taken} is installed"
        )
    began = time.monotonic()
    # Made beside the stack's folder and renamed into place once whole: a restore cut short
    # leaves no half-made stack for `up` to start.
    staging = root.with_name(f".{root.name}.restoring")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    started = time.monotonic()
    unpack_cluster(folder / "postgres", staging / "postgres")
    say(f"postgres          the cluster, in {time.monotonic() - started:.1f} s")
    started = time.monotonic()
    shutil.copytree(folder / "s3" / BUCKET, staging / "s3" / BUCKET)
    if (etags := folder / "s3" / f"{BUCKET}{s3.ETAGS}").exists():  # absent from older backups
        shutil.copyfile(etags, staging / "s3" / etags.name)
    say(f"s3/{BUCKET:<14} the bucket's copy, in {time.monotonic() - started:.1f} s")
    shutil.copytree(folder / "checkout", staging / "checkout", symlinks=True)
    settings = json.loads((folder / "stack.json").read_text())
    settings["ports"] = {}  # each chosen again, free on this machine, at the next `up`
    write_atomically(staging / "stack.json", json.dumps(settings, indent=2), mode=0o600)
    if (folder / USERS).exists():
        (staging / "proxy").mkdir()
        shutil.copyfile(folder / USERS, staging / USERS)
        (staging / USERS).chmod(0o600)
    if root.exists():
        root.rmdir()
    staging.rename(root)
    say(
        f"restored the backup of {manifest['taken_at']} into {root} in "
        f"{time.monotonic() - began:.1f} s: start it with `python -m deploy.stack up`"
    )


def read_manifest(folder: Path) -> dict:
    """The manifest of the backup in `folder`; StackError if there is none, or if a part it
    lists is missing or not as it says."""
    path = folder / MANIFEST
    if not path.is_file():
        raise StackError(
            f"{folder} holds no whole backup: no {MANIFEST} (a backup writes it last, once every "
            "part is taken)"
        )
    manifest = json.loads(path.read_text())
    parts = manifest.get("parts", {})
    wrong = [name for name in ("postgres", f"s3/{BUCKET}", "checkout") if name not in parts]
    wrong += [name for name in REQUIRED if not (folder / name).exists()]
    measured = {name: measure(folder / name) for name in parts}
    wrong += [
        f"{name} ({measured[name][0]} files, not {entry['files']})"
        for name, entry in parts.items()
        if measured[name] != (entry["files"], entry["bytes"])
    ]
    if wrong or manifest.get("format") != FORMAT:
        raise StackError(
            f"the backup in {folder} is incomplete or not as its {MANIFEST} says: "
            f"{', '.join(dict.fromkeys(wrong)) or 'format ' + str(manifest.get('format'))}"
        )
    return manifest


def unpack_cluster(source: Path, data: Path) -> None:
    """The cluster's data folder `data` from a base backup's tars in `source`: the base, then the
    WAL streamed while it was taken, which the server replays at its first start (from the
    checkpoint `backup_label` names) to the backup's consistent point. Mode 0700, the server
    user's."""
    data.mkdir(mode=0o700)
    with tarfile.open(source / "base.tar") as tar:
        tar.extractall(data, filter="data")
    with tarfile.open(source / "pg_wal.tar") as tar:
        tar.extractall(data / "pg_wal", filter="data")
    private(data)  # as the server makes them: no group access
    data.chmod(0o700)
    postgres.give_to_server_user(data)
    if os.geteuid() == 0:
        ids = server_ids()
        for where, folders, files in os.walk(data):
            for name in folders + files:
                os.chown(Path(where) / name, *ids, follow_symlinks=False)


def server_ids() -> tuple[int, int]:
    """The server user's uid and gid."""
    import pwd

    entry = pwd.getpwnam(postgres.SERVER_USER)
    return entry.pw_uid, entry.pw_gid


def server_major() -> str:
    """The major version of this machine's PostgreSQL server."""
    done = subprocess.run(
        [str(postgres.binaries() / "postgres"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()[2].split(".")[0]
