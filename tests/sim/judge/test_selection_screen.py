"""The selection screen: a fast replay of the labeling loop, strategy by strategy."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest

from ml.config import FeatureConfig
from sim.judge.label_features import COLUMNS
from sim.judge.screen_stats import compare, winner
from sim.judge.selection_screen import ScreenConfig, World, replay
from sim.judge.selection_strategies import (
    STRATEGIES,
    DayView,
    inclusion_probabilities,
    systematic_sample,
)

FEATURES = FeatureConfig(
    categorical=("carrier", "route"),
    numeric=("x", "scheduled_hour", *COLUMNS),
    label="is_late",
    id_columns=("flight_id",),
)


def synthetic_world(days: int = 21, per_day: int = 60, seed: int = 0) -> pd.DataFrame:
    """Flights whose lateness follows a numeric feature and the carrier."""
    rng = np.random.default_rng(seed)
    n = days * per_day
    day = np.repeat([date(2013, 4, 1) + timedelta(d) for d in range(days)], per_day)
    carrier = rng.choice(["AA", "UA", "B6"], n)
    x = rng.normal(size=n)
    logit = 1.5 * x + np.where(carrier == "AA", 1.0, 0.0) - 1.5
    return pd.DataFrame(
        {
            "flight_id": [
                f"{d}_{c}{i}_EWR" for i, (d, c) in enumerate(zip(day, carrier, strict=True))
            ],
            "flight_date": day,
            "carrier": carrier,
            "origin": "EWR",
            "route": rng.choice(["EWR-ORD", "EWR-LAX"], n),
            "scheduled_hour": rng.integers(6, 22, n),
            "x": x,
            "is_late": rng.random(n) < 1 / (1 + np.exp(-logit)),
        }
    )


def view(n: int = 300, seed: int = 1) -> DayView:
    rng = np.random.default_rng(seed)
    scores = rng.beta(1, 5, n)
    return DayView(
        ids=np.array([f"f{i:04d}" for i in range(n)]),
        scores=scores,
        members=np.clip(scores + rng.normal(0, 0.05, (3, n)), 0, 1),
        recent_scores=rng.beta(1, 5, 150),
        recent_late=(rng.random(150) < 0.2).astype(float),
    )


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_each_strategy_spends_the_budget_on_distinct_flights(name: str) -> None:
    picks, weights, uniform = STRATEGIES[name](view(), 40, 0.4, np.random.default_rng(0))
    assert len(picks) == 40 and len(set(picks.tolist())) == 40
    assert picks.min() >= 0 and picks.max() < 300
    assert len(weights) == len(uniform) == 40 and (weights >= 1).all()
    if name in ("current", "margin", "disagreement"):
        assert uniform.sum() == 16  # the audit share, drawn uniformly


def test_the_targeted_picks_follow_each_strategys_priority() -> None:
    day = view()
    picks, _, uniform = STRATEGIES["disagreement"](day, 40, 0.4, np.random.default_rng(0))
    spread = day.members.std(axis=0)
    targeted = picks[~uniform]
    others = np.setdiff1d(np.arange(300), picks)
    assert spread[targeted].min() >= spread[others].max()
    picks, _, uniform = STRATEGIES["current"](day, 40, 0.4, np.random.default_rng(0))
    margin = np.abs(day.scores - 0.5)
    assert margin[picks[~uniform]].max() <= margin[np.setdiff1d(np.arange(300), picks)].min()


def test_the_pps_inclusion_probabilities_sum_to_the_budget_and_weigh_their_inverse() -> None:
    day = view()
    pi = inclusion_probabilities(day.scores, 40, 0.4)
    assert pi.sum() == pytest.approx(40) and pi.max() <= 1 and pi.min() > 0
    expected = 0.4 / 300 + 0.6 * day.scores * (1 - day.scores) / np.sum(
        day.scores * (1 - day.scores)
    )
    np.testing.assert_allclose(pi, 40 * expected)  # none capped at this budget
    picks, weights, _ = STRATEGIES["pps"](day, 40, 0.4, np.random.default_rng(3))
    np.testing.assert_allclose(weights, 1 / pi[picks])


def test_probabilities_over_1_are_capped_and_the_rest_scaled_to_the_budget() -> None:
    scores = np.array([0.5, 0.5, 0.01, 0.01, 0.01, 0.01])
    pi = inclusion_probabilities(scores, 3, 0.0)
    assert pi[:2].tolist() == [1.0, 1.0] and pi.sum() == pytest.approx(3)
    assert inclusion_probabilities(scores, 6, 0.4).tolist() == [1.0] * 6


def test_a_systematic_sample_draws_each_flight_with_its_probability() -> None:
    pi = inclusion_probabilities(view().scores, 40, 0.4)
    rng = np.random.default_rng(0)
    hits = np.zeros(len(pi))
    for _ in range(4000):
        picks = systematic_sample(pi, rng)
        assert len(picks) == 40
        hits[picks] += 1
    # 4000 draws: a frequency's standard error is at most 0.008.
    np.testing.assert_allclose(hits / 4000, pi, atol=0.04)


def test_every_strategy_replays_a_small_world_and_each_week_is_scored() -> None:
    world = World(synthetic_world(), FEATURES, "flight_date")
    config = ScreenConfig(budget=20, members=3, max_iter=20, scored_from=date(2013, 4, 8))
    for name in STRATEGIES:
        weeks = replay(world, name, 0, config)
        assert weeks.week.tolist() == [date(2013, 4, 8), date(2013, 4, 15)], name
        assert weeks.auc.between(0.5, 1).all(), (name, weeks)
        # A week's model learns from the labels of every day before it: 20 a day.
        assert weeks.labels.tolist() == [7 * 20, 14 * 20], name


def test_a_replay_is_the_same_under_the_same_seed_and_differs_under_another() -> None:
    world = World(synthetic_world(days=14), FEATURES, "flight_date")
    config = ScreenConfig(budget=20, max_iter=10, scored_from=date(2013, 4, 8))
    first = replay(world, "margin", 0, config)
    pd.testing.assert_frame_equal(first, replay(world, "margin", 0, config))
    assert not first.auc.equals(replay(world, "margin", 1, config).auc)


def test_a_strategy_wins_only_by_the_margin_and_with_its_adjusted_interval_above_0() -> None:
    rng = np.random.default_rng(0)
    base = 0.70 + rng.normal(0, 0.01, 10)
    means = pd.DataFrame(
        {
            "uniform": base,
            "big": base + 0.006 + rng.normal(0, 0.001, 10),
            "small": base + 0.001 + rng.normal(0, 0.0002, 10),
            "noisy": base + 0.004 + rng.normal(0, 0.02, 10),
        }
    )
    table = compare(means, "uniform").set_index("strategy")
    assert table.loc["big", "rejected"] and table.loc["big", "low"] > 0
    assert table.loc["small", "rejected"]  # clearly above 0, but below the margin
    assert not table.loc["noisy", "rejected"]
    # Holm: the smallest p of three is judged at 0.05 / 3, the next at 0.05 / 2, the last at 0.05.
    assert table.sort_values("p").level.tolist() == pytest.approx([0.05 / 3, 0.05 / 2, 0.05])
    assert winner(table.reset_index(), 0.003, "uniform") == "big"
    assert winner(table.drop(index="big").reset_index(), 0.003, "uniform") == "uniform"


def test_margin_picks_the_calibrated_scores_nearest_the_recent_late_rate() -> None:
    from ml.calibration import prior_shift, shift
    from sim.judge.selection_strategies import calibrated

    day = view()
    probs, prior = calibrated(day)
    assert prior == pytest.approx(day.recent_late.mean())
    delta = prior_shift(day.recent_scores, day.recent_late)
    assert shift(day.recent_scores, delta).mean() == pytest.approx(prior, abs=1e-6)
    np.testing.assert_allclose(probs, shift(day.scores, delta))
    picks, _, uniform = STRATEGIES["margin"](day, 40, 0.4, np.random.default_rng(0))
    distance = np.abs(probs - prior)
    others = np.setdiff1d(np.arange(300), picks)
    assert distance[picks[~uniform]].max() <= distance[others].min()
    # Too few recent uniform labels: no shift, the day's mean score as the prior.
    few = DayView(day.ids, day.scores, None, day.recent_scores[:10], day.recent_late[:10])
    probs, prior = calibrated(few)
    np.testing.assert_array_equal(probs, day.scores)
    assert prior == pytest.approx(day.scores.mean())
