"""Baselines are scored on the datamodule's own split and preprocessing."""

import pickle

import pandas as pd
import pytest

from ml import baselines
from ml.baselines import baseline_predictions, evaluate_baselines
from ml.data import TabularDataModule
from ml.metrics import auroc, binary_metrics
from ml.synthetic import FEATURES


def test_baselines_score_the_same_validation_split(
    splits: dict[str, pd.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    dm = TabularDataModule(splits["train"], splits["val"], features=FEATURES)
    predictions = baseline_predictions(dm)
    assert set(predictions) == {"logistic_regression", "hist_gradient_boosting"}
    # The baselines are fitted once: evaluate_baselines is checked to score exactly these.
    monkeypatch.setattr(baselines, "baseline_predictions", lambda *args: predictions)
    results = evaluate_baselines(dm)
    y = dm.splits["val"][2].numpy()
    assert set(results) == set(predictions)
    for name, metrics in results.items():
        assert predictions[name].shape == (len(splits["val"]),)
        assert metrics == binary_metrics(y, predictions[name])
        # The fixture's signal is learnable: both models beat chance and a constant predictor.
        assert 0.6 < metrics["auroc"] <= 1.0
        assert 0.0 < metrics["logloss"] < 0.69
        assert 0.0 < metrics["brier"] < 0.25 and 0.0 <= metrics["ece"] < 0.2
    assert auroc(y, y) == 1.0 and len(y) == len(splits["val"])


def test_unknown_split_is_an_error(splits: dict[str, pd.DataFrame]) -> None:
    dm = TabularDataModule(splits["train"], splits["val"], features=FEATURES)
    with pytest.raises(KeyError):
        evaluate_baselines(dm, split="test")


def test_fitted_baselines_score_frames_after_a_pickle_round_trip(
    splits: dict[str, pd.DataFrame],
) -> None:
    """What the challenger's run keeps scores any frame as a fit on the same split does."""
    dm = TabularDataModule(splits["train"], splits["val"], features=FEATURES)
    fitted = baselines.fit_baselines(dm, seed=0)
    kept = baselines.FittedBaselines.loads(fitted.dumps())
    expected = baseline_predictions(dm, "val")
    for scores in (kept.predict_frame(splits["val"]), kept.predict_split(dm, "val")):
        assert set(scores) == set(expected)
        for name, probs in expected.items():
            assert (scores[name] == probs).all(), name
    assert evaluate_baselines(dm, "val", fitted=kept) == evaluate_baselines(dm, "val")


def test_fitted_baselines_refuse_data_preprocessed_otherwise(
    splits: dict[str, pd.DataFrame],
) -> None:
    fitted = baselines.fit_baselines(
        TabularDataModule(splits["train"], splits["val"], features=FEATURES)
    )
    other = TabularDataModule(splits["val"], splits["train"], features=FEATURES)
    with pytest.raises(ValueError, match="another preprocessing"):
        fitted.predict_split(other, "val")
    with pytest.raises(TypeError, match="FittedBaselines, got dict"):
        baselines.FittedBaselines.loads(pickle.dumps({"not": "baselines"}))
