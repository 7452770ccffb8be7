"""Calibration measures of the live scores, and the prior-shift correction, on planted data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ml.metrics import expected_calibration_error, logloss
from sim.judge.calibration import prior_corrected, prior_shift, shift, weekly_calibration


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


def test_a_planted_prior_shift_is_corrected_from_the_audit_labels_known_before_each_day() -> None:
    """A model calibrated where 13% were late scores days where the late rate is twice that: by
    Bayes' rule, outcomes follow the model's likelihood ratios under the new prior. The audit
    labels of the days before correct the scores; the day before any audit label is kept."""
    rng = np.random.default_rng(2)
    days = pd.date_range("2013-12-02", periods=28, freq="D")
    n = 2_000
    p, _ = calibrated(0.13, n * len(days), rng)
    truth = shift(p, 1.05)  # the world's probability of each flight: the late rate doubled
    y = (rng.random(len(p)) < truth).astype(np.float64)
    examples = pd.DataFrame(
        {
            "day": np.repeat(days, n),
            "flywheel": p,
            "model_version": 1,
            "x": p,  # what the model reads
            "y": y,
        }
    )
    # A uniform audit sample of 10% of each day's flights, its labels back the next day.
    audit = examples.sample(frac=0.1, random_state=0)
    audit = audit.assign(delivered=audit.day + pd.Timedelta(days=1))

    def predict(version: int, frame: pd.DataFrame) -> np.ndarray:
        assert version == 1
        return frame.x.to_numpy()

    corrected = prior_corrected(examples, audit, predict, "day")
    first = (examples.day == days[0]).to_numpy()
    np.testing.assert_array_equal(corrected[first], p[first])  # no label known yet
    later = (examples.day >= days[7]).to_numpy()
    raw_ece = expected_calibration_error(y[later], p[later])
    fixed_ece = expected_calibration_error(y[later], corrected[later])
    assert raw_ece > 0.1 and fixed_ece < 0.02, (raw_ece, fixed_ece)
    assert logloss(y[later], corrected[later]) < logloss(y[later], p[later]) - 0.02

    week = examples.day.dt.to_period("W-SUN").dt.start_time
    table = weekly_calibration(y, week, {"flywheel": p, "corrected": corrected})
    assert list(table.columns) == ["week", "flywheel_ece", "corrected_ece", "corrected_logloss"]
    assert len(table) == 4
    assert (table.corrected_ece.iloc[1:] < table.flywheel_ece.iloc[1:]).all()
