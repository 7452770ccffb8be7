"""Model shapes, a fast_dev_run smoke test and predictor reconstruction from a checkpoint."""

from dataclasses import replace
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.inference import load_predictor
from ml.models import Dropout, TabularClassifier, TabularEnsemble, TabularNet
from ml.synthetic import FEATURES
from ml.training import build_module, train


@pytest.mark.parametrize("arch", ["mlp", "resmlp"])
def test_tabular_net_returns_one_logit_per_row(arch: str) -> None:
    net = TabularNet([5, 30], n_numeric=6, config=ModelConfig(arch=arch, width=16, depth=2))
    logits = net(torch.randint(0, 5, (8, 2)), torch.randn(8, 6))
    assert logits.shape == (8,)
    assert net.embedding.dims == [ModelConfig().embedding_dim(5), 11]
    assert ModelConfig().embedding_dim(30) == 11


@pytest.mark.parametrize("arch", ["mlp", "resmlp"])
def test_every_dropout_of_the_network_is_the_cpu_one(arch: str) -> None:
    net = TabularNet([5], n_numeric=3, config=ModelConfig(arch=arch, width=8, depth=3))
    dropouts = [m for m in net.modules() if isinstance(m, torch.nn.Dropout)]
    assert len(dropouts) == 3 and all(type(m) is Dropout for m in dropouts)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_cpu_dropout_keeps_each_element_with_probability_one_minus_p_scaled(p: float) -> None:
    x = torch.randn(512, 256, requires_grad=True)
    torch.manual_seed(0)
    out = Dropout(p)(x)
    kept = out != 0
    share = kept.float().mean().item()
    # 131,072 elements: the kept share's standard error is below 0.0014.
    assert abs(share - (1 - p)) < 0.006
    assert torch.allclose(out[kept], x[kept] / (1 - p))
    out.sum().backward()
    assert x.grad is not None
    assert torch.allclose(x.grad, kept.float() / (1 - p))
    # Seeded, the masks repeat; a second draw is another mask.
    torch.manual_seed(0)
    assert torch.equal(Dropout(p)(x.detach()), out.detach())
    assert not torch.equal(Dropout(p)(x.detach()), out.detach())


def test_cpu_dropout_is_the_identity_in_evaluation_and_at_zero() -> None:
    x = torch.randn(64, 16)
    assert torch.equal(Dropout(0.3).eval()(x), x)
    # bf16 (rounded uniform draws would drop too often) takes torch's own path.
    torch.manual_seed(0)
    ours = Dropout(0.3)(x.bfloat16())
    torch.manual_seed(0)
    assert torch.equal(ours, torch.nn.functional.dropout(x.bfloat16(), 0.3))
    assert torch.equal(Dropout(0.0)(x), x)
    assert torch.equal(Dropout(1.0)(x), torch.zeros_like(x))


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
    dm = TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=256)
    module = build_module(dm, ModelConfig(width=32), TrainConfig())
    trainer = L.Trainer(fast_dev_run=True, logger=False, enable_progress_bar=False)
    trainer.fit(module, datamodule=dm)
    for name in ("train/loss", "val/loss", "val/logloss", "val/auroc"):
        assert torch.isfinite(trainer.callback_metrics[name]), name


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_the_optimizer_is_fused_unless_lightning_clips_under_mixed_precision(
    splits: dict[str, pd.DataFrame], precision: str
) -> None:
    # Lightning's mixed-precision plugin refuses to clip a fused optimizer's gradients.
    dm = TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=256)
    # A CPU module for the CPU trainer (on a CUDA machine, "auto" would build the graphed one).
    module = build_module(dm, ModelConfig(width=32), TrainConfig(accelerator="cpu"))
    trainer = L.Trainer(
        fast_dev_run=True,
        logger=False,
        enable_progress_bar=False,
        accelerator="cpu",
        precision=precision,
        gradient_clip_val=1.0,
    )
    trainer.fit(module, datamodule=dm)
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    fused = trainer.optimizers[0].defaults["fused"]
    assert fused is (precision == "32-true")


def test_checkpoint_alone_rebuilds_the_predictor(
    splits: dict[str, pd.DataFrame], tmp_path: Path
) -> None:
    dm = TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=256)
    config = TrainConfig(
        max_epochs=2,
        checkpoint_dir=str(tmp_path),
        early_stopping_patience=None,
        accelerator="cpu",
    )
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


def test_an_ensemble_predicts_its_members_mean_probability() -> None:
    torch.manual_seed(0)
    config = ModelConfig(width=16, depth=1, members=3)
    module = TabularClassifier([5, 7], 4, config).eval()
    categorical = torch.randint(0, 5, (64, 2))
    numeric = torch.randn(64, 4)
    members = module.net.members
    # Each member starts from its own draw, the first from the single network's.
    torch.manual_seed(0)
    single = TabularNet([5, 7], 4, replace(config, members=1))
    assert torch.equal(single.head.weight, members[0].head.weight)
    assert not torch.equal(members[0].head.weight, members[1].head.weight)
    each = torch.stack([torch.sigmoid(m(categorical, numeric)) for m in members], dim=1)
    proba = module.predict_proba(categorical, numeric)
    assert torch.allclose(proba, each.mean(1), atol=1e-6)
    # Where the members are sure (logits of +-40), the ensemble's logit stays finite and exact.
    sure = torch.tensor([[40.0, 40.0, -40.0], [-40.0, -40.0, -40.0]])
    module.net.member_logits = lambda *_: sure
    logit = module(categorical[:2], numeric[:2])
    assert torch.isfinite(logit).all()
    assert torch.allclose(logit, torch.tensor([float(np.log(2.0)), -40.0]), atol=1e-5)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("own_rows", [False, True])
