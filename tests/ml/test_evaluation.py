"""Slices, paired bootstrap intervals and the evaluation table, checked against direct sums."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ml.evaluation import (
    BootstrapResult,
    bands,
    evaluate_models,
    paired_bootstrap,
    slice_metrics,
)
from ml.metrics import auroc, brier, logloss


def scored(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels, a stronger model's and a weaker model's probabilities."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(float)
    strong = 1 / (1 + np.exp(-(2.0 * y - 1 + rng.normal(0, 1.0, n))))
    weak = 1 / (1 + np.exp(-(1.0 * y - 0.5 + rng.normal(0, 1.0, n))))
    return y, strong, weak


DAY = {"night": (0, 6), "morning": (6, 12), "afternoon": (12, 18), "evening": (18, 24)}


def day_band(frame: pd.DataFrame) -> np.ndarray:
    return bands(frame["hour"], DAY)


def test_bands_are_half_open_and_name_what_they_miss() -> None:
    hours = [0, 5, 5.5, 6, 11, 12, 17, 18, 23, 23.9, np.nan, 24, -1]
    assert bands(hours, DAY).tolist() == [
        *["night"] * 3,
        *["morning"] * 2,
        *["afternoon"] * 2,
        *["evening"] * 3,
        "missing",
        *["other"] * 2,
    ]


def test_slice_metrics_by_hand() -> None:
    frame = pd.DataFrame(
        {
            "y": [0, 1, 0, 1, 1, 1],
            "group": ["A", "A", "A", "A", "B", "B"],
            "hour": [1, 7, 7, 13, 20, 20],
        }
    )
    p = np.array([0.1, 0.9, 0.2, 0.8, 0.6, 0.7])
    out = slice_metrics(frame, "y", {"m": p}, {"group": "group", "band": day_band})
    assert out.columns.tolist() == ["slice", "value", "n", "positives", "model", "auroc", "logloss"]
    rows = out.set_index(["slice", "value"])
    a, b = rows.loc[("group", "A")], rows.loc[("group", "B")]
    assert (a.n, a.positives, a.auroc) == (4, 2, 1.0)
    assert a.logloss == pytest.approx(-(2 * math.log(0.9) + 2 * math.log(0.8)) / 4)
    # Slice B holds only positives: no AUROC, but log loss is defined.
    assert (b.n, b.positives) == (2, 2) and math.isnan(b.auroc)
    assert b.logloss == pytest.approx(-(math.log(0.6) + math.log(0.7)) / 2)
    assert rows.loc[("band", "morning")].n == 2 and rows.loc[("band", "evening")].positives == 2


def test_slice_metrics_one_row_per_value_and_model() -> None:
    y, strong, weak = scored(300)
    frame = pd.DataFrame({"y": y, "g": np.arange(300) % 3})
    out = slice_metrics(frame, "y", {"strong": strong, "weak": weak}, {"g": "g"})
    assert len(out) == 3 * 2 and out.n.sum() == 2 * 300
    with pytest.raises(ValueError, match="one value per row"):
        slice_metrics(frame, "y", {"short": strong[:10]}, {"g": "g"})


@pytest.mark.parametrize("metric", ["auroc", "logloss", "brier"])
def test_interval_contains_the_estimate_and_narrows_with_n(metric: str) -> None:
    functions = {"auroc": auroc, "logloss": logloss, "brier": brier}
    widths = []
    for n in (400, 4000):
        y, strong, weak = scored(n, seed=n)
        result = paired_bootstrap(y, strong, weak, metric, n_boot=500, seed=1)
        assert result.estimate == pytest.approx(
            functions[metric](y, strong) - functions[metric](y, weak), abs=1e-12
        )
        assert result.low < result.estimate < result.high
        assert (result.metric, result.n_boot, result.confidence) == (metric, 500, 0.95)
        widths.append(result.high - result.low)
    # The width shrinks like 1/sqrt(n): ten times the rows, about a third of the width.
    assert widths[1] < 0.5 * widths[0]


@pytest.mark.parametrize("metric", ["auroc", "logloss", "brier"])
def test_identical_predictions_give_a_zero_width_interval(metric: str) -> None:
    y, strong, _ = scored(500)
    result = paired_bootstrap(y, strong, strong.copy(), metric, n_boot=200)
    assert result == BootstrapResult(metric, 0.0, 0.0, 0.0, 200, 0.95)


def test_bootstrap_auroc_matches_resampling_row_by_row() -> None:
    y, strong, weak = scored(200, seed=3)
    result = paired_bootstrap(y, strong, weak, "auroc", n_boot=300, seed=7, confidence=0.9)
    # The same draws, each resample's AUROC computed directly from the resampled rows.
    idx = np.random.default_rng(7).integers(0, 200, size=(300, 200))
    diffs = [auroc(y[i], strong[i]) - auroc(y[i], weak[i]) for i in idx]
    assert (result.low, result.high) == pytest.approx(tuple(np.quantile(diffs, [0.05, 0.95])))


def test_single_class_resamples_are_skipped_for_auroc() -> None:
    y = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    p = np.linspace(0.1, 0.6, 6)
    result = paired_bootstrap(y, p, p[::-1], "auroc", n_boot=400, seed=0)
    # A resample misses the only positive with probability (5/6)^6, about a third of the time.
    assert 200 < result.n_boot < 330
    # Every resample that keeps the positive ranks it first for one model and last for the other.
    assert (result.estimate, result.low, result.high) == (1.0, 1.0, 1.0)


def test_bootstrap_rejects_bad_arguments() -> None:
    y, strong, weak = scored(50)
    with pytest.raises(ValueError, match="metric"):
        paired_bootstrap(y, strong, weak, "accuracy")
    with pytest.raises(ValueError, match="lengths"):
        paired_bootstrap(y, strong, weak[:10], "logloss")


def test_evaluate_models_puts_the_pieces_together() -> None:
    y, strong, weak = scored(1000)
    frame = pd.DataFrame({"is_late": y.astype(bool), "hour": np.arange(1000) % 24})
    predictions = {"challenger": strong, "champion": weak}
    slices = {"hour_band": day_band}
    result = evaluate_models(frame, "is_late", predictions, slices, "challenger", "champion", 200)
    assert result.overall.columns.tolist() == ["model", "n", "auroc", "logloss", "brier", "ece"]
    overall = result.overall.set_index("model")
    assert overall.loc["challenger", "auroc"] == auroc(y, strong)
    assert overall.loc["champion", "n"] == 1000
    assert set(result.slices.value) == {"night", "morning", "afternoon", "evening"}
    assert set(result.comparison) == {"auroc", "logloss"}
    assert result.comparison["auroc"].estimate == pytest.approx(auroc(y, strong) - auroc(y, weak))
    assert result.comparison["logloss"].high < 0  # the challenger's log loss is clearly lower

    alone = evaluate_models(frame, "is_late", predictions, slices, "challenger", None)
    assert alone.comparison == {}
    with pytest.raises(ValueError, match="'nobody'"):
        evaluate_models(frame, "is_late", predictions, slices, "challenger", "nobody")
