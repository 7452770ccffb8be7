"""How the comparison reads a difference: block bootstrap, weights, Holm, MDE, cross-fitting;
on planted weekly data whose truth is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sim.judge.cross_fit import chosen_per_seed, cross_fitted_regret
from sim.judge.paired import judge, regret, with_holm
from sim.judge.statistics import block_df, block_length, holm, mde, read

WEEKS = pd.date_range("2013-07-01", periods=24, freq="7D").date.astype(str)


def ar1(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    """A stationary AR(1) series: each week keeps `phi` of the last week's value."""
    shocks = rng.normal(0, sd, n)
    series = np.empty(n)
    series[0] = shocks[0] / np.sqrt(1 - phi**2)
    for i in range(1, n):
        series[i] = phi * series[i - 1] + shocks[i]
    return series


def autocorrelated(rng: np.random.Generator, truth: float, seeds: int = 3, weeks: int = 24):
    """Weekly differences (seeds x weeks) around `truth`: a lead that persists from week to week
    (phi 0.6), in part the same in every seed (a cadence retrains on the same days whatever the
    seed), in part each play's own."""
    shared = ar1(rng, weeks, 0.6, 0.01)
    return np.array([truth + shared + ar1(rng, weeks, 0.6, 0.01) for _ in range(seeds)])


def test_the_block_interval_holds_its_level_on_autocorrelated_weeks_where_t_does_not() -> None:
    """1,000 planted comparisons, 3 seeds x 24 weeks: the block interval covers the truth at
    about its 95%; Student's t over the weeks, which takes them for independent, far less
    often (about 0.66: with phi 0.6 the mean's variance is about four times what it assumes)."""
    truth, replications = 0.01, 1000
    block = weekly = 0
    for i in range(replications):
        diff = autocorrelated(np.random.default_rng(i), truth)
        reading = read(diff, np.ones_like(diff), n_boot=300, seed=i)
        block += reading.block.low < truth < reading.block.high
        weekly += reading.week.low < truth < reading.week.high
    # 1,000 draws estimate a coverage within 0.007 (one standard error).
    assert 0.90 <= block / replications <= 0.99
    assert weekly / replications < block / replications - 0.15


def test_the_readings_by_hand() -> None:
    # Two seeds x four weeks; the second week has three times the flights of the others.
    diff = np.array([[0.01, 0.03, 0.0, 0.02], [0.03, 0.01, 0.02, 0.0]])
    weights = np.tile([100.0, 300.0, 100.0, 100.0], (2, 1))
    reading = read(diff, weights, n_boot=2000)
    # Weekly means 0.02, 0.02, 0.01, 0.01 weighted 1:3:1:1: 0.1 / 6.
    assert reading.estimate == pytest.approx(0.1 / 6)
    # Seed means weighted the same way: (0.01+0.09+0+0.02)/6 and (0.03+0.03+0.02+0)/6.
    assert reading.seed.estimate == pytest.approx(0.1 / 6)
    half = stats.t.ppf(0.975, 1) * np.std([0.12 / 6, 0.08 / 6], ddof=1) / np.sqrt(2)
    assert reading.seed.high == pytest.approx(0.1 / 6 + half)
    assert (reading.weeks, reading.seeds) == (4, 2)
    assert reading.block.low < reading.estimate < reading.block.high
    assert reading.mde == pytest.approx(mde(reading.se, block_df(4)))
    # Not paired (NaN) cells weigh nothing; a week no seed played is dropped.
    gaps = np.array([[0.01, np.nan, 0.02], [0.03, np.nan, np.nan]])
    sparse = read(gaps, np.ones_like(gaps), n_boot=200)
    assert sparse.estimate == pytest.approx((0.02 + 0.02) / 2) and sparse.weeks == 2


def test_weeks_are_weighted_by_their_examples_from_the_weekly_tables() -> None:
    rows = []
    for seed in (0, 1):
        for week, (a, b, examples) in enumerate([(0.70, 0.60, 3000), (0.60, 0.60, 1000)]):
            rows += [
                {"policy": "a", "seed": seed, "week": week, "auc": a, "examples": examples},
                {"policy": "b", "seed": seed, "week": week, "auc": b, "examples": examples},
            ]
    scores = pd.DataFrame(rows).assign(logloss=np.nan)
    assert judge(scores, "a", "b").estimate == pytest.approx(0.1 * 3 / 4)
    # Without the column, each week weighs 1.
    assert judge(scores.drop(columns="examples"), "a", "b").estimate == pytest.approx(0.05)


def test_the_block_length_rule() -> None:
    assert [block_length(n) for n in (1, 7, 8, 9, 24, 27, 28, 37)] == [1, 2, 2, 3, 3, 3, 4, 4]
    assert [block_df(n) for n in (2, 7, 24, 37)] == [1, 2, 7, 8]


def test_the_minimal_detectable_effect() -> None:
    # Many degrees of freedom: z's (1.960 + 0.842) times the standard error.
    assert mde(0.01, 10_000) == pytest.approx(0.02802, abs=1e-4)
    # Few: t's quantiles, larger.
    assert mde(0.01, 2) == pytest.approx((4.3027 + 1.0607) * 0.01, abs=1e-4)


def test_holm_by_hand() -> None:
    # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> 0.06 (monotone).
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adjusted, [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm([0.5, 0.6]), [1.0, 1.0])  # capped at 1
    np.testing.assert_allclose(holm([0.01, np.nan, 0.02]), [0.02, np.nan, 0.02])  # m = 2
    assert holm([]).size == 0


