"""Row weights: carried by the data module, refused when bad, and what the network learns from."""

from __future__ import annotations

from dataclasses import replace

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from ml.baselines import baseline_predictions, evaluate_baselines
from ml.config import ModelConfig, TrainConfig
from ml.data import TabularDataModule
from ml.inference import load_predictor
from ml.metrics import auroc, logloss
from ml.synthetic import FEATURES
from ml.training import build_module, train

WEIGHTED = replace(FEATURES, weight="w")


def weighted(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    return frame.assign(w=np.random.default_rng(seed).uniform(0.5, 4.0, len(frame)))


def test_batches_carry_the_weights_with_mean_one_in_training(splits) -> None:
    # Each row's distance is its position, and its weight a function of it: a batch's weights
    # must be its own rows' weights.
    n = len(splits["train"])
    train = splits["train"].assign(distance=np.arange(n), w=1.0 + np.arange(n) % 7)
    val = weighted(splits["val"], 2)
    dm = TabularDataModule(train, val, features=WEIGHTED, batch_size=512, seed=3)
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert all(len(batch) == 4 for batch in batches)
    j = dm.preprocessor.features.numeric.index("distance")
    mean, std = dm.preprocessor.means[j], dm.preprocessor.stds[j]
    rows = torch.cat([b[1][:, j] for b in batches]).double() * std + mean
    rows = rows.round().long().numpy()
    served = torch.cat([b[3] for b in batches]).numpy()
    assert sorted(rows) == list(range(n))
    np.testing.assert_allclose(served, (1.0 + rows % 7) / train.w.mean(), rtol=1e-5)
    assert served.mean() == pytest.approx(1.0, abs=1e-5)
    # Validation weights are as given: their metrics divide by their sum.
    val_weights = torch.cat([b[3] for b in dm.val_dataloader()])
    assert torch.allclose(val_weights, torch.from_numpy(val.w.to_numpy(np.float32)))
    # Without a weight column in the features, batches are as before.
    assert len(next(iter(TabularDataModule(train, val, features=FEATURES).train_dataloader()))) == 3


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (None, "weight column 'w' is not in the table"),
        ([1.0, np.nan], "has 1500 missing, negative or infinite values (of 3000 rows)"),
        ([1.0, -2.0], "has 1500 missing, negative or infinite values (of 3000 rows)"),
        ([np.inf, 1.0], "has 1500 missing, negative or infinite values (of 3000 rows)"),
        ([0.0, 0.0], "zero in every row"),
    ],
    ids=["missing-column", "nan", "negative", "infinite", "all-zero"],
)
def test_bad_weights_are_refused_naming_the_column(splits, values, message) -> None:
    train = splits["train"]
    if values is not None:
        train = train.assign(w=np.resize(np.asarray(values), len(train)))
    with pytest.raises(ValueError, match="weight column 'w'") as error:
        TabularDataModule(train, weighted(splits["val"], 2), features=WEIGHTED)
    assert message in str(error.value)


def test_the_training_loss_is_the_weighted_mean_and_ones_change_nothing(splits) -> None:
    dm = TabularDataModule(
        weighted(splits["train"], 1), weighted(splits["val"], 2), features=WEIGHTED
    )
    module = build_module(dm, ModelConfig(width=16, depth=1), TrainConfig(step="plain"))
    module.eval()  # no dropout: the same logits in every call
    categorical, numeric, y, w = (t[:300] for t in dm.splits["train"])
    per_row = torch.nn.functional.binary_cross_entropy_with_logits(
        module(categorical, numeric), y, reduction="none"
    )
    loss = module._loss((categorical, numeric, y, w))
    assert loss.item() == pytest.approx((per_row * w).mean().item(), rel=1e-6)
    # Weights of mean one on the rows the model fits best only: their loss, not every row's.
    # (The random weights above may, by chance, give about the plain mean.)
    best = (per_row < per_row.median()).float()
    on_best = module._loss((categorical, numeric, y, best * len(best) / best.sum()))
    assert on_best.item() == pytest.approx(per_row[best > 0].mean().item(), rel=1e-6)
    assert on_best.item() < per_row.mean().item() * 0.9
    ones = torch.ones_like(w)
    assert module._loss((categorical, numeric, y, ones)).item() == pytest.approx(
        module._loss((categorical, numeric, y)).item(), rel=1e-6
    )


