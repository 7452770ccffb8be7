"""training_dataset: time-split Parquet snapshots, versioned by DVC, reproducible from a clone."""

import hashlib
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import pytest

from pipelines.definitions import build_definitions
from pipelines.lib import datasets
from pipelines.lib.datasets import DvcCommandError, DvcDatasetStore, directory_hash
from tests.pipelines.conftest import git, with_model


def write_examples(warehouse: Path, days: int, seed: int = 0) -> pd.DataFrame:
    """A labelled-examples mart of `days` days, 40 flights a day."""
    rng = np.random.default_rng(seed)
    dates = pd.date_range("2013-03-01", periods=days, freq="D").date
    frame = pd.DataFrame(
        {
            "flight_id": [f"{d}_AA{i}_JFK" for d in dates for i in range(40)],
            "flight_date": np.repeat(dates, 40),
            "carrier": "AA",
            "distance": rng.integers(100, 3000, days * 40).astype(float),
            "is_late": rng.random(days * 40) < 0.25,
        }
    )
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(warehouse)) as con:
        con.register("frame", frame)
        con.execute("create or replace table fct_labelled_flights as select * from frame")
    return frame


def materialize(flywheel, task: str | None = None) -> dg.MaterializeResult:
    defs = build_definitions(env="local", task_name=task)
    result = defs.resolve_job_def("__ASSET_JOB").execute_in_process(
        instance=flywheel.instance, asset_selection=[dg.AssetKey(["flights", "training_dataset"])]
    )
    return result.asset_materializations_for_node("flights__training_dataset")[0]


def remote_objects(remote: Path) -> set[Path]:
    return {p for p in remote.rglob("*") if p.is_file()}


def test_splits_by_time_and_versions_deterministically(flywheel, dvc_repo):
    write_examples(flywheel.warehouse, days=20)
    first = materialize(flywheel)
    meta = first.metadata
    folder = Path(meta["path"].value)
    splits = {s: pd.read_parquet(folder / f"{s}.parquet") for s in ("train", "validation", "test")}
    assert [len(splits[s]) for s in ("train", "validation", "test")] == [6 * 40, 7 * 40, 7 * 40]
    assert splits["train"].flight_date.max() < splits["validation"].flight_date.min()
    assert splits["validation"].flight_date.max() < splits["test"].flight_date.min()
    assert meta["dvc_hash"].value.endswith(".dir")
    assert first.tags["dagster/data_version"] == meta["dvc_hash"].value
    remote = flywheel.home / "dvc-remote"
    objects = remote_objects(remote)
    assert objects

    again = materialize(flywheel)
    assert again.metadata["dvc_hash"].value == meta["dvc_hash"].value
    assert remote_objects(remote) == objects  # unchanged inputs: no new DVC object

    write_examples(flywheel.warehouse, days=21)
    assert materialize(flywheel).metadata["dvc_hash"].value != meta["dvc_hash"].value


def test_importance_weights_travel_with_every_split(flywheel, dvc_repo, tmp_path):
    """With model.importance_exponent, every split carries each label's weight: a day's 10
    audit labels stand for its 100 flights but the 30 uncertainty picks (7 each at exponent 1),
    the targeted ones for themselves."""
    write_examples(flywheel.warehouse, days=20)
    with duckdb.connect(str(flywheel.warehouse)) as con:
        con.execute(
            "create or replace table fct_labelled_flights as select *, case when "
            "cast(split_part(split_part(flight_id, '_AA', 2), '_', 1) as int) < 10 "
            "then 'audit' else 'uncertainty' end as selection_reason from fct_labelled_flights"
        )
        con.execute(
            "create table fct_flight_features as select d.flight_date from "
            "(select distinct flight_date from fct_labelled_flights) d, range(100)"
        )
    task = with_model(tmp_path, importance_exponent=1.0)
    folder = Path(materialize(flywheel, str(task)).metadata["path"].value)
    for split in ("train", "validation", "test"):
        frame = pd.read_parquet(folder / f"{split}.parquet")
        expected = np.where(frame.selection_reason == "audit", 7.0, 1.0)
        np.testing.assert_allclose(frame.sample_weight, expected, err_msg=split)
        assert (frame.selection_reason == "audit").sum() == 10 * frame.flight_date.nunique()


def failed_dataset(flywheel):
    """The step failure of a `training_dataset` run that must fail."""
    defs = build_definitions(env="local")
    result = defs.resolve_job_def("__ASSET_JOB").execute_in_process(
        instance=flywheel.instance,
        asset_selection=[dg.AssetKey(["flights", "training_dataset"])],
        raise_on_error=False,
    )
    assert not result.success
    return result.get_step_failure_events()[0].event_specific_data


def test_too_few_labelled_days_is_a_clear_error(flywheel, dvc_repo):
    write_examples(flywheel.warehouse, days=10)
    error = failed_dataset(flywheel).error
    assert "10 labelled days cannot be split" in str(error.cause.message)