def test_holm_is_monotone_and_never_below_the_raw_p() -> None:
    p = np.random.default_rng(3).uniform(0, 0.2, 40)
    adjusted = holm(p)
    order = np.argsort(p)
    assert (np.diff(adjusted[order]) >= 0).all()
    assert (adjusted >= p).all() and (adjusted <= 1).all()
    assert adjusted.min() == pytest.approx(p.min() * 40)


def test_a_table_gets_a_holm_column_beside_each_p_over_all_of_its_p_values() -> None:
    table = pd.DataFrame({"policy": ["a", "b"], "auc_p": [0.01, 0.04], "logloss_p": [0.03, 0.005]})
    adjusted = with_holm(table)
    assert list(adjusted.columns) == [
        "policy",
        "auc_p",
        "auc_p_holm",
        "logloss_p",
        "logloss_p_holm",
    ]
    np.testing.assert_allclose(adjusted.auc_p_holm, [0.03, 0.06])
    np.testing.assert_allclose(adjusted.logloss_p_holm, [0.06, 0.02])


CADENCES = ["every-3d", "every-7d", "every-14d", "every-28d", "every-5d"]


def equal_cadences(rng: np.random.Generator, seeds: int = 3) -> pd.DataFrame:
    """Weekly AUC of cadences equal in truth: each play has its own lasting luck (its models
    had a good or a bad draw), the weeks their shared ups and downs."""
    week_effect = rng.normal(0, 0.02, len(WEEKS))
    rows = []
    for seed in range(seeds):
        for policy in CADENCES:
            luck = rng.normal(0, 0.01)
            auc = 0.65 + week_effect + luck + rng.normal(0, 0.005, len(WEEKS))
            rows.append(
                pd.DataFrame(
                    {"policy": policy, "seed": seed, "week": WEEKS, "auc": auc, "logloss": np.nan}
                )
            )
    return pd.concat(rows, ignore_index=True)


def test_the_cross_fitted_best_cadence_is_not_flattered_where_the_in_sample_one_is() -> None:
    """Cadences equal in truth: the best in hindsight leads the others (their regret is the luck
    of the plays it was chosen on); cross-fitted, the mean regret is near 0."""
    in_sample, fitted = [], []
    for i in range(60):
        scores = equal_cadences(np.random.default_rng(i))
        in_sample.append(regret(scores, CADENCES).regret.mean())
        fitted.append(cross_fitted_regret(scores, CADENCES, n_boot=100).regret.mean())
    in_sample, fitted = np.array(in_sample), np.array(fitted)
    assert (in_sample > 0).all()  # by construction
    assert in_sample.mean() > 0.005
    error = fitted.std(ddof=1) / np.sqrt(len(fitted))
    assert abs(fitted.mean()) < 3 * error + 0.001
    assert in_sample.mean() > fitted.mean() + 5 * error


def test_the_cross_fitted_best_has_an_interval_and_each_seed_a_choice_made_without_it() -> None:
    scores = equal_cadences(np.random.default_rng(7))
    chosen = chosen_per_seed(scores, CADENCES)
    assert set(chosen) == {0, 1, 2}
    for seed, best in chosen.items():
        others = scores[(scores.seed != seed)].groupby("policy").auc.mean()
        assert best == others.idxmax()
    table = cross_fitted_regret(scores, CADENCES).set_index("policy")
    best = regret(scores, CADENCES).best.iloc[0]
    row = table.loc[best]
    assert row.block_low < row.block_high and (row.block_low, row.block_high) != (0.0, 0.0)
    assert row.block_low < 0 < row.block_high and row.seed_low < row.seed_high
    assert {"regret", "low", "high", "seed_low", "p", "p_holm", "mde"} <= set(table.columns)
    assert table.p_holm.ge(table.p).all()


def test_cross_fitting_needs_two_seeds() -> None:
    one = equal_cadences(np.random.default_rng(0), seeds=1)
    assert cross_fitted_regret(one, CADENCES).empty
    with pytest.raises(ValueError, match="two seeds or more"):
        chosen_per_seed(one, CADENCES)


def test_alarms_against_the_calendar_carry_a_block_interval_and_holm() -> None:
    from sim.judge.alarm_lift import alarm_lift

    rng = np.random.default_rng(5)
    days = pd.date_range("2013-09-02", periods=12, freq="7D")

    def runs(trigger: str, share: float, shift: int) -> pd.DataFrame:
        gained = rng.uniform(size=len(days)) < share
        return pd.DataFrame(
            {
                "event_day": (days + pd.Timedelta(days=shift)).date.astype(str),
                "trigger": trigger,
                "gain": np.where(gained, 0.02, 0.0),
            }
        )

    played = {}
    for seed in range(3):
        played[("every-7d", seed)] = runs("cadence", 0.2, 0)
        played[("drift", seed)] = runs("drift", 0.9, 2)  # gains far more often
        played[("performance", seed)] = runs("performance", 0.2, 3)  # as often
    table = alarm_lift(played, "every-7d", 7).set_index("policy")
    drift, performance = table.loc["drift"], table.loc["performance"]
    assert drift.precision_minus_base == pytest.approx(drift.precision - drift.base_rate)
    assert drift.precision_minus_base_block_low > 0
    low, high = performance[["precision_minus_base_block_low", "precision_minus_base_block_high"]]
    assert low < 0 < high
    assert (table.precision_minus_base_p_holm >= table.precision_minus_base_p).all()
    assert drift.precision_minus_base_mde > 0
