"""The served probability moved to the recent prior (pipelines/monitoring/recalibration.py), on
planted scores: a doubled late rate is corrected from the uniform labels known before each day."""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pytest

from ml.calibration import shift
from ml.metrics import expected_calibration_error, logloss
from pipelines.monitoring.recalibration import DELIVERED, OUTCOME, recalibrate, window_of
from pipelines.task.thresholds import MonitoringSpec


def test_a_planted_prior_shift_is_corrected_from_the_labels_known_before_each_day() -> None:
    """A model calibrated where 13% were late scores days where the late rate is twice that: by
    Bayes' rule, outcomes follow the model's likelihood ratios under the new prior. The uniform
    labels of the days before correct the scores; a day before enough labels came is kept."""
    rng = np.random.default_rng(2)
    days = pd.date_range("2013-12-02", periods=28, freq="D")
    n = 2_000
    logits = rng.normal(np.log(0.13 / 0.87) - 0.3, 1.0, n * len(days))
    p = 1 / (1 + np.exp(-logits))
    truth = shift(p, 1.05)  # the world's probability of each flight: the late rate doubled
    y = (rng.random(len(p)) < truth).astype(np.float64)
    day = pd.Series(np.repeat(days, n))
    flights = pd.DataFrame({"day": day, "x": p, "y": y})
    # A uniform sample of 10% of each day's flights, its labels back the next day.
    labelled = flights.sample(frac=0.1, random_state=0)
    labelled = labelled.assign(
        **{OUTCOME: labelled.y, DELIVERED: (labelled.day + pd.Timedelta(days=1)).dt.date}
    )

    def score(frame: pd.DataFrame) -> np.ndarray:
        return frame.x.to_numpy()

    corrected, shifts = recalibrate(day, p, labelled, score, 14, 100)
    first = (day == days[0]).to_numpy()
    np.testing.assert_array_equal(corrected[first], p[first])  # no label known yet
    assert shifts[days[0].date().isoformat()] == (0.0, 0)
    # Day 0's labels came back on day 1: they move day 2's scores, not day 1's.
    assert shifts[days[1].date().isoformat()] == (0.0, 0)
    assert shifts[days[2].date().isoformat()][1] == (labelled.day == days[0]).sum()
    assert shifts[days[20].date().isoformat()][0] == pytest.approx(1.05, abs=0.1)
    later = (day >= days[7]).to_numpy()
    raw_ece = expected_calibration_error(y[later], p[later])
    fixed_ece = expected_calibration_error(y[later], corrected[later])
    assert raw_ece > 0.1 and fixed_ece < 0.02, (raw_ece, fixed_ece)
    assert logloss(y[later], corrected[later]) < logloss(y[later], p[later]) - 0.02
    # The ranking within a day is the model's.
    one = (day == days[20]).to_numpy()
    ranks = [np.argsort(scores[one], kind="stable") for scores in (p, corrected)]
    assert np.array_equal(*ranks)

    # Too few labels in the window, or the correction off: the model's probability as it is.
    few, _ = recalibrate(day, p, labelled, score, 14, 10**6)
    off, none = recalibrate(day, p, labelled, score, 0, 100)
    np.testing.assert_array_equal(few, p)
    np.testing.assert_array_equal(off, p)
    assert none == {}


def test_the_labels_window_reaches_back_from_the_first_day_scored() -> None:
    first, end = window_of(date(2013, 12, 10), date(2013, 12, 12), 14)
    assert (first.isoformat(), end.isoformat()) == ("2013-11-26", "2013-12-12")


@pytest.mark.parametrize(
    "settings", [{"recalibration_days": -1}, {"recalibration_min_labels": 0}], ids=str
)
def test_a_negative_window_or_no_minimum_is_refused(settings) -> None:
    with pytest.raises(ValueError, match="recalibration_days must be 0"):
        MonitoringSpec(**settings)


def test_before_any_label_table_exists_there_is_nothing_to_move_by(tmp_path) -> None:
    from pipelines.lib.warehouse import DuckDBWarehouse
    from pipelines.monitoring.recalibration import uniform_labels
    from pipelines.task import load_task

    with DuckDBWarehouse(path=str(tmp_path / "w.duckdb")).connect() as con:
        found = uniform_labels(con, load_task("flights"), date(2013, 11, 1), date(2013, 11, 15))
    assert found.empty and {OUTCOME, DELIVERED} <= set(found.columns)


def test_a_predictions_table_made_before_the_column_gets_it_once(tmp_path) -> None:
    from pipelines.defs.scoring.assets import ensure_predictions_table
    from pipelines.lib.warehouse import DuckDBWarehouse
    from pipelines.monitoring.recalibration import CALIBRATED
    from pipelines.task import load_task

    spec = load_task("flights").model
    with DuckDBWarehouse(path=str(tmp_path / "w.duckdb")).connect() as con:
        con.execute(
            f"create table {spec.predictions_table} as select 'a' as flight_id, "
            "current_date as flight_date, 0.5 as probability, 1 as model_version, "
            "now() as scored_at"
        )
        for _ in range(2):
            ensure_predictions_table(con, spec)
        table = con.df(f"select * from {spec.predictions_table}")
    assert list(table.columns).count(CALIBRATED) == 1 and len(table) == 1
    assert table[CALIBRATED].isna().all()  # the rows scored before it keep no calibrated score
