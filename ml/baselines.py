"""Scikit-learn baselines scored on exactly the splits and preprocessing the network sees."""

from __future__ import annotations

import numpy as np
from scipy import sparse
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import OneHotEncoder

from ml.data import TabularDataModule
from ml.metrics import binary_metrics

# HistGradientBoosting's native categorical support needs codes below its bin count.
HGB_MAX_CATEGORIES = 255


def _one_hot(cardinalities: list[int]) -> OneHotEncoder:
    # Fixed categories: every vocabulary index (OOV 0 included) gets a column, seen or not.
    return OneHotEncoder(categories=[np.arange(c) for c in cardinalities], handle_unknown="error")


def baseline_predictions(
    datamodule: TabularDataModule, split: str = "val", seed: int = 0
) -> dict[str, np.ndarray]:
    """Return each baseline's P(label=1) for the rows of ``split``, in the split's row order."""
    return {
        "logistic_regression": _logistic_probs(datamodule, split, seed),
        "hist_gradient_boosting": _boosting_probs(datamodule, split, seed),
    }


def evaluate_baselines(
    datamodule: TabularDataModule, split: str = "val", seed: int = 0
) -> dict[str, dict[str, float]]:
    """Return ``{baseline: {"auroc", "logloss", "brier", "ece"}}`` on ``split`` per baseline
    (losses weighted by the split's row weights, as the network's validation losses are)."""
    y, weights = _labels(datamodule, split), _weights(datamodule, split)
    predictions = baseline_predictions(datamodule, split, seed)
    return {name: binary_metrics(y, probs, weights=weights) for name, probs in predictions.items()}


def _logistic_probs(datamodule: TabularDataModule, split: str, seed: int) -> np.ndarray:
    (cat, num, y), (cat_eval, num_eval, _) = _arrays(datamodule, split)
    encoder = _one_hot(datamodule.cardinalities).fit(cat)
    x = sparse.hstack([encoder.transform(cat), sparse.csr_matrix(num)]).tocsr()
    x_eval = sparse.hstack([encoder.transform(cat_eval), sparse.csr_matrix(num_eval)]).tocsr()
    model = LogisticRegression(C=1.0, max_iter=2000, random_state=seed)
    model.fit(x, y, sample_weight=_weights(datamodule, "train"))
    return model.predict_proba(x_eval)[:, 1]


def _boosting_probs(datamodule: TabularDataModule, split: str, seed: int) -> np.ndarray:
    (cat, num, y), (cat_eval, num_eval, _) = _arrays(datamodule, split)
    # Larger vocabularies enter as ordinal codes, which trees can still split on.
    is_categorical = [c <= HGB_MAX_CATEGORIES for c in datamodule.cardinalities]
    mask = np.array(is_categorical + [False] * num.shape[1])
    model = HistGradientBoostingClassifier(categorical_features=mask, random_state=seed)
    model.fit(np.hstack([cat, num]), y, sample_weight=_weights(datamodule, "train"))
    return model.predict_proba(np.hstack([cat_eval, num_eval]))[:, 1]


def _labels(datamodule: TabularDataModule, split: str) -> np.ndarray:
    return datamodule.splits[split][2].numpy()


def _weights(datamodule: TabularDataModule, split: str) -> np.ndarray | None:
    """The split's row weights (None: the rows are unweighted)."""
    tensors = datamodule.splits[split]
    return tensors[3].numpy() if len(tensors) > 3 else None


def _arrays(datamodule: TabularDataModule, split: str) -> tuple[tuple[np.ndarray, ...], ...]:
    """Category codes, numeric inputs and labels of the training split and of `split`."""
    train = tuple(t.numpy() for t in datamodule.splits["train"][:3])
    evaluation = tuple(t.numpy() for t in datamodule.splits[split][:3])
    return train, evaluation
