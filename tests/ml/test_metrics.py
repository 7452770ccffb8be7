"""The numpy metrics agree with scikit-learn and with values worked out by hand."""

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

from ml.metrics import (
    auroc,
    binary_metrics,
    brier,
    expected_auroc,
    expected_calibration_error,
    logloss,
)


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


def test_brier_by_hand_and_against_sklearn() -> None:
    # (0.1^2 + 0.2^2 + 0.4^2 + 0.5^2) / 4 = (0.01 + 0.04 + 0.16 + 0.25) / 4
    assert brier([1, 0, 1, 0], [0.9, 0.2, 0.6, 0.5]) == pytest.approx(0.115, abs=1e-12)
    rng = np.random.default_rng(2)
    y, p = rng.random(500) < 0.3, rng.random(500)
    assert brier(y, p) == pytest.approx(brier_score_loss(y, p), rel=1e-12)


def test_expected_calibration_error_by_hand() -> None:
    y, p = [0, 1, 1, 0], [0.05, 0.15, 0.95, 1.0]
    # Bins of width 0.1: [0, 0.1) holds 0.05 (gap 0.05), [0.1, 0.2) holds 0.15 (gap 0.85), and
    # the last bin holds 0.95 and 1.0: mean label 0.5 vs mean probability 0.975 (gap 0.475).
    by_hand = (1 * 0.05 + 1 * 0.85 + 2 * 0.475) / 4
    assert expected_calibration_error(y, p) == pytest.approx(by_hand, abs=1e-12)
    # Two bins, [0, 0.5) and [0.5, 1]: |0.5 - 0.1| and |0.5 - 0.975|, two rows each.
    assert expected_calibration_error(y, p, n_bins=2) == pytest.approx(
        (2 * 0.4 + 2 * 0.475) / 4, abs=1e-12
    )
    assert expected_calibration_error([0, 1], [0.0, 1.0]) == 0.0


def test_binary_metrics_has_every_metric() -> None:
    y, p = [0, 1, 1, 0], [0.05, 0.15, 0.95, 1.0]
    assert binary_metrics(y, p) == {
        "auroc": auroc(y, p),
        "logloss": logloss(y, p),
        "brier": brier(y, p),
        "ece": expected_calibration_error(y, p),
    }


def test_expected_auroc_weighs_every_pair_of_distinct_rows() -> None:
    # Two rows: the 0.8 one is the positive and the 0.2 one the negative with weight 0.64, the
    # other way round with weight 0.04.
    assert expected_auroc([0.2, 0.8]) == pytest.approx(0.64 / 0.68, abs=1e-12)
    rng = np.random.default_rng(3)
    p = np.round(rng.uniform(0.01, 0.99, 40), 1)  # ties
    num = den = 0.0
    for i in range(p.size):
        for j in range(p.size):
            if i != j:
                weight = p[i] * (1 - p[j])
                num += weight * (1.0 if p[i] > p[j] else 0.5 if p[i] == p[j] else 0.0)
                den += weight
    assert expected_auroc(p) == pytest.approx(num / den, abs=1e-12)


def test_expected_auroc_of_calibrated_scores_is_their_realized_auroc() -> None:
    rng = np.random.default_rng(0)
    p = rng.beta(2, 5, 200_000)
    y = rng.random(p.size) < p  # labels drawn from the scores: calibrated by construction
    assert expected_auroc(p) == pytest.approx(auroc(y, p), abs=0.005)
    # Scores squeezed towards their mean (the same ranking) are expected to rank worse.
    assert expected_auroc(0.25 + 0.2 * (p - 0.25)) < expected_auroc(p) - 0.1
    with pytest.raises(ValueError, match="strictly between"):
        expected_auroc([0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        expected_auroc([0.5, 1.5])
