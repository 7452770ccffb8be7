"""The prior-shift correction (ml.calibration) and the calibration error, on planted scores."""

from __future__ import annotations

import numpy as np
import pytest

from ml.calibration import OffsetModel, platt, prior_shift, rescale, shift
from ml.metrics import expected_calibration_error


def calibrated(rate: float, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Scores of a calibrated model on a population whose outcomes average about `rate`, and
    outcomes drawn from them."""
    logits = rng.normal(np.log(rate / (1 - rate)) - 0.3, 1.0, n)
    p = 1 / (1 + np.exp(-logits))
    return p, (rng.random(n) < p).astype(np.float64)


def test_the_ece_of_calibrated_scores_is_small_and_of_shifted_ones_the_shift() -> None:
    rng = np.random.default_rng(0)
    p, y = calibrated(0.2, 200_000, rng)
    assert expected_calibration_error(y, p) < 0.005
    # Every score 0.1 too high: the ECE is that 0.1 (no score crosses a bin's edge the wrong way
    # in mean).
    assert expected_calibration_error(y, np.clip(p + 0.1, 0, 1)) == pytest.approx(0.1, abs=0.01)


def test_shifting_the_prior_keeps_the_ranking_and_moves_the_mean_to_the_new_rate() -> None:
    rng = np.random.default_rng(1)
    p, _ = calibrated(0.13, 100_000, rng)
    outcomes = (rng.random(len(p)) < 0.32).astype(np.float64)
    moved = shift(p, prior_shift(p, outcomes))
    assert np.array_equal(np.argsort(p, kind="stable"), np.argsort(moved, kind="stable"))
    assert moved.mean() == pytest.approx(outcomes.mean(), abs=1e-9)
    np.testing.assert_allclose(shift(p, prior_shift(p, p)), p, atol=1e-6)
    # Outcomes all of one value still give a finite shift.
    assert np.isfinite(prior_shift(p[:50], np.zeros(50)))


def test_platt_recovers_a_planted_slope_and_intercept() -> None:
    """Outcomes drawn at a slope of 0.6 and an intercept of 0.8 on the scores' log-odds (an
    over-confident model on a population later than it learned)."""
    rng = np.random.default_rng(4)
    x = rng.normal(-1.0, 1.5, 200_000)
    y = (rng.random(len(x)) < 1 / (1 + np.exp(-(0.6 * x + 0.8)))).astype(np.float64)
    slope, intercept = platt(1 / (1 + np.exp(-x)), y)
    assert slope == pytest.approx(0.6, abs=0.02) and intercept == pytest.approx(0.8, abs=0.02)
    np.testing.assert_allclose(
        rescale(np.array([0.5]), slope, intercept), 1 / (1 + np.exp(-0.8)), atol=0.01
    )
    # Outcomes of one value, or scores that separate them: finite, by Platt's smoothed targets.
    assert np.isfinite(platt(np.full(50, 0.3), np.zeros(50))).all()
    assert np.isfinite(
        platt(np.r_[np.full(20, 0.1), np.full(20, 0.9)], np.r_[np.zeros(20), np.ones(20)])
    ).all()


def test_a_weighted_prior_shift_counts_each_row_its_weight() -> None:
    rng = np.random.default_rng(5)
    p, y = calibrated(0.2, 500, rng)
    weights = rng.integers(1, 4, len(p))
    repeated = prior_shift(np.repeat(p, weights), np.repeat(y, weights))
    assert prior_shift(p, y, weights=weights.astype(np.float64)) == pytest.approx(
        repeated, abs=1e-9
    )


def test_the_offset_model_recovers_a_planted_line_and_shrinks_to_the_mean() -> None:
    rng = np.random.default_rng(6)
    x = rng.normal(0.0, 1.0, (60, 2))
    shifts = 0.4 + 0.5 * x[:, 0] - 0.2 * x[:, 1]
    weights = rng.integers(20, 60, 60).astype(np.float64)
    model = OffsetModel.fit(x, shifts, weights, alpha=0.0)
    np.testing.assert_allclose(model.predict(np.array([[1.0, 1.0], [0.0, 0.0]])), [0.7, 0.4])
    # A large penalty: every day gets the days' mean shift, weighed by their labels.
    flat = OffsetModel.fit(x, shifts, weights, alpha=1e9)
    mean = np.average(shifts, weights=weights)
    np.testing.assert_allclose(flat.predict(np.array([[3.0, -3.0]])), [mean], atol=1e-6)
    # A constant feature gets no slope rather than a division by zero.
    constant = OffsetModel.fit(np.c_[x[:, 0], np.ones(60)], shifts, weights, alpha=0.0)
    assert constant.slopes[1] == 0.0
    with pytest.raises(ValueError, match="a row of features per shift"):
        OffsetModel.fit(x[:10], shifts, weights, alpha=1.0)


def test_the_offset_model_fitted_to_labels_recovers_a_planted_day_effect() -> None:
    """Labels whose log-odds are the model's plus 0.3, plus 0.8 per unit of a day's rain."""
    rng = np.random.default_rng(7)
    rain = np.repeat(rng.exponential(0.5, 400), 100)[:, None]
    logits = rng.normal(-1.5, 1.0, len(rain))
    truth = logits + 0.3 + 0.8 * rain[:, 0]
    y = (rng.random(len(truth)) < 1 / (1 + np.exp(-truth))).astype(np.float64)
    model = OffsetModel.fit_to_labels(rain, logits, y, alpha=0.0)
    np.testing.assert_allclose(model.predict(np.array([[0.0], [1.0]])), [0.3, 1.1], atol=0.05)
    # A large penalty leaves the one shift of all the labels (prior_shift's).
    flat = OffsetModel.fit_to_labels(rain, logits, y, alpha=1e12)
    expected = prior_shift(1 / (1 + np.exp(-logits)), y)
    np.testing.assert_allclose(flat.predict(np.array([[3.0]])), [expected], atol=1e-4)
    with pytest.raises(ValueError, match="features per label"):
        OffsetModel.fit_to_labels(rain[:10], logits, y, alpha=1.0)
