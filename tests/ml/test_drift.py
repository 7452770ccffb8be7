"""Drift statistics against values worked out by hand, and the training profile's round trip."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import kolmogorov
from scipy.stats import ks_2samp

from ml.drift import (
    TrainingProfile,
    binned_proportions,
    build_training_profile,
    feature_drift,
    ks_pvalue,
    ks_statistic,
    psi,
    quantile_bin_edges,
    segment_shift,
)

EPS = 1e-4


def test_psi_by_hand() -> None:
    by_hand = (0.25 - 0.5) * math.log(0.25 / 0.5) + (0.75 - 0.5) * math.log(0.75 / 0.5)
    assert psi([0.5, 0.5], [0.25, 0.75]) == pytest.approx(by_hand, abs=1e-12)
    assert psi([50, 50], [1, 3]) == pytest.approx(by_hand, abs=1e-12)  # counts are normalised
    assert psi([0.2, 0.3, 0.5], [0.2, 0.3, 0.5]) == 0.0
    # An empty bin is floored at eps rather than making the index infinite.
    floored = (0.5 - 1) * math.log(0.5 / 1) + (0.5 - EPS) * math.log(0.5 / EPS)
    assert psi([1, 0], [0.5, 0.5]) == pytest.approx(floored, abs=1e-12)
    with pytest.raises(ValueError):
        psi([0.5, 0.5], [1.0])


def test_quantile_edges_and_proportions_by_hand() -> None:
    values = np.r_[np.arange(1.0, 11.0), np.nan]
    assert quantile_bin_edges(values, 2).tolist() == [5.5]
    # Linear interpolation at sorted positions 2.25, 4.5 and 6.75 of 1..10.
    assert quantile_bin_edges(values, 4).tolist() == [3.25, 5.5, 7.75]
    assert quantile_bin_edges([1, 1, 1, 1, 2], 4).tolist() == [1.0]  # repeated edges collapse
    assert quantile_bin_edges([np.nan]).size == 0
    # Bins (-inf, 2] and (2, inf), then the missing-value bin.
    assert binned_proportions([1, 2, 3, np.nan], [2.0]).tolist() == [0.5, 0.25, 0.25]
    assert binned_proportions([1, 2, 3], []).tolist() == [1.0, 0.0]


def test_ks_statistic_by_hand() -> None:
    # ECDFs of {1, 2, 3, 4} and {3, 4, 5, 6, 7}: at x = 4 they are 4/4 and 2/5, D = 0.6.
    assert ks_statistic([1, 2, 3, 4, np.nan], [3, 4, 5, 6, 7]) == pytest.approx(0.6)
    assert ks_statistic([1, 2], [1, 2]) == 0.0
    assert ks_statistic([1, 2], [3, 4]) == 1.0
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=300), rng.normal(0.3, 1.0, size=500)
    assert ks_statistic(a, b) == pytest.approx(ks_2samp(a, b).statistic, abs=1e-12)


def test_ks_pvalue_follows_the_kolmogorov_distribution() -> None:
    # n = m = 50 gives sqrt(n m / (n + m)) = 5, so d = 0.2 is lambda = 1.
    by_hand = 2 * sum((-1) ** (j - 1) * math.exp(-2 * j**2) for j in range(1, 20))
    assert ks_pvalue(0.2, 50, 50) == pytest.approx(by_hand, rel=1e-12)
    for lam in (0.3, 0.6, 0.9, 1.2, 2.0):
        assert ks_pvalue(lam / 5, 50, 50) == pytest.approx(kolmogorov(lam), rel=1e-9)
    assert ks_pvalue(0.0, 10, 10) == 1.0


@pytest.fixture()
def training_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 2000
    return pd.DataFrame(
        {
            "carrier": rng.choice(["AA", "B6", "DL"], n, p=[0.5, 0.3, 0.2]).astype(object),
            "distance": rng.uniform(100, 2500, n),
            "gust": np.where(rng.random(n) < 0.2, np.nan, rng.normal(20, 5, n)),
        }
    )


def test_profile_round_trips_through_json(training_frame: pd.DataFrame) -> None:
    frame = training_frame.assign(carrier=training_frame.carrier.where(lambda c: c != "DL"))
    predictions = np.random.default_rng(1).random(len(frame))
    profile = build_training_profile(
        frame, ["carrier"], ["distance", "gust"], predictions, n_bins=5, sample_size=300
    )
    again = TrainingProfile.from_dict(json.loads(json.dumps(profile.to_dict())))
    assert again == profile
    assert profile.n_rows == 2000 and set(profile.categorical["carrier"]) == {
        "AA",
        "B6",
        "__missing__",
    }
    gust = profile.numeric["gust"]
    assert len(gust.edges) == 4 and len(gust.proportions) == 6  # five bins plus missing
    assert gust.proportions[-1] == pytest.approx(frame.gust.isna().mean())
    assert len(gust.sample) == 300 and not np.isnan(gust.sample).any()
    assert profile.prediction is not None and len(profile.prediction.sample) == 300
    same = build_training_profile(frame, ["carrier"], ["gust"], n_bins=5, sample_size=300)
    assert same.numeric["gust"] == gust and same.prediction is None  # seeded sample


def test_no_drift_against_itself(training_frame: pd.DataFrame) -> None:
    profile = build_training_profile(training_frame, ["carrier"], ["distance", "gust"])
    drift = feature_drift(profile, training_frame)
    assert drift.columns.tolist() == [
        *["feature", "kind", "psi", "ks", "ks_pvalue"],
        *["n_training", "n_current", "missing_share_current"],
    ]
    assert drift.feature.tolist() == ["carrier", "distance", "gust"]
    assert drift.psi.tolist() == pytest.approx([0, 0, 0], abs=1e-12)
    # The KS profile is a sample of the same rows: D = 0 exactly since sample_size >= n.
    assert drift.ks.tolist()[1:] == [0.0, 0.0] and math.isnan(drift.ks[0])
    assert drift.missing_share_current[2] == pytest.approx(training_frame.gust.isna().mean())
    with pytest.raises(KeyError, match="gust"):
        feature_drift(profile, training_frame.drop(columns="gust"))


def test_unseen_categories_and_missing_values_by_hand() -> None:
    training = pd.DataFrame({"carrier": ["AA", "AA", "B6", "B6"], "x": [1.0, 2.0, 3.0, 4.0]})
    current = pd.DataFrame({"carrier": ["AA", "ZZ", "ZZ", "B6"], "x": [1.0, np.nan, np.nan, 4.0]})
    profile = build_training_profile(training, ["carrier"], ["x"], n_bins=2)
    drift = feature_drift(profile, current).set_index("feature")
    # AA and B6 fall from 0.5 to 0.25; ZZ lands in the unseen bin, 0 in training (eps).
    by_hand = 2 * (0.25 - 0.5) * math.log(0.25 / 0.5) + (0.5 - EPS) * math.log(0.5 / EPS)
    assert drift.loc["carrier", "psi"] == pytest.approx(by_hand, abs=1e-12)
    # x: edge 2.5, training [0.5, 0.5, missing 0]; current [0.25, 0.25, missing 0.5].
    assert profile.numeric["x"].edges == [2.5]
    assert drift.loc["x", "psi"] == pytest.approx(by_hand, abs=1e-12)
    assert drift.loc["x", "missing_share_current"] == 0.5
    assert drift.loc["x", "ks"] == pytest.approx(0.25)  # {1,2,3,4} vs {1,4}: at x = 3
    assert (drift.loc["x", "n_training"], drift.loc["x", "n_current"]) == (4, 4)

    shift = segment_shift(profile, current, "carrier", top=2)
    assert shift.columns.tolist() == [
        "value",
        "training_share",
        "current_share",
        "psi_contribution",
    ]
    assert shift.value.tolist() == ["ZZ", "AA"]
    assert shift.psi_contribution[0] == pytest.approx((0.5 - EPS) * math.log(0.5 / EPS))
    assert shift.psi_contribution[1] == pytest.approx(0.25 * math.log(2))
    # With one new category the contributions add up to the feature's PSI.
    total = segment_shift(profile, current, "carrier", top=10).psi_contribution.sum()
    assert total == pytest.approx(by_hand, abs=1e-12)


def test_prediction_drift_is_reported_when_profiled(training_frame: pd.DataFrame) -> None:
    rng = np.random.default_rng(2)
    profile = build_training_profile(training_frame, [], ["distance"], rng.random(2000) * 0.5)
    shifted = feature_drift(profile, training_frame, rng.random(2000) * 0.5 + 0.25)
    prediction = shifted.set_index("feature").loc["prediction"]
    assert prediction.kind == "prediction" and prediction.psi > 1 and prediction.ks_pvalue < 1e-6
    unprofiled = build_training_profile(training_frame, [], ["distance"])
    unprofiled_drift = feature_drift(unprofiled, training_frame, rng.random(2000))
    assert "prediction" not in unprofiled_drift.feature.tolist()
    # Scores are a sample of their own: fewer of them than feature rows is fine.
    few = feature_drift(profile, training_frame, rng.random(500) * 0.5).set_index("feature")
    assert few.loc["prediction", "psi"] < 0.1
