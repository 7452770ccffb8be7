"""The graphed training step: same results as Lightning's plain step, a clean, logged fallback.

On CPU (this machine, CI) the graphed step's manual optimisation runs eagerly and must match
the plain step exactly; a capture that fails falls back to the same eager step. The CUDA tests
compare replayed graphs with eager steps on a GPU and only run where one is present.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ml.graphed
from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.graphed import GraphedStep
from ml.synthetic import FEATURES
from ml.training import plain_step_reason, train

# Dropout on, clipping on (the default 1.0) and a short last batch (3000 rows, batch 256).
MODEL = ModelConfig(arch="resmlp", width=32, depth=2, dropout=0.2)
# On the CPU, also where a GPU is present; the CUDA tests below ask for the GPU.
CONFIG = TrainConfig(
    max_epochs=3, batch_size=256, lr=3e-3, early_stopping_patience=None, accelerator="cpu"
)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def datamodule(splits: dict[str, pd.DataFrame]) -> TabularDataModule:
    return TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=256)


def test_graphed_step_on_cpu_runs_eagerly_with_the_plain_steps_results(
    datamodule: TabularDataModule, caplog: pytest.LogCaptureFixture
) -> None:
    # On the CPU (CONFIG) even where a GPU is present: the eager fallback is what this checks.
    plain = train(datamodule, MODEL, replace(CONFIG, step="plain"))
    with caplog.at_level(logging.WARNING, logger="ml.graphed"):
        graphed = train(datamodule, MODEL, replace(CONFIG, step="graphed"))

    assert graphed.optimizer_steps == plain.optimizer_steps == 3 * 12  # ceil(3000 / 256) a epoch
    assert graphed.history == plain.history
    eager = [r.getMessage() for r in caplog.records if r.name == "ml.graphed"]
    assert eager == [
        "training step runs eagerly: CUDA graphs need the batch and the parameters on a CUDA device"
    ]


def test_auto_is_plain_without_a_single_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert plain_step_reason(TrainConfig()) == "no CUDA device"
    assert plain_step_reason(TrainConfig(step="graphed")) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert plain_step_reason(TrainConfig()) is None
    assert plain_step_reason(TrainConfig(accelerator="cpu")) == "no CUDA device"
    assert plain_step_reason(TrainConfig(devices=2)) == "strategy ddp"
    assert plain_step_reason(TrainConfig(accumulate_grad_batches=2)) == "gradient accumulation"
    assert plain_step_reason(TrainConfig(precision="16-mixed")) == "fp16 loss scaling"
    assert plain_step_reason(TrainConfig(step="plain")) == (
        "the training config asks for the plain step"
    )
    # Asked for explicitly, a graphed step that cannot be right is refused, not bent.
    with pytest.raises(ValueError, match="cannot train with gradient accumulation"):
        plain_step_reason(TrainConfig(step="graphed", accumulate_grad_batches=4))


def _net(dropout: bool = False) -> nn.Module:
    torch.manual_seed(0)
    middle = [nn.Dropout(0.3)] if dropout else []
    return nn.Sequential(nn.Linear(4, 8), nn.GELU(), *middle, nn.Linear(8, 1))


def _batch(rows: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(rows, 4, generator=gen), torch.randint(0, 2, (rows,), generator=gen)]


def _loss_of(net: nn.Module) -> Callable[[list[torch.Tensor]], torch.Tensor]:
    def loss(batch: list[torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.binary_cross_entropy_with_logits(net(x).squeeze(-1), y.float())

    return loss


def test_eager_step_leaves_the_clipped_gradients_of_the_batch() -> None:
    net, reference = _net(), _net()
    batch = _batch(64, seed=1)
    step = GraphedStep(_loss_of(net), list(net.parameters()), clip=0.01)

    loss = step(batch)

    expected = _loss_of(reference)(batch)
    expected.backward()
    nn.utils.clip_grad_norm_(reference.parameters(), 0.01)
    assert loss.item() == pytest.approx(expected.item())
    assert not loss.requires_grad
    for got, want in zip(net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)
    total = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in net.parameters()]))
    assert total.item() == pytest.approx(0.01, rel=1e-4)
    # A second step's gradients are its batch's alone, not accumulated.
    step(_batch(64, seed=2))
    reference.zero_grad()
    _loss_of(reference)(_batch(64, seed=2)).backward()
    nn.utils.clip_grad_norm_(reference.parameters(), 0.01)
    for got, want in zip(net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)


def test_a_failed_capture_is_logged_once_and_the_step_goes_on_eagerly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    net, reference = _net(), _net()
    step = GraphedStep(_loss_of(net), list(net.parameters()), clip=1.0)
    # As on a CUDA device after its warm-up: the next step tries a capture, which fails.
    monkeypatch.setattr(ml.graphed, "WARMUP_STEPS", 0)
    monkeypatch.setattr(GraphedStep, "_on_cuda", lambda self, batch: True)

    def no_graph() -> None:
        # Fails on every machine: with CUDA present, capturing CPU work would succeed, empty.
        raise RuntimeError("CUDA graphs are not supported here")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", no_graph)

    with caplog.at_level(logging.WARNING, logger="ml.graphed"):
        losses = [step(_batch(32, seed=s)).item() for s in range(3)]

    assert len(caplog.records) == 1
    assert caplog.records[0].getMessage().startswith("training step runs eagerly: capture failed (")
    assert (step.replays, step.eager_steps, step.graphs) == (0, 3, {})
    want = [_loss_of(reference)(_batch(32, seed=s)).item() for s in range(3)]
    assert losses == pytest.approx(want)
    assert all(p.grad is not None for p in net.parameters())


def weighted_datamodule(splits: dict[str, pd.DataFrame]) -> TabularDataModule:
    """Rows weighing 0.5 to 4: the step's inputs include their weights."""
    frames = {
        name: splits[name].assign(w=np.random.default_rng(i).uniform(0.5, 4, len(splits[name])))
        for i, name in enumerate(("train", "val"))
    }
    features = replace(FEATURES, weight="w")
    return TabularDataModule(frames["train"], frames["val"], features=features, batch_size=256)


