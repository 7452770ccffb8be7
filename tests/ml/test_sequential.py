"""The excess-loss alarm's statistics (ml/sequential.py) on planted streams."""

from __future__ import annotations

import numpy as np
import pytest

from ml.sequential import average_run_length, cusum, cusum_threshold, excess_loss


def ar1(rng: np.random.Generator, streams: int, days: int, phi: float, sd: float) -> np.ndarray:
    """Autocorrelated days (AR(1) of lag-1 correlation `phi`, marginal spread `sd`), as the
    daily excess loss moves with the week's weather."""
    noise = rng.normal(0, sd * np.sqrt(1 - phi**2), size=(streams, days))
    out = np.empty_like(noise)
    out[:, 0] = rng.normal(0, sd, streams)
    for t in range(1, days):
        out[:, t] = phi * out[:, t - 1] + noise[:, t]
    return out


def test_excess_loss_is_log_loss_less_entropy_and_centred_for_a_calibrated_model() -> None:
    assert excess_loss(np.array([1]), np.array([0.8]))[0] == pytest.approx(
        -np.log(0.8) + (0.8 * np.log(0.8) + 0.2 * np.log(0.2))
    )
    rng = np.random.default_rng(1)
    p = rng.uniform(0.05, 0.6, 200_000)
    calibrated = excess_loss(rng.random(p.size) < p, p)
    assert abs(calibrated.mean()) < 0.005
    # Outcomes later than predicted: the excess is positive.
    assert excess_loss(rng.random(p.size) < p + 0.2, p).mean() > 0.05
    with pytest.raises(ValueError, match="3 outcomes for 2"):
        excess_loss(np.array([0, 1, 1]), np.array([0.1, 0.2]))


def test_cusum_accumulates_restarts_at_zero_and_after_an_alarm() -> None:
    path = cusum(np.array([1.0, -3.0, 1.5, 1.0, 0.5, 1.0]), threshold=2.0)
    assert path.statistic.tolist() == [1.0, 0.0, 1.5, 2.5, 0.5, 1.5]
    assert path.alarms.tolist() == [False, False, False, True, False, False]


def test_the_threshold_holds_its_run_length_on_a_stationary_stream() -> None:
    rng = np.random.default_rng(7)
    phi, sd, allowance = 0.35, 0.13, 0.015
    reference = ar1(rng, 1, 365, phi, sd)[0]
    threshold = cusum_threshold(reference, allowance, run_length=30)
    fresh = ar1(rng, 600, 400, phi, sd)
    arl = average_run_length(fresh - allowance, threshold)
    # The design's 30 days, within the error of a year's reference of autocorrelated days.
    assert 22 <= arl <= 45, (threshold, arl)
    # Ignoring the autocorrelation (blocks of one day) sets a lower threshold: more false alarms.
    assert cusum_threshold(reference, allowance, 30, block=1) < threshold


def test_a_planted_step_alarms_within_the_expected_delay() -> None:
    rng = np.random.default_rng(11)
    phi, sd, allowance = 0.35, 0.13, 0.015
    threshold = cusum_threshold(ar1(rng, 1, 365, phi, sd)[0], allowance, run_length=30)
    step = 0.15
    streams = ar1(rng, 400, 200, phi, sd) + step
    delays = [np.argmax(cusum(s - allowance, threshold).alarms) + 1 for s in streams]
    # Drift over the allowance reaches the threshold in about threshold / (step - allowance)
    # days; the noise spreads it both ways.
    expected = threshold / (step - allowance)
    assert np.median(delays) <= 1.5 * expected + 2, (np.median(delays), expected)
    assert np.mean(delays) < 30 / 2


def test_a_threshold_needs_reference_days() -> None:
    with pytest.raises(ValueError, match="at least 2 reference days"):
        cusum_threshold(np.array([0.1]), 0.01, 30)
