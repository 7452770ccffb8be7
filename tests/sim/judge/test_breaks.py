"""A planted break judged over plays: detection delay, false alarms before it, and the model
promoted after it against its champion (sim.judge.breaks), on planted plays; and the feed's
humidity check over the replayed year."""

from __future__ import annotations

import math
from datetime import date

import numpy as np
import pandas as pd
import pytest

from sim.judge.breaks import break_summary, describe_year, feed_checks_over_the_year, play_break
from sim.judge.policies import Play

BREAK, PRODUCTION = date(2013, 11, 15), date(2013, 10, 31)


def planted_play(seed: int, checks: list[tuple[str, str]], runs: list[tuple], policy="p") -> Play:
    """A play whose checks failed on `checks` (day, check) and whose retrainings are `runs`
    (event day, trigger, decision, gain)."""
    retrainings = pd.DataFrame(
        [("2013-10-30", "bootstrap", "promoted", np.nan), *runs],
        columns=["event_day", "trigger", "decision", "gain"],
    )
    failed = pd.DataFrame(
        [(day, "flights/raw_weather", check, 0.0) for day, check in checks],
        columns=["day", "asset", "check", "at"],
    )
    return Play(policy, seed, pd.DataFrame(), retrainings, pd.DataFrame(), 0.0, checks=failed)


def test_a_play_caught_on_the_breaks_day_names_the_check_its_alarms_and_the_promotion():
    play = planted_play(
        0,
        [("2013-11-05", "volume"), ("2013-11-15", "humidity"), ("2013-11-16", "humidity")],
        [
            ("2013-11-07", "drift", "rejected", 0.004),
            ("2013-11-17", "drift", "rejected", -0.01),
            ("2013-11-21", "schedule", "promoted", 0.02),
            ("2013-11-28", "drift", "promoted", 0.05),
        ],
    )
    row = play_break(play, BREAK, PRODUCTION)
    assert row["check_delay_days"] == 0 and row["check"] == "flights/raw_weather:humidity"
    assert row["false_check_days"] == 1  # the volume check's day before the break
    assert row["alarm_delay_days"] == 2 and row["alarms_before"] == 1
    assert row["days_before"] == 15
    # The first promotion on or after the break, whatever asked for it.
    assert (row["promoted_trigger"], row["promoted_gain"]) == ("schedule", 0.02)
    assert str(row["promoted_day"]) == "2013-11-21"


def test_a_play_that_never_caught_it_nor_promoted_after_it_says_so():
    play = planted_play(0, [("2013-11-01", "volume")], [("2013-11-03", "drift", "promoted", 0.1)])
    row = play_break(play, BREAK, PRODUCTION)
    assert math.isnan(row["check_delay_days"]) and row["check"] == ""
    assert math.isnan(row["alarm_delay_days"]) and row["alarms_before"] == 1
    assert row["promoted_day"] is None and math.isnan(row["promoted_gain"])


def test_over_seeds_the_worst_delay_the_days_per_false_alarm_and_the_gains_interval():
    gains = [0.02, 0.03, -0.005]
    plays = [
        planted_play(
            seed,
            [("2013-11-15" if seed else "2013-11-17", "humidity")],
            [("2013-11-05", "drift", "rejected", 0.0), ("2013-11-18", "drift", "promoted", g)],
        )
        for seed, g in enumerate(gains)
    ]
    plays.append(planted_play(0, [], [], policy="q"))
    table = break_summary(plays, BREAK, PRODUCTION).set_index("policy")
    p, q = table.loc["p"], table.loc["q"]
    assert (p.plays, p.caught, p.worst_check_delay_days) == (3, 2, 2)
    assert (p.false_alarms, p.days_per_false_alarm) == (3, 15.0)
    assert p.promoted == 3 and p.not_worse == 2
    assert p.promoted_gain == pytest.approx(np.mean(gains))
    assert p.gain_low < p.promoted_gain < p.gain_high
    # A policy that never alarmed before the break: no false alarm in its days.
    assert q.false_alarms == 0 and q.days_per_false_alarm == math.inf and q.caught == 0
    assert q.promoted == 0 and math.isnan(q.promoted_gain)


def test_the_humidity_check_never_fails_an_ordinary_day_and_catches_celsius_on_any_day():
    year = feed_checks_over_the_year("flights", "celsius")
    assert len(year) == 365 and set(year.feed) == {"weather"}
    assert year.ordinary_passed.all()
    readable = year[year.readings > 0]
    assert len(readable) == 364 and not readable.drifted_passed.any()
    said = describe_year(year)
    assert "failed on 0 ordinary days (none in the year)" in said
    assert "caught the planted break on 100.0% of the 364 days" in said


def test_a_break_the_checked_feeds_never_show_is_out_of_the_checks_sight():
    days = pd.date_range("2013-01-01", periods=3).date
    year = pd.DataFrame(
        {
            "day": days,
            "feed": "weather",
            "readings": [24, 24, 0],
            "ordinary_passed": [True, False, True],
            "drifted_passed": [True, False, True],
            "drifted_changed": False,
        }
    )
    said = describe_year(year)
    assert "failed on 1 ordinary days (a false alarm every 3 days)" in said
    assert "leaves the feeds it reads as they are: out of its sight" in said
    assert "caught" not in said
    year.loc[0, "drifted_changed"] = True
    assert "caught the planted break on 50.0% of the 2 days" in describe_year(year)
