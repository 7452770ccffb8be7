"""The model cache: the same dataset version, seed and settings reuse one entry, written whole."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from ml.model_cache import ModelCache, cache_key

SETTINGS = {"n_trials": 4, "max_epochs": 12, "members": 1}


@dataclass
class Result:
    """What a training returns: its checkpoint's path and a score."""

    checkpoint: str
    auroc: float


def trained(folder: Path, auroc: float = 0.7) -> Result:
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint = folder / "last.ckpt"
    checkpoint.write_bytes(b"weights" + str(auroc).encode())
    return Result(str(checkpoint), auroc)


def test_the_key_names_the_dataset_the_seed_and_the_settings() -> None:
    key = cache_key("abc123", 0, SETTINGS)
    assert key == cache_key("abc123", 0, dict(reversed(SETTINGS.items())))  # order aside
    assert key != cache_key("abc123", 1, SETTINGS)
    assert key != cache_key("abc124", 0, SETTINGS)
    assert key != cache_key("abc123", 0, {**SETTINGS, "max_epochs": 13})


def test_a_stored_model_is_found_again_by_its_key(tmp_path) -> None:
    cache = ModelCache(tmp_path / "models")
    key = cache_key("abc123", 0, SETTINGS)
    assert cache.load(key) is None
    stored = cache.store(key, trained(tmp_path / "run1"), 12.5, {"dataset": "abc123"})
    assert not stored.hit and stored.seconds == 12.5
    # The run's own folder goes (a temporary folder): the entry holds its copy.
    (tmp_path / "run1" / "last.ckpt").unlink()
    found = ModelCache(tmp_path / "models").load(key)
    assert found is not None and found.hit and found.seconds == 12.5
    assert found.result.auroc == 0.7
    assert Path(found.result.checkpoint).read_bytes() == b"weights0.7"
    assert Path(found.result.checkpoint).parent == tmp_path / "models" / key
    # Another seed is another model.
    assert cache.load(cache_key("abc123", 1, SETTINGS)) is None


def test_the_first_of_two_writers_wins(tmp_path) -> None:
    cache = ModelCache(tmp_path)
    key = cache_key("abc123", 0, SETTINGS)
    cache.store(key, trained(tmp_path / "a", 0.7), 1.0)
    second = cache.store(key, trained(tmp_path / "b", 0.8), 2.0)
    assert second.result.auroc == 0.7 and second.seconds == 1.0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_write_killed_halfway_is_never_read(tmp_path, monkeypatch) -> None:
    cache = ModelCache(tmp_path / "models")
    key = cache_key("abc123", 0, SETTINGS)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as a process dies between two files

    monkeypatch.setattr("ml.model_cache.pickle.dump", killed)
    with pytest.raises(KeyboardInterrupt):
        cache.store(key, trained(tmp_path / "run"), 1.0)
    assert cache.load(key) is None
    monkeypatch.undo()
    assert not cache.store(key, trained(tmp_path / "run"), 1.0).hit
    assert cache.load(key).hit


def test_the_hidden_folder_a_killed_writer_left_is_removed_once_stale(tmp_path) -> None:
    import os

    cache = ModelCache(tmp_path / "models")
    key = cache_key("abc123", 0, SETTINGS)
    # What SIGKILL between two files leaves (no `finally` runs): a hidden folder, half written.
    left = tmp_path / "models" / f".{key}.dead0000"
    live = tmp_path / "models" / f".{key}.live0000"
    for partial in (left, live):
        partial.mkdir(parents=True)
        (partial / "model.ckpt").write_bytes(b"half")
    old = os.stat(left).st_mtime - 2 * 3600
    os.utime(left, (old, old))
    cache.store(key, trained(tmp_path / "run"), 1.0)
    assert not left.exists()
    assert live.exists()  # another writer's, seconds old: left alone
    assert cache.load(key).hit and sorted(p.name for p in cache.folder.iterdir()) == [
        f".{key}.live0000",
        key,
    ]
