"""A feature that tracks time is flagged: a running count, kept for the whole task or per segment;
a seasonal feature, a calendar step, noise, and any feature over too few partitions are not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ml import time_tracking as tt
from ml.time_tracking import TimeTrend, time_tracking_features, time_trend, time_trends

DAYS = 120
ROWS_PER_DAY = 40


def daily_frame(days: int = DAYS, seed: int = 0) -> pd.DataFrame:
    """`ROWS_PER_DAY` labelled rows a day from 2013-01-01: a carrier each, a seasonal temperature
    (rising with the spring, its days scattered about the season as weather's are), the month,
    noise, and planted counts: labels known before the day, and each carrier's labels so far."""
    rng = np.random.default_rng(seed)
    day = np.repeat(pd.date_range("2013-01-01", periods=days, freq="D"), ROWS_PER_DAY)
    index = np.repeat(np.arange(days), ROWS_PER_DAY)
    season = 35 + 40 * (1 - np.cos(np.pi * index / 181)) / 2
    frame = pd.DataFrame(
        {
            "flight_date": day.date,
            "carrier": rng.choice(list("ABCDEFGH"), size=day.size, p=[0.3] + [0.1] * 7),
            "temp": season + np.repeat(rng.normal(0, 7, days), ROWS_PER_DAY),
            "scheduled_month": pd.DatetimeIndex(day).month.astype(float),
            "noise": rng.normal(size=day.size),
        }
    )
    frame["running_labelled_count"] = (index * ROWS_PER_DAY).astype(float)
    frame["carrier_running_count"] = frame.groupby("carrier").cumcount().astype(float)
    return frame


FEATURES = ["temp", "scheduled_month", "noise", "running_labelled_count", "carrier_running_count"]


def test_running_counts_are_flagged_and_the_season_the_month_and_noise_are_not() -> None:
    flagged = time_tracking_features(daily_frame(), FEATURES, "flight_date")

    assert [t.feature for t in flagged] == ["running_labelled_count", "carrier_running_count"]
    total, per_carrier = flagged
    assert total.rank_correlation == pytest.approx(1.0) and total.step_share == 1.0
    assert per_carrier.rank_correlation >= tt.MIN_RANK_CORRELATION
    assert total.partitions == DAYS and total.span_days == DAYS
    assert total.describe().startswith("running_labelled_count rises with time over 120 ")


def test_the_figures_of_the_features_left_alone_say_why() -> None:
    trends = {t.feature: t for t in time_trends(daily_frame(), FEATURES, "flight_date")}

    # The month ranks in order with the days but moves at one step in thirty.
    month = trends["scheduled_month"]
    assert month.rank_correlation > tt.MIN_RANK_CORRELATION
    assert month.step_share < 0.05
    # The season trends, but its days turn back about as often as they go on.
    assert trends["temp"].rank_correlation < tt.MIN_RANK_CORRELATION
    assert trends["temp"].step_share < tt.MIN_STEP_SHARE
    assert abs(trends["noise"].rank_correlation) < 0.5


def test_a_count_that_falls_with_time_is_flagged_too() -> None:
    frame = daily_frame()
    frame["days_to_go"] = 1000.0 - frame["running_labelled_count"]

    [flagged] = time_tracking_features(frame, ["days_to_go", "temp"], "flight_date")

    assert flagged.rank_correlation == pytest.approx(-1.0)
    assert "days_to_go falls with time" in flagged.describe()


@pytest.mark.parametrize(
    "days, freq", [(tt.MIN_PARTITIONS - 1, "MS"), (tt.MIN_SPAN_DAYS - 1, "D")], ids=str
)
def test_too_few_partitions_or_too_short_a_span_flags_nothing(days: int, freq: str) -> None:
    count = np.arange(days, dtype=np.float64)
    frame = pd.DataFrame({"month": pd.date_range("2000-01-01", periods=days, freq=freq)})
    frame["count"] = count

    [trend] = time_trends(frame, ["count"], "month")

    assert trend.rank_correlation == pytest.approx(1.0) and not trend.tracks_time
    longer = pd.DataFrame({"month": pd.date_range("2000-01-01", periods=days + 1, freq=freq)})
    longer["count"] = np.arange(days + 1, dtype=np.float64)
    assert [t.feature for t in time_tracking_features(longer, ["count"], "month")] == ["count"]


def test_a_trend_by_hand() -> None:
    # Ranks 1, 2, 4, 3, 5: the third and fourth partitions swapped; three steps of four go up.
    means = pd.Series(
        [1.0, 2.0, 3.0, 2.5, 5.0], index=pd.date_range("2013-01-01", periods=5, freq="D")
    )
    trend = time_trend("x", means)
    # Spearman: 1 - 6 * sum(d^2) / (n (n^2 - 1)) with d = (0, 0, 1, -1, 0).
    assert trend.rank_correlation == pytest.approx(1 - 6 * 2 / (5 * 24))
    assert trend.step_share == pytest.approx(3 / 4)
    assert trend.span_days == 5 and trend.partitions == 5


def test_a_constant_a_missing_feature_and_one_partition_have_no_trend() -> None:
    frame = daily_frame(days=3)
    frame["constant"] = 7.0
    frame["missing"] = np.nan
    trends = {t.feature: t for t in time_trends(frame, ["constant", "missing"], "flight_date")}
    assert trends["constant"] == TimeTrend("constant", 3, 3, 0.0, 0.0)
    assert trends["missing"] == TimeTrend("missing", 0, 0, 0.0, 0.0)
    one_day = frame[frame.flight_date == frame.flight_date.iloc[0]]
    assert time_tracking_features(one_day, FEATURES, "flight_date") == []


def test_the_partition_means_leave_missing_values_out() -> None:
    frame = pd.DataFrame(
        {"day": ["2013-01-02", "2013-01-01", "2013-01-01"], "x": [4.0, 1.0, np.nan]}
    )
    means = tt.partition_means(frame, ["x"], "day")
    assert means["x"].tolist() == [1.0, 4.0]
    assert list(means.index) == list(pd.to_datetime(["2013-01-01", "2013-01-02"]))


def test_the_figures_travel_as_plain_values() -> None:
    trend = TimeTrend("count", 30, 90, 0.98765, 0.91234)
    assert trend.as_dict() == {
        "feature": "count",
        "partitions": 30,
        "span_days": 90,
        "rank_correlation": 0.988,
        "step_share": 0.912,
    }
