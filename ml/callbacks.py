"""Lightning plugins and callbacks that make training resumable and its checkpoints atomic."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temp file in the target directory, then ``os.replace``s it.

    A process killed during a save leaves the previous checkpoint intact (plus at most a stray
    temp file), never a truncated ``last.ckpt``. Local filesystems only.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        """Serialise ``checkpoint`` and atomically move it to ``path``."""
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO does not take storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            # mkstemp creates 0600 files; checkpoints are ordinary artefacts others may read.
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # Persist the rename itself so a power loss cannot resurrect the old directory entry.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EpochSeed(L.Callback):
    """Reseeds torch at every epoch start from (seed, epoch, rank).

    Lightning checkpoints do not carry RNG state, so dropout masks after a resume would otherwise
    differ from an uninterrupted run.
    """

    def __init__(self, seed: int):
        self.seed = seed

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Seed the global torch generators for this epoch and rank."""
        torch.manual_seed(
            (self.seed * 1_000_003 + trainer.current_epoch) * 101 + trainer.global_rank
        )


class MetricHistory(L.Callback):
    """Records the validation metrics of every epoch; its state is saved in checkpoints."""

    def __init__(self, monitor: str = "val/logloss", mode: str = "min"):
        self.monitor, self.mode = monitor, mode
        self.records: list[dict[str, float]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Append this epoch's ``val/*`` metrics."""
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        self.records.append({"epoch": float(trainer.current_epoch), **metrics})

    def best(self) -> dict[str, float]:
        """Return the record with the best monitored value (empty if nothing was validated)."""
        scored = [r for r in self.records if self.monitor in r]
        if not scored:
            return {}
        pick = min if self.mode == "min" else max
        return pick(scored, key=lambda r: r[self.monitor])

    def state_dict(self) -> dict[str, Any]:
        """Return the recorded history for the checkpoint."""
        return {"records": self.records}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the history from a checkpoint."""
        self.records = list(state_dict["records"])