def test_validation_losses_skip_rows_of_weight_zero(splits) -> None:
    train = weighted(splits["train"], 1)
    val = splits["val"].assign(w=np.tile([1.0, 0.0], len(splits["val"]) // 2))
    kept = val[val.w > 0]
    module = build_module(
        TabularDataModule(train, val, features=WEIGHTED),
        ModelConfig(width=16, depth=1),
        TrainConfig(step="plain"),
    )
    trainer = L.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )

    def val_logloss(frame: pd.DataFrame) -> float:
        dm = TabularDataModule(train, frame, features=WEIGHTED)
        return trainer.validate(module, datamodule=dm, verbose=False)[0]["val/logloss"]

    assert val_logloss(val) == pytest.approx(val_logloss(kept), rel=1e-5)
    assert val_logloss(val) != pytest.approx(val_logloss(val.assign(w=1.0)), rel=1e-4)


def test_weights_move_the_learned_rate_to_the_weighted_one(splits) -> None:
    """Labels that say nothing of the features: half the rows late 20% of the time and weighing
    9 (uniform picks standing for many), half late 80% and weighing 1 (targeted picks). The
    unweighted network and baselines learn the labelled rate (50%), the weighted ones the rate
    the weights stand for, (9 x 0.2 + 0.8) / 10 = 26%, on rows they never saw."""
    rng = np.random.default_rng(0)
    train = splits["train"].copy()
    uniform = np.arange(len(train)) % 2 == 0
    train["is_late"] = rng.random(len(train)) < np.where(uniform, 0.2, 0.8)
    train["w"] = np.where(uniform, 9.0, 1.0)
    val = splits["val"].assign(w=1.0)
    config = TrainConfig(max_epochs=8, early_stopping_patience=None, step="plain")
    means = {}
    for name, features in (("plain", FEATURES), ("weighted", WEIGHTED)):
        dm = TabularDataModule(train, val, features=features, batch_size=256)
        module = build_module(dm, ModelConfig(width=16, depth=1), config)
        L.Trainer(
            max_epochs=8,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        ).fit(module, datamodule=dm)
        categorical, numeric = dm.splits["val"][:2]
        means[name] = module.predict_proba(categorical, numeric).mean().item()
        for baseline, p in baseline_predictions(dm, "val").items():
            means[f"{name} {baseline}"] = float(p.mean())
    assert means["plain"] == pytest.approx(0.5, abs=0.07)
    assert means["weighted"] == pytest.approx(0.26, abs=0.07)
    # The baselines fit the same weights. Trees fit the noise too, and their spread scores
    # average nearer one half: only the direction is checked there.
    for baseline in ("logistic_regression", "hist_gradient_boosting"):
        assert means[f"plain {baseline}"] == pytest.approx(0.5, abs=0.07), baseline
        assert means[f"weighted {baseline}"] < means[f"plain {baseline}"] - 0.1, baseline
    assert means["weighted logistic_regression"] == pytest.approx(0.26, abs=0.07)


def test_baselines_report_losses_weighted_as_the_networks_are(splits) -> None:
    val = splits["val"].assign(w=np.tile([3.0, 1.0, 0.0, 0.5], len(splits["val"]) // 4))
    dm = TabularDataModule(weighted(splits["train"], 1), val, features=WEIGHTED)
    predictions = baseline_predictions(dm, "val")
    scores = evaluate_baselines(dm, "val")
    y = val.is_late.to_numpy()
    for name, p in predictions.items():
        assert scores[name]["logloss"] == pytest.approx(logloss(y, p, weights=val.w))
        assert scores[name]["logloss"] != pytest.approx(logloss(y, p))
        assert scores[name]["auroc"] == pytest.approx(auroc(y, p))


def test_a_parquet_split_without_its_weight_column_is_named(parquet_splits) -> None:
    with pytest.raises(ValueError, match=r"weight column 'w' is not in the table .*train\.parquet"):
        TabularDataModule(parquet_splits["train"], parquet_splits["val"], features=WEIGHTED)


def test_a_weighted_fit_checkpoints_a_predictor_that_reads_no_weights(splits, tmp_path) -> None:
    dm = TabularDataModule(
        weighted(splits["train"], 1), weighted(splits["val"], 2), features=WEIGHTED
    )
    config = TrainConfig(max_epochs=2, checkpoint_dir=str(tmp_path), early_stopping_patience=None)
    result = train(dm, ModelConfig(width=16, depth=1), config)
    assert result.epochs_run == 2
    # Scoring frames have no weight column: the predictor reads features only.
    probs = load_predictor(result.best_checkpoint).predict_proba(splits["test"])
    assert probs.shape == (len(splits["test"]),) and np.isfinite(probs).all()