def test_weighted_rows_give_the_plain_steps_results_on_cpu(
    splits: dict[str, pd.DataFrame],
) -> None:
    dm = weighted_datamodule(splits)
    plain = train(dm, MODEL, replace(CONFIG, step="plain"))
    graphed = train(dm, MODEL, replace(CONFIG, step="graphed"))
    assert graphed.history == plain.history
    unweighted = train(
        TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=256),
        MODEL,
        CONFIG,
    )
    assert plain.history != unweighted.history


@cuda
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_replayed_graphs_match_eager_steps_on_cuda(
    splits: dict[str, pd.DataFrame], weighted: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # No dropout: eager and replayed steps draw their random numbers differently.
    model = replace(MODEL, dropout=0.0)
    config = replace(CONFIG, accelerator="gpu", precision="32-true", max_epochs=5)
    dm = (
        weighted_datamodule(splits)
        if weighted
        else TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=256)
    )
    plain = train(dm, model, replace(config, step="plain"))
    with caplog.at_level(logging.INFO, logger="ml.graphed"):
        graphed = train(dm, model, replace(config, step="graphed"))
    # Replayed, not the eager fallback (which would match the plain step too).
    messages = [r.getMessage() for r in caplog.records if r.name == "ml.graphed"]
    assert not [m for m in messages if "runs eagerly" in m], messages
    assert any("captured as a CUDA graph" in m for m in messages), messages
    assert graphed.optimizer_steps == plain.optimizer_steps
    for got, want in zip(graphed.history, plain.history, strict=True):
        assert got == pytest.approx(want, abs=2e-3)


@cuda
def test_a_step_replays_its_graph_after_warm_up_on_cuda() -> None:
    net = _net().cuda()
    step = GraphedStep(_loss_of(net), list(net.parameters()), clip=1.0)
    reference = _net().cuda()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    # Full batches of 32 and a short one of 7, as an epoch of 103 rows would give.
    shapes = [32, 32, 32, 7] * 5
    for i, rows in enumerate(shapes):
        batch = [t.cuda() for t in _batch(rows, seed=i)]
        loss = step(batch).clone()
        optimizer.step()
        ref_optimizer.zero_grad()
        want = _loss_of(reference)(batch)
        want.backward()
        nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        ref_optimizer.step()
        torch.testing.assert_close(loss, want.detach(), rtol=1e-4, atol=1e-5)
    assert len(step.graphs) == 2
    assert step.replays == len(shapes) - step.eager_steps
    assert step.eager_steps == 2 * ml.graphed.WARMUP_STEPS


@cuda
def test_a_collection_during_a_capture_leaves_it_intact() -> None:
    # A tuning process fits model after model: an earlier fit's step, graphs and all, becomes
    # garbage in a reference cycle. Collecting it frees its graphs, which CUDA forbids while a
    # stream captures.
    batch = [t.cuda() for t in _batch(32, seed=0)]
    old_net = _net().cuda()
    old = GraphedStep(_loss_of(old_net), list(old_net.parameters()), clip=1.0)
    for _ in range(ml.graphed.WARMUP_STEPS + 1):
        old(batch)
    assert old.graphs
    holder = [old]
    del old, old_net

    net = _net().cuda()
    loss_of = _loss_of(net)

    def loss(b: list[torch.Tensor]) -> torch.Tensor:
        if torch.cuda.is_current_stream_capturing() and holder:
            # Mid-capture, the earlier step becomes garbage held only by a new cycle, which
            # the youngest generation's next collection frees.
            cycle: list[object] = [holder.pop()]
            cycle.append(cycle)
            del cycle
            _ = [[] for _ in range(10)]  # allocations: such a collection would run here
        return loss_of(b)

    step = GraphedStep(loss, list(net.parameters()), clip=1.0)
    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)  # every allocation may start a full collection
    try:
        for _ in range(ml.graphed.WARMUP_STEPS + 2):
            step(batch)
    finally:
        gc.set_threshold(*thresholds)
    assert step.eager_reason is None and len(step.graphs) == 1 and step.replays == 2
    assert not holder


@cuda
def test_a_failed_capture_on_cuda_leaves_random_ops_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    net = _net(dropout=True).cuda()
    loss_of = _loss_of(net)

    def loss(b: list[torch.Tensor]) -> torch.Tensor:
        if torch.cuda.is_current_stream_capturing():
            torch.cuda.synchronize()  # forbidden while capturing: the capture fails
        return loss_of(b)

    step = GraphedStep(loss, list(net.parameters()), clip=1.0)
    shapes = [32] * (ml.graphed.WARMUP_STEPS + 3)
    with caplog.at_level(logging.WARNING, logger="ml.graphed"):
        losses = [step([t.cuda() for t in _batch(n, seed=i)]) for i, n in enumerate(shapes)]
    assert step.eager_reason is not None and step.eager_reason.startswith("capture failed (")
    assert (step.replays, step.graphs, step.eager_steps) == (0, {}, len(shapes))
    assert all(torch.isfinite(x) for x in losses)
    assert len(caplog.records) == 1
    # The eager steps ran where the caller's work runs, not on the failed capture's stream.
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    # Dropout, and any random op, still runs outside a capture.
    assert torch.nn.functional.dropout(torch.ones(1000, device="cuda"), 0.5).sum() > 0
