"""The numpy metrics agree with scikit-learn, including tied scores and clipping."""

import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

from ml.metrics import auroc, logloss


def test_auroc_matches_sklearn_with_ties() -> None:
    rng = np.random.default_rng(0)
    y = rng.random(5000) < 0.3
    score = np.round(rng.random(5000) + 0.3 * y, 1)  # rounding creates many ties
    assert auroc(y, score) == pytest.approx(roc_auc_score(y, score), abs=1e-12)
    assert auroc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0
    assert auroc([0, 1], [0.5, 0.5]) == 0.5


def test_auroc_needs_both_classes() -> None:
    with pytest.raises(ValueError):
        auroc([1, 1], [0.2, 0.3])


def test_logloss_matches_sklearn_and_clips() -> None:
    rng = np.random.default_rng(1)
    y = rng.random(1000) < 0.4
    p = rng.random(1000)
    assert logloss(y, p) == pytest.approx(log_loss(y, p), rel=1e-9)
    assert np.isfinite(logloss([1, 0], [0.0, 1.0]))
    assert logloss([1, 0], [0.0, 1.0]) == pytest.approx(-np.log(1e-7), rel=1e-6)
