"""The report's weekly calibration measures, on planted scores."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ml.calibration import shift
from ml.metrics import logloss
from sim.judge.calibration import weekly_calibration


def test_the_weekly_table_gives_each_scores_ece_and_the_corrected_ones_log_loss() -> None:
    rng = np.random.default_rng(3)
    days = pd.Series(np.repeat(pd.date_range("2013-12-02", periods=28, freq="D"), 1_000))
    p = 1 / (1 + np.exp(-rng.normal(-1.5, 1.0, len(days))))
    y = (rng.random(len(p)) < shift(p, 1.0)).astype(np.float64)  # the late rate moved up
    corrected = shift(p, 1.0)  # the scores moved by the true shift
    week = days.dt.to_period("W-SUN").dt.start_time
    table = weekly_calibration(y, week, {"flywheel": p, "corrected": corrected})
    assert list(table.columns) == ["week", "flywheel_ece", "corrected_ece", "corrected_logloss"]
    assert len(table) == 4
    assert (table.flywheel_ece > 0.1).all() and (table.corrected_ece < 0.02).all()
    first = (week == week.iloc[0]).to_numpy()
    assert table.corrected_logloss.iloc[0] == logloss(y[first], corrected[first])
    # Without corrected scores, no log loss column.
    assert "corrected_logloss" not in weekly_calibration(y, week, {"flywheel": p}).columns
