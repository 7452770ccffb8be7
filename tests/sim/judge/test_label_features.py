"""The features computed from labels, as the warehouse's dbt models define them."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest

from sim.judge.label_features import COLUMNS, late_rate_features


def flights(days: list[date]) -> pd.DataFrame:
    """One EWR-ORD flight of carrier AA at 8 each day."""
    return pd.DataFrame(
        {
            "flight_id": [f"{d}_AA1_EWR" for d in days],
            "flight_date": days,
            "carrier": "AA",
            "origin": "EWR",
            "route": "EWR-ORD",
            "scheduled_hour": 8,
        }
    )


def test_a_window_counts_the_labels_known_in_the_days_before_the_flight_day() -> None:
    # The planted table of the dbt unit test segment_days_count_only_labels_known_before_the_day
    # (int_flight_labels_rolled_to_segment_days.yml), with its hand-computed rates.
    days = [date(2013, 1, 1), date(2013, 1, 2)] + [date(2013, 1, d) for d in range(4, 10)]
    examples = flights(days)
    known = pd.to_datetime(["2013-01-05 00:00:00", "2013-01-04 23:59:59"])
    out = late_rate_features(examples, np.array([0, 1]), np.array([1, 0]), known, "flight_date", 3)
    rated = out.iloc[2:]
    expected_counts = [0, 1, 2, 2, 1, 0]
    expected_rates = [np.nan, 0.0, 0.5, 0.5, 1.0, np.nan]
    for segment in ("route", "carrier", "origin_hour"):
        assert rated[f"{segment}_labelled_count"].tolist() == expected_counts, segment
        np.testing.assert_array_equal(rated[f"{segment}_late_rate"], expected_rates)
    assert set(COLUMNS) <= set(out.columns)


def test_the_default_window_is_28_days() -> None:
    # As the dbt unit test segment_days_use_the_default_window: a label known on Jan 1 counts
    # on Jan 29 and no longer on Jan 30.
    days = [date(2013, 1, 1)] + [date(2013, 1, 1) + timedelta(n) for n in range(1, 30)]
    examples = flights(days)
    known = pd.to_datetime(["2013-01-01 23:00:00"])
    out = late_rate_features(examples, np.array([0]), np.array([1]), known, "flight_date")
    counts = out.route_labelled_count.tolist()
    assert counts == [0] + [1] * 28 + [0]
    assert out.loc[28, "route_late_rate"] == 1.0 and np.isnan(out.loc[29, "route_late_rate"])


def test_no_label_known_on_or_after_the_day_counts() -> None:
    rng = np.random.default_rng(0)
    days = [date(2013, 3, 1) + timedelta(int(d)) for d in rng.integers(0, 40, 400)]
    examples = flights(days).assign(
        carrier=rng.choice(["AA", "UA", "B6"], 400),
        route=rng.choice(["EWR-ORD", "JFK-LAX"], 400),
        scheduled_hour=rng.integers(6, 9, 400),
    )
    labelled = rng.choice(400, 200, replace=False)
    late = rng.integers(0, 2, 200)
    known = pd.to_datetime(pd.Series(days).iloc[labelled]) + pd.Timedelta(days=1, hours=10)
    out = late_rate_features(examples, labelled, late, known.to_numpy(), "flight_date")
    # Flipping every label known on or after a day leaves that day's features as they were.
    cut = pd.Timestamp(date(2013, 3, 20))
    flipped = np.where(known.to_numpy() >= cut.to_datetime64(), 1 - late, late)
    again = late_rate_features(examples, labelled, flipped, known.to_numpy(), "flight_date")
    before = pd.to_datetime(examples.flight_date) <= cut
    pd.testing.assert_frame_equal(out[before], again[before])
    assert not out[~before].equals(again[~before])  # the flips show after the day


def test_a_segment_with_a_missing_part_gets_no_rate() -> None:
    examples = flights([date(2013, 1, 1), date(2013, 1, 3)]).astype({"scheduled_hour": "Int64"})
    examples.loc[1, "scheduled_hour"] = pd.NA
    known = pd.to_datetime(["2013-01-02 10:00"])
    out = late_rate_features(examples, np.array([0]), np.array([1]), known, "flight_date")
    assert out.loc[1, "route_labelled_count"] == 1
    assert out.loc[1, "origin_hour_labelled_count"] == 0
    assert np.isnan(out.loc[1, "origin_hour_late_rate"])


def test_labels_and_their_dates_must_match_in_number() -> None:
    with pytest.raises(ValueError, match="2 labelled rows, 1 outcomes"):
        late_rate_features(
            flights([date(2013, 1, 1)]), np.array([0, 0]), np.array([1]), [], "flight_date"
        )
