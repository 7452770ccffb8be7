"""Every figure renders to PNG bytes without a display."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from ml.plots import (
    calibration_figure,
    roc_figure,
    slice_figure,
    weekly_auc_figure,
    weekly_auc_plot,
)

PNG = b"\x89PNG\r\n\x1a\n"
RNG = np.random.default_rng(0)
Y = (RNG.random(400) < 0.3).astype(float)
PREDICTIONS = {
    "challenger": np.clip(0.3 + 0.3 * Y + RNG.normal(0, 0.2, 400), 0, 1),
    "champion": RNG.random(400),
}
SLICES = pd.DataFrame(
    {
        "slice": ["carrier"] * 4 + ["hour_band"] * 2,
        "value": ["AA", "AA", "EV", "EV", "night", "night"],
        "n": 100,
        "positives": 30,
        "model": ["challenger", "champion"] * 3,
        "auroc": [0.8, 0.7, 0.75, np.nan, 0.6, 0.65],
        "logloss": [0.5, 0.55, 0.52, 0.6, 0.58, 0.57],
    }
)
WEEKLY = pd.DataFrame(
    {
        "week": list(pd.date_range("2024-01-01", periods=3, freq="W-MON").date) * 2,
        "model": ["challenger"] * 3 + ["champion"] * 3,
        "auroc": [0.78, 0.8, 0.79, 0.74, 0.73, 0.75],
    }
)
FIGURES: dict[str, Callable[[], bytes]] = {
    "roc": lambda: roc_figure(Y, PREDICTIONS),
    "calibration": lambda: calibration_figure(Y, PREDICTIONS, n_bins=5),
    "slices": lambda: slice_figure(SLICES),
    "slices-logloss": lambda: slice_figure(SLICES, metric="logloss"),
    "weekly": lambda: weekly_auc_figure(WEEKLY),
}


@pytest.mark.parametrize("draw", FIGURES.values(), ids=FIGURES.keys())
def test_figure_is_a_png(draw: Callable[[], bytes]) -> None:
    image = draw()
    assert isinstance(image, bytes) and image.startswith(PNG) and len(image) > 1000


def tick_labels(weekly: pd.DataFrame) -> list[str]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = weekly_auc_plot(weekly)
    FigureCanvasAgg(fig).draw()
    return [label.get_text() for label in fig.axes[0].get_xticklabels()]


def test_a_year_of_weeks_is_ticked_by_month_and_a_few_weeks_by_monday() -> None:
    weeks = pd.date_range("2013-01-07", "2013-12-30", freq="W-MON").date
    labels = tick_labels(pd.DataFrame({"week": weeks, "model": "flywheel", "auroc": 0.7}))
    months = pd.to_datetime(labels, format="%b %Y")
    assert {"Feb 2013", "Jun 2013", "Dec 2013"} <= set(labels)
    assert (months[1:] == months[:-1] + pd.DateOffset(months=1)).all()  # one tick a month

    assert tick_labels(WEEKLY) == ["2024-01-01", "2024-01-08", "2024-01-15"]


def test_the_weekly_plot_marks_each_alarm_and_each_promotion() -> None:
    events = pd.DataFrame(
        {"day": ["2024-01-03", "2024-01-10", "2024-01-04"], "kind": ["alarm", "alarm", "promotion"]}
    )
    fig = weekly_auc_plot(WEEKLY, events)
    ax = fig.axes[0]
    alarms = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(alarms) == 2
    (promotions,) = [line for line in ax.get_lines() if line.get_marker() == "^"]
    assert len(promotions.get_xdata()) == 1
    assert {"alarm", "promotion"} <= {t.get_text() for t in ax.get_legend().get_texts()}
    assert len(weekly_auc_plot(WEEKLY).axes[0].get_lines()) == len(set(WEEKLY.model))