def test_each_member_of_an_ensemble_gets_the_gradient_it_would_alone(
    splits: dict[str, pd.DataFrame], weighted: bool, own_rows: bool
) -> None:
    """On a shared batch, or (own_rows) on a batch stacked one per member, as the training
    loader gives an ensemble."""
    dm = TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=256)
    dm.setup("fit")
    batches = [list(b)[:3] for b in dm.train_dataloader()][:2]
    if weighted:
        for batch in batches:
            batch.append(torch.rand(batch[2].shape[0]) * 2)
    if not own_rows:
        batches = [batches[0], batches[0]]
    given = [torch.stack(pair) for pair in zip(*batches, strict=True)] if own_rows else batches[0]
    torch.manual_seed(0)
    ensemble = build_module(
        dm, ModelConfig(width=16, depth=1, members=2, dropout=0.0), TrainConfig(accelerator="cpu")
    )
    assert ensemble.row_orders == 2
    ensemble._loss(given).backward()
    for member, batch in zip(ensemble.net.members, batches, strict=True):
        alone = TabularClassifier(
            dm.preprocessor.cardinalities,
            dm.preprocessor.n_numeric_inputs,
            ModelConfig(width=16, depth=1, dropout=0.0),
        )
        alone.net.load_state_dict(member.state_dict())
        alone._loss(batch).backward()
        for mine, theirs in zip(member.parameters(), alone.net.parameters(), strict=True):
            assert torch.allclose(mine.grad, theirs.grad, atol=1e-6)


def test_batches_stacked_one_per_member_must_fit_the_model(
    splits: dict[str, pd.DataFrame],
) -> None:
    dm = TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=256)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    stacked = [torch.stack([t, t]) for t in batch]
    single = build_module(dm, ModelConfig(width=16, depth=1), TrainConfig(accelerator="cpu"))
    assert single.row_orders == 1
    with pytest.raises(ValueError, match="stacked one per member, but the model is one network"):
        single._loss(stacked)
    ensemble = build_module(
        dm, ModelConfig(width=16, depth=1, members=2), TrainConfig(accelerator="cpu")
    )
    with pytest.raises(ValueError, match="3 stacked batches for 2 members"):
        ensemble._loss([torch.cat([t, t[:1]]) for t in stacked])


def test_an_ensemble_checkpoint_alone_rebuilds_the_ensemble(
    splits: dict[str, pd.DataFrame], tmp_path: Path
) -> None:
    dm = TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=256)
    config = TrainConfig(
        max_epochs=2, checkpoint_dir=str(tmp_path), early_stopping_patience=None, accelerator="cpu"
    )
    result = train(dm, ModelConfig(width=16, depth=1, members=3), config)
    predictor = load_predictor(result.best_checkpoint)
    assert isinstance(predictor.module.net, TabularEnsemble)
    assert len(predictor.module.net.members) == 3
    # Its validation log loss, as recorded in training, is the averaged probability's.
    y = splits["val"]["is_late"].to_numpy()
    p = np.clip(predictor.predict_proba(splits["val"]), 1e-7, 1 - 1e-7)
    logloss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    assert logloss == pytest.approx(result.best_metrics["val/logloss"], abs=1e-5)


def test_an_ensembles_train_loss_is_one_members(splits: dict[str, pd.DataFrame]) -> None:
    dm = TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=256)
    module = build_module(
        dm, ModelConfig(width=16, depth=1, members=3), TrainConfig(accelerator="cpu")
    )
    with torch.no_grad():
        for member in module.net.members:  # every member says 0.5: a loss of log 2 each
            member.head.weight.zero_()
            member.head.bias.zero_()
    trainer = L.Trainer(
        fast_dev_run=True, logger=False, enable_progress_bar=False, accelerator="cpu"
    )
    trainer.fit(module, datamodule=dm)
    assert float(trainer.callback_metrics["train/loss"]) == pytest.approx(np.log(2), abs=1e-5)


def test_one_member_is_the_single_network() -> None:
    module = TabularClassifier([5], 2, ModelConfig(width=8, depth=1))
    assert isinstance(module.net, TabularNet) and module.members == 1
    # Its saved configuration is what code from before ensembles wrote (and can load).
    assert "members" not in module.hparams["model"]
    assert TabularClassifier(**module.hparams).members == 1
    assert TabularClassifier([5], 2, ModelConfig(members=2)).hparams["model"]["members"] == 2
    with pytest.raises(ValueError, match="members must be at least 1"):
        TabularClassifier([5], 2, ModelConfig(members=0))
