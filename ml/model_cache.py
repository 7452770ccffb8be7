"""A content-addressed cache of trained models, shared by the runs that would train the same one.

A model tuned and trained on the same dataset version (its content hash) with the same seed and
the same training settings is the same model, whichever run asks for it: training is
deterministic on a given machine and code (`bench.same_report`: two plays of the same days
train the same models, their scores equal to 1e-9). The cache keys an entry by a digest of
those inputs (`cache_key`); an entry is a folder holding the model's checkpoint, the pickled
result that describes it and a JSON record of its inputs and the seconds its training took.

An entry appears whole or not at all: it is written in a hidden folder beside the cache's
entries, then renamed into place (a rename within one file system is atomic). A process killed
while writing leaves only a hidden folder that no reader looks at, removed by the next store
once it is `STALE_S` old (a live write takes seconds); two processes that train
the same model both write, and the first rename wins. The cache trusts its folder: its pickles
are loaded as written, so it must be a folder only this project's runs write to. The code is
not part of the key: a folder is meant for the runs of one comparison, on one revision.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

FORMAT = 1
CHECKPOINT = "model.ckpt"
RESULT = "result.pkl"
RECORD = "entry.json"
# A hidden folder this old is a killed writer's: no write of an entry takes this long.
STALE_S = 3600.0


def cache_key(dataset_hash: str, seed: int, settings: Mapping[str, Any]) -> str:
    """The digest naming the model trained on dataset version `dataset_hash` with `seed` and
    the training `settings` (JSON-serialisable; their order does not matter)."""
    inputs = {"format": FORMAT, "dataset": dataset_hash, "seed": seed, "settings": settings}
    text = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """A cached model: its result (its `checkpoint` pointing into the entry), the seconds its
    training took when it was trained, and whether this lookup found it (`hit`)."""

    result: Any
    seconds: float
    hit: bool


class ModelCache:
    """Entries under `folder`, one folder per `cache_key`; `result`s are dataclasses with a
    `checkpoint` field naming their checkpoint file."""

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)

    def sweep(self, older_than_s: float = STALE_S) -> list[Path]:
        """Remove the hidden folders writers killed mid-write left, those not modified for
        `older_than_s` seconds; the folders removed."""
        now, removed = time.time(), []
        for partial in self.folder.glob(".*"):
            try:
                if partial.is_dir() and now - partial.stat().st_mtime > older_than_s:
                    shutil.rmtree(partial, ignore_errors=True)
                    removed.append(partial)
            except FileNotFoundError:  # its writer renamed or removed it meanwhile
                continue
        return removed

    def load(self, key: str) -> CacheEntry | None:
        """The entry of `key`, if one was written whole."""
        entry = self.folder / key
        if not (entry / RECORD).exists():
            return None
        record = json.loads((entry / RECORD).read_text())
        with open(entry / RESULT, "rb") as f:
            result = pickle.load(f)
        result = replace(result, checkpoint=str(entry / CHECKPOINT))
        return CacheEntry(result, float(record["seconds"]), hit=True)

    def store(
        self, key: str, result: Any, seconds: float, inputs: Mapping[str, Any] | None = None
    ) -> CacheEntry:
        """Write `result` and its checkpoint as the entry of `key`, atomically; the entry as
        stored (another process's, if it stored the same key first)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.sweep()
        partial = self.folder / f".{key}.{uuid.uuid4().hex[:8]}"
        partial.mkdir()
        try:
            shutil.copyfile(result.checkpoint, partial / CHECKPOINT)
            with open(partial / RESULT, "wb") as f:
                pickle.dump(replace(result, checkpoint=CHECKPOINT), f)
            record = {"seconds": seconds, "inputs": dict(inputs or {})}
            (partial / RECORD).write_text(json.dumps(record, indent=1, default=str))
            partial.rename(self.folder / key)
        except OSError:
            if not (self.folder / key / RECORD).exists():
                raise
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        stored = self.load(key)
        assert stored is not None
        return replace(stored, hit=False)
