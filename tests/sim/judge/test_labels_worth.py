"""The flywheel's labels' worth: the reference's learning curve at multiples of its budget."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ml.config import FeatureConfig
from pipelines.task import load_task
from sim.judge.comparisons import labels_worth
from sim.judge.label_features import COLUMNS as LABEL_COLUMNS
from sim.judge.label_features import late_rate_features
from sim.judge.labels_worth import column, worth_by_period, worth_in_labels
from sim.judge.reference import PlayedExamples, reference_sample


def test_the_worth_is_read_on_the_learning_curve_in_log2_of_the_labels() -> None:
    curve = {0.5: 0.60, 1.0: 0.62, 2.0: 0.64, 4.0: 0.66}
    assert worth_in_labels(0.62, curve) == pytest.approx(1.0)
    assert worth_in_labels(0.65, curve) == pytest.approx(2**1.5)  # halfway from 2x to 4x
    assert worth_in_labels(0.70, curve) == 4.0  # at least the largest multiple
    assert worth_in_labels(0.50, curve) == 0.5  # at most the smallest
    assert math.isnan(worth_in_labels(0.6, {1.0: math.nan}))


def test_the_task_s_label_features_are_those_computed_from_labels_here() -> None:
    spec = load_task("flights").model
    assert set(spec.label_features) == set(LABEL_COLUMNS)
    assert set(LABEL_COLUMNS) <= set(spec.features.numeric)


def rated(days: int = 35, per_day: int = 60, seed: int = 0) -> pd.DataFrame:
    """Flights whose lateness follows their route; their label features as the flywheel's
    warehouse left them: computed from labels no reference has (planted at 0.99)."""
    rng = np.random.default_rng(seed)
    n = days * per_day
    route = rng.choice(["EWR-ORD", "JFK-LAX", "LGA-ATL"], n)
    x = rng.normal(size=n)
    logit = x + np.select([route == "EWR-ORD", route == "JFK-LAX"], [1.0, -1.0], 0.0) - 1.0
    frame = pd.DataFrame(
        {
            "id": np.arange(n),
            "day": np.repeat(pd.date_range("2013-10-07", periods=days).date, per_day),
            "route": route,
            "carrier": rng.choice(["AA", "UA"], n),
            "origin": [r[:3] for r in route],
            "scheduled_hour": rng.integers(6, 10, n),
            "x": x,
            "late": rng.random(n) < 1 / (1 + np.exp(-logit)),
        }
    )
    return frame.assign(**{c: 0.99 for c in LABEL_COLUMNS})


def test_each_reference_computes_the_label_features_from_its_own_labels(monkeypatch) -> None:
    import sim.judge.labels_worth as labels_worth_module

    seen = []

    class Recording(PlayedExamples):
        def __init__(self, examples, *args, **kwargs) -> None:
            seen.append(examples)
            super().__init__(examples, *args, **kwargs)

    monkeypatch.setattr(labels_worth_module, "PlayedExamples", Recording)
    examples = rated()
    features = FeatureConfig(
        categorical=("route",),
        numeric=("x", *LABEL_COLUMNS),
        label="late",
        id_columns=("id", "day"),
    )
    spend = pd.Series(10, index=sorted(set(examples.day)))
    weeks = list(pd.date_range("2013-10-21", periods=3, freq="7D"))
    table = worth_by_period(
        examples,
        spend,
        weeks,
        features,
        "day",
        multiples=(1.0, 2.0),
        jobs=1,
        label_features=tuple(LABEL_COLUMNS),
    )
    assert list(table.columns) == ["week", column(1), column(2), "ceiling"]
    assert table.drop(columns="week").notna().all().all()
    pools = {
        column(m): reference_sample(examples, spend * m, "day").index.to_numpy() for m in (1, 2)
    }
    pools["ceiling"] = np.arange(len(examples))
    assert len(seen) == 3
    for own, pool in zip(seen, pools.values(), strict=True):
        known = pd.to_datetime(examples.day.iloc[pool]) + pd.Timedelta(days=1)
        late = examples.late.iloc[pool].to_numpy(dtype=float)
        expected = late_rate_features(examples, pool, late, known, "day")
        pd.testing.assert_frame_equal(own[list(LABEL_COLUMNS)], expected[list(LABEL_COLUMNS)])
        assert (own.route_late_rate.dropna() < 0.99).any()  # not the flywheel's
    # More labels, more flights counted.
    assert seen[1].route_labelled_count.sum() > seen[0].route_labelled_count.sum()


def test_a_label_feature_that_cannot_be_computed_here_is_named() -> None:
    examples = rated(days=7)
    features = FeatureConfig(categorical=(), numeric=("x",), label="late", id_columns=("id",))
    with pytest.raises(ValueError, match="'x'"):
        worth_by_period(
            examples,
            pd.Series(5, index=sorted(set(examples.day))),
            [],
            features,
            "day",
            label_features=("x",),
        )


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
