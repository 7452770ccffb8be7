"""Two CPU processes under DDP split each epoch between them and agree on the metrics."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import json, sys
from dataclasses import asdict
from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES, make_table
from ml.training import train

if __name__ == "__main__":
    out, ckpt_dir, devices = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dm = TabularDataModule(make_table(2000, 1), make_table(500, 2, True), features=FEATURES,
                           batch_size=256)
    config = TrainConfig(max_epochs=2, accelerator="cpu", devices=devices, checkpoint_dir=ckpt_dir,
                         early_stopping_patience=None)
    result = train(dm, ModelConfig(width=16, depth=1), config)
    rank = dm.trainer.global_rank
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump(asdict(result) | {"world_size": dm.trainer.world_size}, f)
"""


@pytest.mark.slow
def test_ddp_ranks_take_disjoint_shards(tmp_path: Path) -> None:
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    }
    out = tmp_path / "result"
    cmd = [sys.executable, str(script), str(out), str(tmp_path / "ckpt"), "2"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in (0, 1)]
    assert all(r["world_size"] == 2 and r["epochs_run"] == 2 for r in ranks)
    # 2000 rows over 2 ranks in batches of 256: 4 steps per epoch instead of 8.
    assert [r["optimizer_steps"] for r in ranks] == [8, 8]
    assert ranks[0]["best_metrics"] == pytest.approx(ranks[1]["best_metrics"], abs=1e-6)
    assert Path(ranks[0]["best_checkpoint"]).exists()
