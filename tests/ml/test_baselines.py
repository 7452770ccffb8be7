"""Baselines are scored on the datamodule's own split and preprocessing."""

import pandas as pd
import pytest

from ml.baselines import evaluate_baselines
from ml.data import TabularDataModule
from ml.metrics import auroc


def test_baselines_score_the_same_validation_split(splits: dict[str, pd.DataFrame]) -> None:
    dm = TabularDataModule(splits["train"], splits["val"])
    results = evaluate_baselines(dm)
    assert set(results) == {"logistic_regression", "hist_gradient_boosting"}
    for metrics in results.values():
        # The fixture's signal is learnable: both models beat chance and a constant predictor.
        assert 0.6 < metrics["auroc"] <= 1.0
        assert 0.0 < metrics["logloss"] < 0.69
    y = dm.splits["val"][2].numpy()
    assert auroc(y, y) == 1.0 and len(y) == len(splits["val"])


def test_unknown_split_is_an_error(splits: dict[str, pd.DataFrame]) -> None:
    dm = TabularDataModule(splits["train"], splits["val"])
    with pytest.raises(KeyError):
        evaluate_baselines(dm, split="test")
