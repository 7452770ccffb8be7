"""Scikit-learn baselines scored on exactly the splits and preprocessing the network sees.

For a binary label each baseline predicts P(label = 1), shape (n,); for a label of K classes
(``FeatureConfig.classes``), an (n, K) matrix whose column k is ``classes[k]``. A class absent
from the training rows gets probability 0 (the fitted model's classes already sum to 1), so the
columns keep that order whatever the training set held.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse
from sklearn.base import ClassifierMixin
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import OneHotEncoder

from ml.data import TabularDataModule
from ml.metrics import binary_metrics, multiclass_metrics
from ml.preprocessing import Preprocessor

# HistGradientBoosting's native categorical support needs codes below its bin count.
HGB_MAX_CATEGORIES = 255


def _one_hot(cardinalities: list[int]) -> OneHotEncoder:
    # Fixed categories: every vocabulary index (OOV 0 included) gets a column, seen or not.
    return OneHotEncoder(categories=[np.arange(c) for c in cardinalities], handle_unknown="error")


@dataclass(frozen=True)
class FittedBaselines:
    """The baselines fitted on a data module's training split, with that split's preprocessing:
    they score any frame of the same features, in this process or after a pickle round trip
    (the challenger's training run keeps them for its evaluation)."""

    preprocessor: Preprocessor
    encoder: OneHotEncoder
    logistic_regression: LogisticRegression
    hist_gradient_boosting: HistGradientBoostingClassifier

    def predict_arrays(self, categorical: np.ndarray, numeric: np.ndarray) -> dict[str, np.ndarray]:
        """Each baseline's P(label=1) (multi-class: (n, K) probabilities) for rows already
        preprocessed by ``self.preprocessor``."""
        one_hot = self.encoder.transform(categorical)
        x = sparse.hstack([one_hot, sparse.csr_matrix(numeric)]).tocsr()
        k = self.preprocessor.features.n_outputs
        if k > 1:
            trees = np.hstack([categorical, numeric])
            return {
                "logistic_regression": _class_columns(self.logistic_regression, x, k),
                "hist_gradient_boosting": _class_columns(self.hist_gradient_boosting, trees, k),
            }
        return {
            "logistic_regression": self.logistic_regression.predict_proba(x)[:, 1],
            "hist_gradient_boosting": self.hist_gradient_boosting.predict_proba(
                np.hstack([categorical, numeric])
            )[:, 1],
        }

    def predict_frame(self, frame: pd.DataFrame) -> dict[str, np.ndarray]:
        """Each baseline's P(label=1) for the rows of a feature frame, in its row order."""
        return self.predict_arrays(*self.preprocessor.transform(frame))

    def predict_split(self, datamodule: TabularDataModule, split: str) -> dict[str, np.ndarray]:
        """Each baseline's P(label=1) for the rows of a split of ``datamodule``, which must
        preprocess as the training split these were fitted on did."""
        if datamodule.preprocessor != self.preprocessor:
            raise ValueError("the baselines were fitted with another preprocessing than this data")
        categorical, numeric = (t.numpy() for t in datamodule.splits[split][:2])
        return self.predict_arrays(categorical, numeric)

    def dumps(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def loads(data: bytes) -> FittedBaselines:
        """What ``dumps`` wrote (a pickle: load only what this project's own runs stored)."""
        loaded = pickle.loads(data)
        if not isinstance(loaded, FittedBaselines):
            raise TypeError(f"expected pickled FittedBaselines, got {type(loaded).__name__}")
        return loaded


def fit_baselines(datamodule: TabularDataModule, seed: int = 0) -> FittedBaselines:
    """Fit every baseline on the training split of ``datamodule`` (with its row weights)."""
    cat, num, y = (t.numpy() for t in datamodule.splits["train"][:3])
    weights = _weights(datamodule, "train")
    encoder = _one_hot(datamodule.cardinalities).fit(cat)
    x = sparse.hstack([encoder.transform(cat), sparse.csr_matrix(num)]).tocsr()
    logistic = LogisticRegression(C=1.0, max_iter=2000, random_state=seed)
    logistic.fit(x, y, sample_weight=weights)
    # Larger vocabularies enter as ordinal codes, which trees can still split on.
    is_categorical = [c <= HGB_MAX_CATEGORIES for c in datamodule.cardinalities]
    mask = np.array(is_categorical + [False] * num.shape[1])
    boosting = HistGradientBoostingClassifier(categorical_features=mask, random_state=seed)
    boosting.fit(np.hstack([cat, num]), y, sample_weight=weights)
    return FittedBaselines(datamodule.preprocessor, encoder, logistic, boosting)


def baseline_predictions(
    datamodule: TabularDataModule,
    split: str = "val",
    seed: int = 0,
    fitted: FittedBaselines | None = None,
) -> dict[str, np.ndarray]:
    """Return each baseline's P(label=1) ((n, K) for K classes) for the rows of ``split``, in
    the split's row order (``fitted``: baselines already fitted on this data module's training
    split)."""
    if split not in datamodule.splits:
        raise KeyError(split)
    fitted = fitted if fitted is not None else fit_baselines(datamodule, seed)
    return fitted.predict_split(datamodule, split)


def evaluate_baselines(
    datamodule: TabularDataModule,
    split: str = "val",
    seed: int = 0,
    fitted: FittedBaselines | None = None,
) -> dict[str, dict[str, float]]:
    """Return ``{baseline: {"auroc", "logloss", "brier", "ece"}}`` on ``split`` per baseline
    (losses weighted by the split's row weights, as the network's validation losses are;
    ``ml.metrics.multiclass_metrics`` for a label of several classes)."""
    y, weights = _labels(datamodule, split), _weights(datamodule, split)
    predictions = baseline_predictions(datamodule, split, seed, fitted)
    if datamodule.preprocessor.features.classes is not None:
        return {n: multiclass_metrics(y, p, weights=weights) for n, p in predictions.items()}
    return {name: binary_metrics(y, probs, weights=weights) for name, probs in predictions.items()}


def _class_columns(model: ClassifierMixin, x: object, k: int) -> np.ndarray:
    """(n, k) probabilities in class-index order from a classifier fitted on class indices,
    some of which its training rows may have lacked (their column stays 0)."""
    probs = np.zeros((x.shape[0], k))
    probs[:, model.classes_.astype(np.int64)] = model.predict_proba(x)
    return probs


def _labels(datamodule: TabularDataModule, split: str) -> np.ndarray:
    return datamodule.splits[split][2].numpy()


def _weights(datamodule: TabularDataModule, split: str) -> np.ndarray | None:
    """The split's row weights (None: the rows are unweighted)."""
    tensors = datamodule.splits[split]
    return tensors[3].numpy() if len(tensors) > 3 else None
