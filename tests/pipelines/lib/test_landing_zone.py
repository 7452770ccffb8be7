"""The landing zone's two implementations behave alike: a local folder and an S3 prefix."""

from __future__ import annotations

from datetime import date

import pytest
from dagster_aws.s3 import S3Resource

from pipelines.lib.errors import ConfigurationError
from pipelines.lib.landing_zone import LandingZone, LocalLandingZone, S3LandingZone
from sim.world.replay import land_days


@pytest.fixture(params=["local", "s3"])
def zone(request, tmp_path) -> LandingZone:
    if request.param == "local":
        return LocalLandingZone(root=str(tmp_path / "landing"))
    env = request.getfixturevalue("s3_env")
    s3 = S3Resource(endpoint_url=env.endpoint_url, region_name=env.region)
    return S3LandingZone(s3=s3, bucket=env.bucket, prefix="landing")


def test_write_read_and_list(zone):
    assert zone.list_files() == []
    assert zone.write_bytes("flights/2013-01-01.csv", b"a,b\n1,2\n") is True
    assert zone.write_bytes("dimension/planes.csv", b"tailnum\nN1\n") is True
    assert zone.read_bytes("flights/2013-01-01.csv") == b"a,b\n1,2\n"
    assert [(f.key, f.size) for f in zone.list_files()] == [
        ("dimension/planes.csv", 11),
        ("flights/2013-01-01.csv", 8),
    ]
    assert [f.key for f in zone.list_files("dimension/")] == ["dimension/planes.csv"]


def test_a_prefix_lists_what_starts_with_it_whatever_folder_it_ends_in(zone):
    keys = ["inbox/2013-01-02/a.json", "inbox/2013-01-12/b.json", "inbox/x.json", "outbox/c.json"]
    for key in keys:
        zone.write_bytes(key, b"[]")
    for prefix in ("", "inbox", "inbox/", "inbox/2013-01-0", "inbox/2013-01-12/", "in", "nowhere/"):
        expected = [k for k in sorted(keys) if k.startswith(prefix)]
        assert [f.key for f in zone.list_files(prefix)] == expected, prefix


def test_identical_bytes_are_not_rewritten(zone):
    zone.write_bytes("weather/2013-01-01.csv", b"x\n1\n")
    (before,) = zone.list_files()
    assert zone.write_bytes("weather/2013-01-01.csv", b"x\n1\n") is False
    assert zone.list_files() == [before]


def test_changed_bytes_change_the_version(zone):
    zone.write_bytes("weather/2013-01-01.csv", b"x\n1\n")
    (before,) = zone.list_files()
    # Same size on purpose: the version must not rest on the size alone.
    assert zone.write_bytes("weather/2013-01-01.csv", b"x\n2\n") is True
    (after,) = zone.list_files()
    assert after.key == before.key and after.size == before.size
    assert after.version != before.version
    assert zone.read_bytes("weather/2013-01-01.csv") == b"x\n2\n"


def test_missing_key_raises_file_not_found_naming_it(zone):
    with pytest.raises(FileNotFoundError, match=r"flights/2099-01-01\.csv"):
        zone.read_bytes("flights/2099-01-01.csv")


@pytest.mark.parametrize("key", ["../outside.csv", "flights/../../outside.csv", "/etc/passwd"])
def test_local_zone_rejects_keys_outside_its_root(tmp_path, key):
    zone = LocalLandingZone(root=str(tmp_path / "landing"))
    with pytest.raises(ValueError, match="inside the landing zone"):
        zone.write_bytes(key, b"x")
    with pytest.raises(ValueError, match="inside the landing zone"):
        zone.read_bytes(key)
    assert not (tmp_path / "outside.csv").exists()


def test_local_zone_hides_unfinished_writes(tmp_path):
    zone = LocalLandingZone(root=str(tmp_path))
    (tmp_path / "flights").mkdir()
    (tmp_path / "flights" / ".tmp-abc").write_bytes(b"partial")
    assert zone.list_files() == []


