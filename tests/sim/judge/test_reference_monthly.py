"""The same-budget reference and the all-labels ceiling of a monthly task with ten ordered
classes: retrained each month on the months before it, judged by the report's macro AUC."""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pytest

from ml.config import FeatureConfig
from ml.labels import class_indices
from pipelines.task.cadence import next_start
from sim.judge.baseline_fits import BaselineFits
from sim.judge.examples import Judged
from sim.judge.reference import (
    fit_predict,
    period_end,
    production_auc,
    reference_by_period,
)

STARS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0)
FEATURES = FeatureConfig(
    categorical=("genre",), numeric=("taste", "noise"), label="rating", classes=STARS
)
FIRST = date(2000, 1, 1)
SIZES = [300, 220, 340, 260, 280, 310]  # ratings of each month


def months(count: int = len(SIZES)) -> list[date]:
    starts = [FIRST]
    while len(starts) < count:
        starts.append(next_start(starts[-1], "monthly"))
    return starts


def ratings(single_from: date | None = None) -> pd.DataFrame:
    """Ratings dated by their month's first day, as a monthly task's marts give them: the stars
    follow `taste` (and genre "drama"), cut at the same quantiles every month; from
    `single_from` on, every rating of that month is 4 stars."""
    rng = np.random.default_rng(0)
    n = sum(SIZES)
    frame = pd.DataFrame(
        {
            "rating_id": np.arange(n),
            "rating_month": np.repeat(months(), SIZES),
            "genre": rng.choice(["drama", "comedy", "horror"], size=n),
            "taste": rng.normal(size=n),
            "noise": rng.normal(size=n),
        }
    )
    latent = frame.taste + 0.5 * (frame.genre == "drama") + 0.4 * rng.normal(size=n)
    cuts = np.quantile(latent, np.linspace(0, 1, len(STARS) + 1)[1:-1])
    frame["rating"] = np.asarray(STARS)[np.searchsorted(cuts, latent)]
    if single_from is not None:
        frame.loc[frame.rating_month == single_from, "rating"] = 4.0
    return frame


def test_a_period_of_a_monthly_task_is_its_month_and_of_a_daily_one_a_week() -> None:
    assert period_end(date(2000, 1, 1), "monthly") == date(2000, 2, 1)
    assert period_end(date(2000, 2, 1), "monthly") == date(2000, 3, 1)
    assert period_end(date(2013, 1, 7), "daily") == date(2013, 1, 14)


def test_each_month_is_scored_by_models_trained_on_the_months_before_it() -> None:
    fifth = months()[4]
    frame = ratings(single_from=fifth)
    spend = pd.Series(60, index=months())
    table = reference_by_period(
        frame, spend, months(), FEATURES, "rating_month", cadence="monthly"
    ).set_index("period")

    # Nothing before the first month: no model.
    assert table.loc[FIRST, ["reference", "ceiling"]].isna().all()
    before = np.cumsum([0, *SIZES[:-1]])
    # The reference learns from 60 random ratings of each earlier month, the ceiling from all.
    assert table.reference_labels.tolist() == [60 * k for k in range(len(SIZES))]
    assert table.ceiling_labels.tolist() == before.tolist()
    # Both rank a learnable month well above chance (0.5), the ceiling at least as well.
    for month in months()[1:4] + months()[5:]:
        assert table.loc[month, "reference"] > 0.6, month
        assert table.loc[month, "ceiling"] >= table.loc[month, "reference"] - 0.02, month
    # A month whose ratings are all 4 stars has no AUC, as the report's flywheel column.
    assert table.loc[fifth, ["reference", "ceiling"]].isna().all()


def test_the_reference_is_judged_by_the_reports_production_auc() -> None:
    judged = Judged.of("movielens")
    assert judged.classes == STARS
    rng = np.random.default_rng(1)
    # A month with no 0.5 or 5 stars (skipped by the macro AUC), and one with a single value.
    y = rng.choice(STARS[1:-1], size=200)
    probs = rng.dirichlet(np.ones(len(STARS)), size=200)
    indices = class_indices(pd.Series(y), STARS)
    assert production_auc(indices, probs, STARS) == judged.auc(y, probs)
    single = np.full(50, 3.0)
    assert np.isnan(judged.auc(single, probs[:50]))
    assert np.isnan(production_auc(class_indices(pd.Series(single), STARS), probs[:50], STARS))


def test_classes_the_training_rows_never_held_get_no_probability() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(120, 1))
    y = np.where(x[:, 0] > 0, 7, 3)  # 4 and 2 stars only
    probs = fit_predict(x, y, x[:10], np.array([False]), seed=0, n_classes=len(STARS))
    assert probs.shape == (10, len(STARS))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    assert (probs[:, [c for c in range(len(STARS)) if c not in (3, 7)]] == 0).all()


@pytest.mark.parametrize("spent", [True, False])
def test_the_months_fitted_in_the_background_are_those_the_report_fits(spent: bool) -> None:
    frame = ratings()
    spend = pd.Series(60, index=months()) if spent else None
    fits = BaselineFits(FEATURES, "rating_month", cadence="monthly")
    for month in months():
        so_far = None if spend is None else spend[spend.index <= month]
        fits.add(frame[frame.rating_month == month], [month], so_far)
    fitted = fits.results()
    names = ("ceiling", "reference") if spent else ("ceiling",)
    assert sorted(fitted) == sorted((month, name) for month in months()[1:] for name in names)
    if spend is None:
        return
    own = reference_by_period(frame, spend, months(), FEATURES, "rating_month", cadence="monthly")
    planted = {key: (digest, 0.123) for key, (digest, _) in fitted.items()}
    shown = reference_by_period(
        frame, spend, months(), FEATURES, "rating_month", fitted=planted, cadence="monthly"
    )
    # Every fit made in the background has the inputs of the report's own.
    assert (shown.reference[1:] == 0.123).all() and (shown.ceiling[1:] == 0.123).all()
    for (month, name), (_, auc) in fitted.items():
        assert own.set_index("period").loc[month, name] == auc
