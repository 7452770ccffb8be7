"""The stack's S3-compatible endpoint (moto's server): its bucket, and its objects across restarts.

moto's server keeps objects in memory. `down` saves every object to a folder and `up` puts them
back, so stopping the stack loses nothing; a real deployment points the same settings at S3 or
MinIO, which keep their own state.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path


def _client(env: Mapping[str, str]):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=env["FLYWHEEL_S3_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )


def restore(folder: Path, env: Mapping[str, str], bucket: str) -> int:
    """Create `bucket` if missing and put back the objects saved in `folder`; how many."""
    client = _client(env)
    names = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if bucket not in names:
        client.create_bucket(Bucket=bucket)
    saved = folder / bucket
    count = 0
    if saved.exists():
        for path in sorted(p for p in saved.rglob("*") if p.is_file()):
            client.upload_file(str(path), bucket, path.relative_to(saved).as_posix())
            count += 1
    return count


def save(folder: Path, env: Mapping[str, str], bucket: str) -> int:
    """Save every object of `bucket` under `folder/bucket` (replacing what was saved); how many."""
    client = _client(env)
    target = folder / f".{bucket}.saving"
    shutil.rmtree(target, ignore_errors=True)
    count = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            path = target / item["Key"]
            path.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, item["Key"], str(path))
            count += 1
    target.mkdir(parents=True, exist_ok=True)
    final = folder / bucket
    shutil.rmtree(final, ignore_errors=True)
    target.rename(final)
    return count
