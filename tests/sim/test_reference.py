"""The same-budget reference and the all-labels ceiling, on flights whose outcomes are known."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from sim.reference import reference_sample, weekly_reference

FEATURES = FeatureConfig(categorical=("carrier",), numeric=("x", "noise"), label="is_late")
START = date(2013, 1, 7)  # a Monday


def flights(weeks: int = 3, per_day: int = 120, flip_from: date | None = None) -> pd.DataFrame:
    """Flights whose lateness follows `x` (and carrier "BB"); from `flip_from` on it follows
    minus `x`, so a model that saw those days would rank them the other way round."""
    rng = np.random.default_rng(0)
    days = [START + timedelta(days=d) for d in range(7 * weeks)]
    frame = pd.DataFrame(
        {
            "flight_id": [f"{d}_{i}" for d in days for i in range(per_day)],
            "flight_date": np.repeat(days, per_day),
            "carrier": rng.choice(["AA", "BB", "CC"], size=len(days) * per_day),
            "x": rng.normal(size=len(days) * per_day),
            "noise": rng.normal(size=len(days) * per_day),
        }
    )
    sign = np.where(
        (frame.flight_date >= flip_from) if flip_from else np.zeros(len(frame), bool), -1, 1
    )
    signal = sign * frame.x + 0.5 * (frame.carrier == "BB") + 0.3 * rng.normal(size=len(frame))
    frame["is_late"] = signal > 0.3
    return frame


def test_the_sample_spends_each_days_budget_and_a_day_draws_the_same_flights() -> None:
    frame = flights(weeks=1, per_day=50)
    days = sorted(frame.flight_date.unique())
    spend = pd.Series([10, 0, 60, 5, 5, 5, 5], index=days)
    sample = reference_sample(frame, spend, "flight_date", seed=3)
    counts = sample.groupby("flight_date").size()
    # The budget of each day, all of a day's 50 flights where it asks for more, none for 0.
    assert counts.to_dict() == {days[0]: 10, days[2]: 50, **{d: 5 for d in days[3:]}}
    assert sample.flight_id.is_unique
    # A day's draw does not depend on the other days' budgets.
    other = reference_sample(frame, spend.where(spend.index != days[0], 30), "flight_date", seed=3)
    assert set(other[other.flight_date == days[3]].flight_id) == set(
        sample[sample.flight_date == days[3]].flight_id
    )
    assert set(reference_sample(frame, spend, "flight_date", seed=4).flight_id) != set(
        sample.flight_id
    )


def test_each_week_is_scored_by_models_trained_on_the_days_before_it_only() -> None:
    # From the third week on lateness follows minus x: a model that saw any of its flights
    # would not rank them upside down.
    third = START + timedelta(days=14)
    frame = flights(weeks=3, flip_from=third)
    spend = pd.Series(30, index=sorted(frame.flight_date.unique()))
    weekly = weekly_reference(frame, spend, [START, START + timedelta(days=7), third], FEATURES)

    first, second, flipped = weekly.to_dict("records")
    # Nothing before the first Monday: no model that week.
    assert np.isnan(first["reference"]) and np.isnan(first["ceiling"])
    assert (first["reference_labels"], first["ceiling_labels"]) == (0, 0)
    # The second week: trained on the first week's 7 x 30 sampled flights (reference) and on
    # all its 7 x 120 (ceiling); both rank the second week's flights well, the ceiling better.
    assert (second["reference_labels"], second["ceiling_labels"]) == (210, 840)
    assert second["reference"] > 0.75 and second["ceiling"] >= second["reference"] - 0.01
    # The flipped week is ranked upside down by both: neither saw a flight of it.
    assert flipped["reference"] < 0.3 and flipped["ceiling"] < 0.3
    assert (flipped["reference_labels"], flipped["ceiling_labels"]) == (420, 1680)


def test_unseen_categories_and_missing_values_are_scored() -> None:
    frame = flights(weeks=2)
    second = frame.flight_date >= START + timedelta(days=7)
    frame.loc[second, "carrier"] = frame.loc[second, "carrier"].replace("CC", "ZZ")
    frame.loc[frame.index[::7], "x"] = np.nan
    spend = pd.Series(40, index=sorted(frame.flight_date.unique()))
    weekly = weekly_reference(frame, spend, [START + timedelta(days=7)], FEATURES)
    assert weekly.reference.iloc[0] > 0.7 and weekly.reference_labels.iloc[0] == 7 * 40


def test_a_feature_missing_in_every_training_row_is_left_out() -> None:
    # The first week has no `noise` at all (a feed that did not deliver it yet), nor a carrier.
    frame = flights(weeks=2)
    first = frame.flight_date < START + timedelta(days=7)
    frame.loc[first, "noise"] = np.nan
    frame.loc[first, "carrier"] = None
    spend = pd.Series(40, index=sorted(frame.flight_date.unique()))
    weekly = weekly_reference(frame, spend, [START + timedelta(days=7)], FEATURES)
    assert weekly.reference.iloc[0] > 0.7 and weekly.ceiling.iloc[0] > 0.7
