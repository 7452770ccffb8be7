"""The statistics of the policy comparison, on planted weekly scores whose truth is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.judge.paired import (
    best_cadence,
    bootstrap_interval,
    differences,
    paired_difference,
    regret,
    t_interval,
    weekly_scores,
)

WEEKS = pd.date_range("2013-07-01", periods=24, freq="7D").date.astype(str)


def planted(
    gains: dict[str, float], seeds: int = 3, noise: float = 0.005, rng_seed: int = 1
) -> pd.DataFrame:
    """Weekly scores of policies that differ from a common base by a planted `gains` each: the
    same weeks' ups and downs for all (what pairing removes), each play's own noise."""
    rng = np.random.default_rng(rng_seed)
    week_effect = rng.normal(0, 0.03, len(WEEKS))
    rows = []
    for seed in range(seeds):
        seed_effect = rng.normal(0, 0.01)
        for policy, gain in gains.items():
            auc = 0.68 + week_effect + seed_effect + gain + rng.normal(0, noise, len(WEEKS))
            loss = 0.55 - (auc - 0.68) + rng.normal(0, noise, len(WEEKS))
            rows.append(
                pd.DataFrame(
                    {"policy": policy, "seed": seed, "week": WEEKS, "auc": auc, "logloss": loss}
                )
            )
    return pd.concat(rows, ignore_index=True)


@pytest.mark.parametrize("unit", ["week", "seed"])
def test_a_planted_difference_is_found_and_inside_the_interval(unit) -> None:
    scores = planted({"flywheel": 0.02, "static": 0.0})
    found = paired_difference(scores, "flywheel", "static", unit=unit)
    assert found.interval.excludes_zero()
    assert found.interval.low < 0.02 < found.interval.high
    assert found.interval.estimate == pytest.approx(0.02, abs=0.005)
    assert (found.weeks, found.seeds, found.seeds_ahead) == (24, 3, 3)
    assert found.interval.n == (24 if unit == "week" else 3)
    # Lower is better for log loss: the planted gain lowers it, in every seed.
    loss = paired_difference(scores, "flywheel", "static", "logloss", unit=unit)
    assert loss.interval.high < 0 and loss.seeds_ahead == 3


@pytest.mark.parametrize("unit", ["week", "seed"])
def test_no_difference_gives_an_interval_across_zero(unit) -> None:
    scores = planted({"drift": 0.0, "performance": 0.0})
    same = paired_difference(scores, "drift", "performance", unit=unit)
    assert same.interval.low < 0 < same.interval.high
    assert not same.interval.excludes_zero()


@pytest.mark.parametrize("unit", ["week", "seed"])
def test_the_interval_covers_the_planted_difference_95_times_in_100(unit) -> None:
    """Over many planted comparisons, the t-interval holds the truth at its level: an interval
    that is too narrow (pairing ignored, or the wrong quantile) fails this. (Any one planted
    comparison above misses the truth with a chance of 5%: theirs are draws that do not.)"""
    covered = 0
    for i in range(400):
        scores = planted({"a": 0.01, "b": 0.0}, rng_seed=i)
        interval = paired_difference(scores, "a", "b", unit=unit).interval
        covered += interval.low < 0.01 < interval.high
    # 400 draws estimate a coverage of 0.95 within 0.011 (one standard error); z's quantile in
    # place of t's with the seeds' 2 degrees of freedom would cover about 0.80 of them, an
    # interval that ignores the pairing nearly all.
    assert 0.90 <= covered / 400 <= 0.99


def test_pairs_only_the_weeks_and_seeds_both_played() -> None:
    scores = planted({"a": 0.01, "b": 0.0})
    short = scores[~((scores.policy == "b") & (scores.seed == 2))]
    short = short[~((short.policy == "a") & (short.week == WEEKS[0]))]
    found = paired_difference(short, "a", "b")
    assert (found.weeks, found.seeds) == (23, 2)


def test_the_best_fixed_cadence_has_no_regret_and_the_others_their_planted_gap() -> None:
    gains = {"every-3d": 0.0, "every-7d": 0.02, "every-14d": 0.01, "static": -0.05}
    table = regret(planted(gains), ["every-3d", "every-7d", "every-14d"]).set_index("policy")
    assert set(table.best) == {"every-7d"}
    # 0 by construction: chosen on these plays, it has no interval (a (0, 0) would flatter it).
    assert table.loc["every-7d", "regret"] == 0.0
    assert table.loc["every-7d", ["low", "high"]].isna().all()
    for policy, gain in gains.items():
        row = table.loc[policy]
        assert row.regret == pytest.approx(0.02 - gain, abs=0.004)
        if policy != "every-7d":
            assert row.low < 0.02 - gain < row.high and row.low > 0


def test_the_best_cadence_is_chosen_on_the_seeds_every_policy_played() -> None:
    scores = planted({"every-3d": 0.0, "every-7d": 0.01}, seeds=3)
    # every-3d alone played a fourth seed, a lucky one: it must not count.
    lucky = scores[(scores.policy == "every-3d") & (scores.seed == 0)].assign(seed=3, auc=0.99)
    scores = pd.concat([scores, lucky], ignore_index=True)
    assert best_cadence(scores, ["every-3d", "every-7d"]) == "every-7d"
    assert set(regret(scores, ["every-3d", "every-7d"]).best) == {"every-7d"}


def test_differences_against_one_policy() -> None:
    scores = planted({"flywheel": 0.0, "static": -0.05, "drift": 0.0})
    table = differences(scores, "flywheel").set_index("policy")
    assert list(table.index) == ["static", "drift"]
    assert table.loc["static", "auc_high"] < 0 < table.loc["static", "logloss_low"]
    assert table.loc["drift", "auc_low"] < 0 < table.loc["drift", "auc_high"]
    assert table.loc["static", "seeds_ahead"] == 0


def test_intervals_by_hand() -> None:
    values = np.array([1.0, 2.0, 3.0, 4.0])
    # mean 2.5, sd 1.2910, t(0.975, 3) = 3.1824: half width 2.0543
    t = t_interval(values)
    assert (t.estimate, t.n) == (2.5, 4)
    assert t.low == pytest.approx(2.5 - 2.0543, abs=1e-4)
    assert t.high == pytest.approx(2.5 + 2.0543, abs=1e-4)
    single = t_interval(np.array([0.3]))
    assert single.estimate == 0.3 and np.isnan(single.low) and not single.excludes_zero()
    boot = bootstrap_interval(values, seed=1)
    assert boot == bootstrap_interval(values, seed=1)  # seeded
    assert 1.0 <= boot.low < 2.5 < boot.high <= 4.0


def test_weekly_scores_from_report_tables() -> None:
    table = pd.DataFrame(
        {
            "week": ["2013-11-04", "2013-11-11"],
            "flywheel": [0.7, 0.6],
            "flywheel_logloss": [0.5, 0.6],
        }
    )
    long = weekly_scores({("static", 0): table, ("static", 1): table, ("drift", 0): table[:0]})
    assert list(long.columns) == ["policy", "seed", "week", "auc", "logloss", "examples"]
    assert (long.examples == 1.0).all()  # a table without them weighs each week 1
    assert len(long) == 4 and set(long.seed) == {0, 1} and set(long.policy) == {"static"}


def test_alarm_lift_is_precision_over_the_cadences_base_rate_with_recall() -> None:
    from sim.judge.alarm_lift import alarm_lift

    def runs(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
        return pd.DataFrame(rows, columns=["event_day", "trigger", "gain"])

    # every-7d: 4 judged retrainings, 1 gained 0.01 or more: base rate 25%.
    weekly = runs(
        [
            ("2013-11-01", "bootstrap", np.nan),
            ("2013-11-08", "cadence", 0.0),
            ("2013-11-15", "cadence", 0.03),
            ("2013-11-22", "cadence", -0.01),
            ("2013-11-29", "cadence", 0.005),
        ]
    )
    # The alarm policy: 2 alarms judged, 1 gained: precision 50%, lift 2; it fired within the
    # week before the cadence's gain (Nov 12 <= Nov 15): recall 1.
    alarms = runs(
        [
            ("2013-11-12", "drift", 0.02),
            ("2013-11-26", "performance", 0.0),
            ("2013-11-28", "schedule", 0.5),
        ]
    )
    late = runs([("2013-11-20", "drift", 0.02)])  # fired after the gain: recall 0
    table = alarm_lift(
        {("every-7d", 0): weekly, ("flywheel", 0): alarms, ("drift", 0): late}, "every-7d", 7
    ).set_index("policy")
    assert table.loc["flywheel", "base_rate"] == pytest.approx(0.25)
    assert table.loc["flywheel", "precision"] == pytest.approx(0.5)
    assert table.loc["flywheel", "lift"] == pytest.approx(2.0)
    assert table.loc["flywheel", "recall"] == 1.0 and table.loc["drift", "recall"] == 0.0
    assert "every-7d" not in table.index
    assert alarm_lift({("flywheel", 0): alarms}, "every-7d", 7).empty  # no cadence played
    # Without the gains' standard errors, no lift clear of the judgement's noise.
    assert np.isnan(table.loc["flywheel", "lift_clear"])

    # With them: every-7d's 0.03 is clear (error 0.01), its 0.005 not (0.004): base rate 25%;
    # the alarm's 0.02 is within its error (0.015) and its 0.0 not clear: precision 0.
    weekly["gain_se"] = [np.nan, 0.01, 0.01, 0.01, 0.004]
    alarms["gain_se"] = [0.015, 0.01, 0.01]
    clear = alarm_lift({("every-7d", 0): weekly, ("flywheel", 0): alarms}, "every-7d", 7)
    row = clear.set_index("policy").loc["flywheel"]
    assert (row.base_rate_clear, row.precision_clear, row.lift_clear) == (0.25, 0.0, 0.0)
    assert row.lift == pytest.approx(2.0)  # the gains at face value, as before
