"""The flywheel's labels' worth: the reference's learning curve at multiples of its budget."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ml.config import FeatureConfig
from pipelines.task import load_task
from sim.judge.labels_worth import column, without, worth_by_period, worth_in_labels
from sim.judge.policies import labels_worth


def test_the_worth_is_read_on_the_learning_curve_in_log2_of_the_labels() -> None:
    curve = {0.5: 0.60, 1.0: 0.62, 2.0: 0.64, 4.0: 0.66}
    assert worth_in_labels(0.62, curve) == pytest.approx(1.0)
    assert worth_in_labels(0.65, curve) == pytest.approx(2**1.5)  # halfway from 2x to 4x
    assert worth_in_labels(0.70, curve) == 4.0  # at least the largest multiple
    assert worth_in_labels(0.50, curve) == 0.5  # at most the smallest
    assert math.isnan(worth_in_labels(0.6, {1.0: math.nan}))


def test_the_references_leave_out_the_features_computed_from_the_flywheels_labels() -> None:
    spec = load_task("flights").model
    assert "route_late_rate" in spec.label_features
    kept = without(spec.features, spec.label_features)
    assert not set(spec.label_features) & {*kept.numeric, *kept.categorical}
    assert "distance" in kept.numeric and "carrier" in kept.categorical


def planted(days: int = 42, per_day: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = days * per_day
    x = rng.normal(size=(n, 4))
    logit = x @ np.array([1.0, -0.8, 0.6, 0.4]) + 0.5 * np.sin(3 * x[:, 0]) - 1.0
    y = rng.random(n) < 1 / (1 + np.exp(-logit))
    day = np.repeat(pd.date_range("2013-10-07", periods=days).date, per_day)
    frame = pd.DataFrame(x, columns=["a", "b", "c", "d"])
    return frame.assign(id=np.arange(n), day=day, late=y)


def test_more_random_labels_learn_more_and_the_ceiling_most() -> None:
    examples = planted()
    features = FeatureConfig(
        categorical=(), numeric=("a", "b", "c", "d"), label="late", id_columns=("id", "day")
    )
    spend = pd.Series(8, index=sorted(set(examples.day)))  # 8 labels a day
    weeks = list(pd.date_range("2013-10-21", periods=4, freq="7D"))
    table = worth_by_period(examples, spend, weeks, features, "day", jobs=1)
    assert list(table.columns) == ["week", *(column(m) for m in (0.5, 1, 2, 4)), "ceiling"]
    means = table.drop(columns="week").mean()
    assert means[column(4)] > means[column(0.5)] + 0.01, means
    assert means.ceiling >= means[column(4)] - 0.005, means


def test_the_report_reads_the_worth_over_seeds_with_paired_intervals() -> None:
    weeks = pd.date_range("2013-11-04", periods=6, freq="7D")
    rng = np.random.default_rng(3)
    tables = {}
    for seed in range(3):
        base = 0.62 + rng.normal(0, 0.01, len(weeks))
        tables[seed] = pd.DataFrame(
            {
                "week": weeks,
                "flywheel": base + 0.02,  # as good as twice its labels at random
                column(0.5): base - 0.02,
                column(1): base,
                column(2): base + 0.02,
                column(4): base + 0.04,
                "ceiling": base + 0.06,
            }
        )
    text, table = labels_worth(tables)
    assert "worth 2.00 times its labels" in text and "closes 33%" in text
    row = table.set_index("labels").loc["1x the flywheel's"]
    assert row.flywheel_minus == pytest.approx(0.02) and row.low == pytest.approx(0.02)
    at_two = table.set_index("labels").loc["2x the flywheel's"]
    assert at_two.flywheel_minus == pytest.approx(0.0, abs=1e-12)
