"""Model shapes, a fast_dev_run smoke test and predictor reconstruction from a checkpoint."""

from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.inference import load_predictor
from ml.models import TabularNet
from ml.training import build_module, train


@pytest.mark.parametrize("arch", ["mlp", "resmlp"])
def test_tabular_net_returns_one_logit_per_row(arch: str) -> None:
    net = TabularNet([5, 30], n_numeric=6, config=ModelConfig(arch=arch, width=16, depth=2))
    logits = net(torch.randint(0, 5, (8, 2)), torch.randn(8, 6))
    assert logits.shape == (8,)
    assert net.embedding.dims == [ModelConfig().embedding_dim(5), 11]
    assert ModelConfig().embedding_dim(30) == 11


def test_one_table_embeds_each_column_as_its_own_embedding_would() -> None:
    cards, config = [3, 40, 7], ModelConfig()
    torch.manual_seed(0)
    net = TabularNet(cards, n_numeric=2, config=config)
    torch.manual_seed(0)
    # The former layout: one nn.Embedding per column, created first, from the same seed.
    columns = [torch.nn.Embedding(card, config.embedding_dim(card)) for card in cards]
    codes = torch.stack([torch.randint(0, card, (64,)) for card in cards], dim=1)

    got = net.embedding(codes)

    want = torch.cat([emb(codes[:, j]) for j, emb in enumerate(columns)], dim=1)
    assert torch.equal(got, want)  # the same draws and the same layout, bit for bit
    # Each column's gradient lands in its own rows and its own first dims only.
    got.sum().backward()
    table, (d0, d1, d2) = net.embedding.weight.grad, net.embedding.dims
    assert (table[:3, :d0] != 0).all() and (table[:3, d0:] == 0).all()
    assert (table[3:43, d1:] == 0).all() and (table[43:, :d2] != 0).all()
    assert (table[43:, d2:] == 0).all()


def test_a_checkpoint_with_one_table_per_column_loads_into_the_single_table() -> None:
    cards = [4, 25, 9]
    net = TabularNet(cards, n_numeric=3, config=ModelConfig(width=8, depth=1))
    state = net.state_dict()
    table, dims = state.pop("embedding.weight"), net.embedding.dims
    starts = [0, 4, 29]
    for j, (start, card, dim) in enumerate(zip(starts, cards, dims, strict=True)):
        state[f"embeddings.{j}.weight"] = table[start : start + card, :dim].clone()
    codes, numeric = torch.stack([torch.randint(0, c, (16,)) for c in cards], 1), torch.randn(16, 3)

    fresh = TabularNet(cards, n_numeric=3, config=ModelConfig(width=8, depth=1))
    fresh.load_state_dict(state)

    assert torch.equal(fresh.eval()(codes, numeric), net.eval()(codes, numeric))


def test_fast_dev_run_logs_the_metrics(splits: dict[str, pd.DataFrame]) -> None:
    dm = TabularDataModule(splits["train"], splits["val"], batch_size=256)
    module = build_module(dm, ModelConfig(width=32), TrainConfig())
    trainer = L.Trainer(fast_dev_run=True, logger=False, enable_progress_bar=False)
    trainer.fit(module, datamodule=dm)
    for name in ("train/loss", "val/loss", "val/logloss", "val/auroc"):
        assert torch.isfinite(trainer.callback_metrics[name]), name


def test_checkpoint_alone_rebuilds_the_predictor(
    splits: dict[str, pd.DataFrame], tmp_path: Path
) -> None:
    dm = TabularDataModule(splits["train"], splits["val"], batch_size=256)
    config = TrainConfig(max_epochs=2, checkpoint_dir=str(tmp_path), early_stopping_patience=None)
    result = train(dm, ModelConfig(width=32, depth=1), config)
    assert result.best_checkpoint is not None and result.device == "cpu"
    predictor = load_predictor(result.best_checkpoint)
    probs = predictor.predict_proba(splits["val"])
    assert probs.shape == (1000,) and ((probs > 0) & (probs < 1)).all()
    # The checkpoint's predictions reproduce the validation logloss that selected it.
    y = splits["val"]["is_late"].to_numpy()
    eps = 1e-7
    p = np.clip(probs, eps, 1 - eps)
    logloss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    assert logloss == pytest.approx(result.best_metrics["val/logloss"], abs=1e-5)
