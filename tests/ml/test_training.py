"""Training resumes after SIGKILL to the uninterrupted result; checkpoint writes are atomic."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ml.callbacks import AtomicCheckpointIO
from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES
from ml.training import LAST_CHECKPOINT, train
from tests.ml.conftest import REPO, run_until_killed

# CPU training with identical seeds and batch order is bit-for-bit repeatable; the tolerance only
# absorbs float reductions that might be reordered across processes.
RESUME_TOLERANCE = 1e-6
MODEL = ModelConfig(arch="resmlp", width=32, depth=2, dropout=0.2)
KILLED_CHILD = """
import os, signal, sys
import lightning as L
from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES
from ml.training import train

train_path, val_path, ckpt_dir = sys.argv[1:4]

class KillMidEpoch(L.Callback):
    # Epoch 1's checkpoint is on disk; die without warning a few batches into epoch 2.
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.current_epoch == 2 and batch_idx == 3:
            os.kill(os.getpid(), signal.SIGKILL)

model = ModelConfig(arch="resmlp", width=32, depth=2, dropout=0.2)
config = TrainConfig(max_epochs=4, batch_size=256, checkpoint_dir=ckpt_dir, lr=3e-3,
                     early_stopping_patience=None)
train(TabularDataModule(train_path, val_path, features=FEATURES, batch_size=256), model, config,
      callbacks=[KillMidEpoch()])
"""


def _config(checkpoint_dir: Path) -> TrainConfig:
    return TrainConfig(
        max_epochs=4,
        batch_size=256,
        checkpoint_dir=str(checkpoint_dir),
        lr=3e-3,
        early_stopping_patience=None,
    )


def test_killed_run_resumes_to_the_uninterrupted_result(
    parquet_splits: dict[str, Path], tmp_path: Path
) -> None:
    killed_dir = tmp_path / "killed"
    run_until_killed(KILLED_CHILD, parquet_splits, killed_dir)
    last = torch.load(killed_dir / LAST_CHECKPOINT, weights_only=False)
    assert last["epoch"] == 1

    dm = TabularDataModule(
        parquet_splits["train"], parquet_splits["val"], features=FEATURES, batch_size=256
    )
    reference = train(dm, MODEL, _config(tmp_path / "reference"))
    resumed = train(dm, MODEL, _config(killed_dir))

    assert resumed.resumed_from == str(killed_dir / LAST_CHECKPOINT)
    assert resumed.epochs_run == reference.epochs_run == 4
    assert [r["epoch"] for r in resumed.history] == [0, 1, 2, 3]
    for got, want in zip(resumed.history, reference.history, strict=True):
        assert got == pytest.approx(want, abs=RESUME_TOLERANCE)
    assert resumed.best_metrics == pytest.approx(reference.best_metrics, abs=RESUME_TOLERANCE)
    assert resumed.best_epoch == reference.best_epoch


def test_failed_write_leaves_the_previous_checkpoint_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    io = AtomicCheckpointIO()
    path = tmp_path / LAST_CHECKPOINT
    io.save_checkpoint({"epoch": 1, "weights": torch.ones(1000)}, path)
    real_save = torch.save

    def save_half_then_fail(obj: object, f: object) -> None:
        real_save(obj, f)
        f.truncate(100)  # a partial file on disk, as if the process died mid-write
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", save_half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"epoch": 2, "weights": torch.zeros(1000)}, path)
    monkeypatch.undo()

    assert os.listdir(tmp_path) == [LAST_CHECKPOINT]
    restored = io.load_checkpoint(path)
    assert restored["epoch"] == 1 and torch.equal(restored["weights"], torch.ones(1000))


def test_checkpoints_are_complete_after_training(
    parquet_splits: dict[str, Path], tmp_path: Path
) -> None:
    dm = TabularDataModule(
        parquet_splits["train"], parquet_splits["val"], features=FEATURES, batch_size=512
    )
    ckpt_dir = tmp_path / "run"
    config = TrainConfig(
        max_epochs=1, checkpoint_dir=str(ckpt_dir), batch_size=512, accelerator="cpu"
    )
    result = train(dm, ModelConfig(width=16, depth=1), config)
    assert sorted(os.listdir(ckpt_dir)) == ["epoch000.ckpt", LAST_CHECKPOINT]
    assert oct((ckpt_dir / LAST_CHECKPOINT).stat().st_mode & 0o777) == "0o644"
    assert result.epochs_run == 1 and result.precision == "32-true"
    assert set(result.best_metrics) == {"val/loss", "val/logloss", "val/auroc"}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to share")
def test_each_of_k_workers_takes_its_share_of_the_cores_it_may_run_on() -> None:
    # In a fresh interpreter: the threads it sets are the process's own.
    script = (
        "import os, torch; from ml.training import share_cores; "
        "cores = sorted(os.sched_getaffinity(0)); "
        "print(len(cores), share_cores(1), share_cores(2), share_cores(10 * len(cores)), "
        "torch.get_num_threads()); "
        "os.sched_setaffinity(0, cores[:1]); print(share_cores(1), torch.get_num_threads())"
    )
    child = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr[-2000:]
    first, pinned = child.stdout.split("\n")[:2]
    cores, alone, of_two, of_many, threads = map(int, first.split())
    assert (alone, of_two, of_many, threads) == (cores, cores // 2, 1, 1)
    # Pinned to one core (a cpuset, taskset), the process takes one thread, whatever the machine.
    assert pinned.split() == ["1", "1"]