def test_a_split_of_one_class_is_refused_naming_it_before_any_version_is_cut(flywheel, dvc_repo):
    """A small task's held-out days can hold no positive label at all (the emails' January 9
    to 15 held 2 spam in 231): no model is fitted or judged on one class, so the dataset is
    refused with the split, its days and its one value, and nothing is pushed."""
    frame = write_examples(flywheel.warehouse, days=30)
    test_days = frame.flight_date >= sorted(set(frame.flight_date))[-7]
    frame.loc[test_days, "is_late"] = False
    with duckdb.connect(str(flywheel.warehouse)) as con:
        con.register("frame", frame)
        con.execute("create or replace table fct_labelled_flights as select * from frame")
    message = str(failed_dataset(flywheel).user_failure_data.description)
    expected = "the test split (280 labels, 2013-03-24 to 2013-03-30) holds only is_late=False"
    assert expected in message
    assert "validation" not in message.split(":")[0] and "labels.budget" in message
    assert not list((dvc_repo / "data" / "datasets").glob("flights*"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_fresh_clone_pulls_the_exact_files(flywheel, dvc_repo, tmp_path):
    write_examples(flywheel.warehouse, days=20)
    meta = materialize(flywheel).metadata
    folder = Path(meta["path"].value)
    expected = {p.name: sha256(p) for p in folder.glob("*.parquet")}
    git("add", "-A", cwd=dvc_repo)
    git("commit", "-qm", "dataset", cwd=dvc_repo)

    clone = tmp_path / "clone"
    git("clone", "-q", str(dvc_repo), str(clone), cwd=tmp_path)
    assert not (clone / "data" / "datasets" / "flights").exists()
    store = DvcDatasetStore(
        repo_dir=str(clone / "data"), remote_url=str(flywheel.home / "dvc-remote")
    )
    pulled = store.pull("flights")
    assert {p.name: sha256(p) for p in pulled.glob("*.parquet")} == expected


def test_push_and_pull_through_an_s3_remote(dvc_repo, s3_env, tmp_path):
    frame = pd.DataFrame({"flight_id": ["a", "b"], "is_late": [True, False]})
    remote = f"s3://{s3_env.bucket}/dvc"
    store = DvcDatasetStore(
        repo_dir=str(dvc_repo / "data"), remote_url=remote, endpoint_url=s3_env.endpoint_url
    )
    version = store.save("flights", {"train": frame})
    expected = sha256(version.files["train"])
    git("add", "-A", cwd=dvc_repo)
    git("commit", "-qm", "dataset", cwd=dvc_repo)
    clone = tmp_path / "s3-clone"
    git("clone", "-q", str(dvc_repo), str(clone), cwd=tmp_path)
    pulled = DvcDatasetStore(
        repo_dir=str(clone / "data"), remote_url=remote, endpoint_url=s3_env.endpoint_url
    ).pull("flights")
    assert sha256(pulled / "train.parquet") == expected


def test_a_version_is_fetched_by_its_hash_alone_through_s3(dvc_repo, s3_env, tmp_path, monkeypatch):
    # What a training pod has: the image (no repository history, no DVC cache), the hash and
    # the remote's settings and credentials.
    remote = f"s3://{s3_env.bucket}/dvc"
    frames = {
        "train": pd.DataFrame({"flight_id": ["a", "b"], "is_late": [True, False]}),
        "validation": pd.DataFrame({"flight_id": ["c"], "is_late": [False]}),
    }
    store = DvcDatasetStore(
        repo_dir=str(dvc_repo / "data"), remote_url=remote, endpoint_url=s3_env.endpoint_url
    )
    version = store.save("flights", frames)
    expected = {name: sha256(path) for name, path in version.files.items()}
    # A newer version replaces the working copy: the older one must come from the remote.
    newer = store.save(
        "flights", {"train": frames["train"].iloc[:1], "validation": frames["validation"]}
    )

    pod = tmp_path / "pod"
    pod.mkdir()
    fetcher = DvcDatasetStore(
        repo_dir=str(pod / "no-repository"),
        remote_url=remote,
        endpoint_url=s3_env.endpoint_url,
        cache_dir=str(pod / "cache"),
    )
    folder = fetcher.fetch(version.dvc_hash)

    assert folder == pod / "cache" / version.dvc_hash.removesuffix(".dir")
    assert {p.stem: sha256(p) for p in folder.iterdir()} == expected
    assert [p.name for p in (pod / "cache").iterdir()] == [folder.name]  # no scratch left
    assert fetcher.fetch(version.dvc_hash) == folder  # cached by hash: no second fetch
    assert directory_hash(folder) == version.dvc_hash  # DVC's own hash of the folder
    # A cached file corrupted (a flipped byte) is not reused: the version is fetched again.
    cached = folder / "train.parquet"
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0x01
    cached.write_bytes(bytes(data))
    assert fetcher.fetch(version.dvc_hash) == folder
    assert {p.stem: sha256(p) for p in folder.iterdir()} == expected
    # Only the most recently used versions stay.
    monkeypatch.setattr(datasets, "FETCHED_VERSIONS", 1)
    newest = fetcher.fetch(newer.dvc_hash)
    assert [p.name for p in (pod / "cache").iterdir()] == [newest.name] != [folder.name]


def test_a_run_with_no_working_copy_saves_a_version_another_fetches(s3_env, tmp_path, capfd):
    # A run's pod starts from the image: the repository's folder may not be there at all.
    remote = f"s3://{s3_env.bucket}/dvc"
    frame = pd.DataFrame({"flight_id": ["a", "b"], "is_late": [True, False]})
    scratch = tmp_path / "pod" / "checkout" / "data"
    store = DvcDatasetStore(
        repo_dir=str(scratch), remote_url=remote, endpoint_url=s3_env.endpoint_url
    )
    version = store.save("flights", {"train": frame})
    assert (scratch / ".dvc").is_dir()
    assert capfd.readouterr() == ("", "")  # the repository made without a word
    again = store.save("flights", {"train": frame})  # the working copy made once is reused
    assert again.dvc_hash == version.dvc_hash
    fetcher = DvcDatasetStore(
        repo_dir=str(tmp_path / "elsewhere"),
        remote_url=remote,
        endpoint_url=s3_env.endpoint_url,
        cache_dir=str(tmp_path / "cache"),
    )
    folder = fetcher.fetch(version.dvc_hash)
    assert sha256(folder / "train.parquet") == sha256(version.files["train"])


def test_a_corrupt_object_in_the_store_is_refused_named_and_served_once_restored(
    dvc_repo, s3_env, tmp_path
):
    """The fault: a dataset file's object in the bucket changes (a flipped byte). A fetch
    refuses it, names the object and its file, and leaves nothing a training could read; once
    the object is restored, the fetch gets the exact files."""
    import boto3

    remote = f"s3://{s3_env.bucket}/dvc"
    frame = pd.DataFrame({"flight_id": ["a", "b"], "is_late": [True, False]})
    store = DvcDatasetStore(
        repo_dir=str(dvc_repo / "data"), remote_url=remote, endpoint_url=s3_env.endpoint_url
    )
    version = store.save("flights", {"train": frame})
    expected = sha256(version.files["train"])
    s3 = boto3.client("s3", endpoint_url=s3_env.endpoint_url)
    (key,) = [
        o["Key"]
        for o in s3.list_objects_v2(Bucket=s3_env.bucket)["Contents"]
        if not o["Key"].endswith(".dir")
    ]
    good = s3.get_object(Bucket=s3_env.bucket, Key=key)["Body"].read()
    body = bytearray(good)
    body[len(body) // 2] ^= 0x01
    s3.put_object(Bucket=s3_env.bucket, Key=key, Body=bytes(body))

    fetcher = DvcDatasetStore(
        repo_dir=str(tmp_path / "none"),
        remote_url=remote,
        endpoint_url=s3_env.endpoint_url,
        cache_dir=str(tmp_path / "cache"),
    )
    with pytest.raises(DvcCommandError, match="do not match their hash") as refused:
        fetcher.fetch(version.dvc_hash)
    assert f"{s3_env.bucket}/{key} (train.parquet): its content hashes to" in str(refused.value)
    assert list((tmp_path / "cache").iterdir()) == []

    s3.put_object(Bucket=s3_env.bucket, Key=key, Body=good)  # restored from a backup
    assert sha256(fetcher.fetch(version.dvc_hash) / "train.parquet") == expected


def test_a_hash_missing_from_the_remote_is_a_clear_error(s3_env, tmp_path):
    fetcher = DvcDatasetStore(
        repo_dir=str(tmp_path / "none"),
        remote_url=f"s3://{s3_env.bucket}/dvc",
        endpoint_url=s3_env.endpoint_url,
        cache_dir=str(tmp_path / "cache"),
    )
    with pytest.raises(
        DvcCommandError, match=r"dataset 0{32}\.dir could not be fetched from s3://"
    ):
        fetcher.fetch("0" * 32 + ".dir")
    assert list((tmp_path / "cache").iterdir()) == []
    with pytest.raises(ValueError, match="not a DVC directory hash"):
        fetcher.fetch("../../etc")


def test_a_save_prints_nothing_and_a_remote_it_cannot_write_is_a_clear_error(
    dvc_repo, tmp_path, capfd
):
    frame = pd.DataFrame({"flight_id": ["a", "b"], "is_late": [True, False]})
    store = DvcDatasetStore(repo_dir=str(dvc_repo / "data"), remote_url=str(tmp_path / "remote"))
    version = store.save("flights", {"train": frame})
    assert remote_objects(tmp_path / "remote")
    assert version.dvc_hash == datasets.read_dvc_hash(version.pointer)
    assert capfd.readouterr().out == ""  # DVC's hints go nowhere near the simulation's terminal

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    store = DvcDatasetStore(repo_dir=str(dvc_repo / "data"), remote_url=str(blocked))
    with pytest.raises(DvcCommandError, match=f"push it to {blocked}"):
        store.save("flights", {"train": frame.iloc[:1]})
    # Not a DVC repository: the remote cannot be set, and pull says so the same way.
    store = DvcDatasetStore(repo_dir=str(tmp_path / "no-repo"), remote_url=str(tmp_path / "r"))
    (tmp_path / "no-repo").mkdir()
    with pytest.raises(DvcCommandError, match="could not set the remote"):
        store.pull("flights")
