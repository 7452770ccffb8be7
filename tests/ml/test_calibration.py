"""The prior-shift correction (ml.calibration) and the calibration error, on planted scores."""

from __future__ import annotations

import numpy as np
import pytest

from ml.calibration import prior_shift, shift
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