def test_s3_zone_keeps_files_under_its_prefix(s3_env):
    s3 = S3Resource(endpoint_url=s3_env.endpoint_url, region_name=s3_env.region)
    zone = S3LandingZone(s3=s3, bucket=s3_env.bucket, prefix="landing")
    zone.write_bytes("dimension/airlines.csv", b"carrier,name\n")
    listed = s3.get_client().list_objects_v2(Bucket=s3_env.bucket)["Contents"]
    assert [o["Key"] for o in listed] == ["landing/dimension/airlines.csv"]
    assert zone.uri == f"s3://{s3_env.bucket}/landing"


def test_sim_lands_a_day_into_s3(s3_env):
    s3 = S3Resource(endpoint_url=s3_env.endpoint_url, region_name=s3_env.region)
    zone = S3LandingZone(s3=s3, bucket=s3_env.bucket, prefix="landing")
    report = land_days(zone, [date(2013, 1, 1)])
    assert [f.key for f in zone.list_files()] == [
        "dimension/airlines.csv",
        "dimension/airports.csv",
        "dimension/planes.csv",
        "flights/2013-01-01.csv",
        "weather/2013-01-01.csv",
    ]
    assert report.written == 5 and report.rows["flights"] == 842
    assert zone.read_bytes("flights/2013-01-01.csv").count(b"\n") == 842 + 1
    assert land_days(zone, [date(2013, 1, 1)]).written == 0


def test_sim_cli_lands_into_the_prod_landing_zone(s3_env, tmp_path, monkeypatch, capsys):
    from sim.driver.cli import main

    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path))
    monkeypatch.setenv("FLYWHEEL_S3_ENDPOINT_URL", s3_env.endpoint_url)
    monkeypatch.setenv("FLYWHEEL_LANDING_BUCKET", s3_env.bucket)
    monkeypatch.setenv("FLYWHEEL_LANDING_PREFIX", "landing")
    assert main(["advance", "--days", "1", "--env", "prod"]) == 0
    assert f"into s3://{s3_env.bucket}/landing/flights: 5 files written" in capsys.readouterr().out
    s3 = S3Resource(endpoint_url=s3_env.endpoint_url, region_name=s3_env.region)
    objects = s3.get_client().list_objects_v2(Bucket=s3_env.bucket)["Contents"]
    # Each task's files under its own prefix.
    assert "landing/flights/flights/2013-01-01.csv" in {o["Key"] for o in objects}


def test_zones_of_one_bucket_share_a_client_probed_once_and_a_failed_probe_is_not_kept(
    s3_env, monkeypatch
):
    # A sensor's resources are built anew at every tick: each new zone must not build a client
    # and probe the bucket again.
    import boto3

    from pipelines.lib import landing_zone

    probed = []
    probe = landing_zone.probe_bucket
    monkeypatch.setattr(
        landing_zone, "probe_bucket", lambda bucket, *a: probed.append(bucket) or probe(bucket, *a)
    )
    s3 = S3Resource(endpoint_url=s3_env.endpoint_url, region_name=s3_env.region)
    first, second = (S3LandingZone(s3=s3, bucket=s3_env.bucket, prefix=p) for p in ("a", "b"))
    first.write_bytes("x.csv", b"1\n")
    assert second.list_files() == []
    assert first._client() is second._client()
    assert probed == [s3_env.bucket]

    later = f"{s3_env.bucket}-later"
    with pytest.raises(ConfigurationError, match=later):
        S3LandingZone(s3=s3, bucket=later).list_files()
    boto3.client("s3", endpoint_url=s3_env.endpoint_url).create_bucket(Bucket=later)
    assert S3LandingZone(s3=s3, bucket=later).list_files() == []
    assert probed == [s3_env.bucket, later, later]
    # Other settings, another client.
    other = S3Resource(endpoint_url=s3_env.endpoint_url, region_name=s3_env.region, max_attempts=2)
    assert S3LandingZone(s3=other, bucket=s3_env.bucket)._client() is not first._client()
