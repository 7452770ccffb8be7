"""Evaluation and monitoring figures rendered to PNG bytes, ready to attach to a run or a report.

Matplotlib is imported inside each function and drives the Agg canvas directly (no pyplot), so
importing this module stays cheap and never changes a process-wide backend.

Predictions are P(label = 1) per row with 0/1 labels, or a multi-class model's (n, K)
probabilities with class indices 0..K-1 as labels: its ROC curve is one-vs-rest, micro-averaged
over the classes, and its calibration the top label's (confidence against accuracy).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from ml.labels import class_indices
from ml.metrics import auroc, multiclass_auroc

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ml.evaluation import Evaluation


def roc_figure(y_true: ArrayLike, predictions: dict[str, np.ndarray]) -> bytes:
    """ROC curve of every model, AUROC in the legend, as PNG bytes; for (n, K) probabilities
    the one-vs-rest curve micro-averaged over classes, with the macro AUROC in the legend."""
    y = np.asarray(y_true, dtype=np.float64).ravel()
    fig, ax = _figure()
    title = "ROC"
    for name, p in predictions.items():
        p = np.asarray(p, dtype=np.float64)
        if p.ndim == 2 and p.shape[1] > 1:
            classes = y.astype(np.int64)
            hits = (classes[:, None] == np.arange(p.shape[1])).astype(np.float64)
            fpr, tpr = _roc_curve(hits.ravel(), p.ravel())
            macro = multiclass_auroc(classes, p)
            ax.plot(fpr, tpr, label=f"{name} (macro AUROC {macro:.3f})")
            title = "ROC (one-vs-rest, micro-averaged over classes)"
            continue
        fpr, tpr = _roc_curve(y, p.ravel())
        ax.plot(fpr, tpr, label=f"{name} (AUROC {auroc(y, p):.3f})")
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title=title)
    ax.legend(loc="lower right")
    return _png(fig)


def calibration_figure(
    y_true: ArrayLike, predictions: dict[str, np.ndarray], n_bins: int = 10
) -> bytes:
    """Reliability diagram: observed rate against mean probability per equal-width bin; for
    (n, K) probabilities the top label's: how often the most probable class is the true one
    against its probability."""
    y_all = np.asarray(y_true, dtype=np.float64).ravel()
    fig, ax = _figure()
    for name, p in predictions.items():
        p, y = np.asarray(p, dtype=np.float64), y_all
        if p.ndim == 2 and p.shape[1] > 1:
            top = p.argmax(axis=1)
            p, y = p.max(axis=1), (top == y_all.astype(np.int64)).astype(np.float64)
        p = p.ravel()
        bins = np.clip((p * n_bins).astype(np.int64), 0, n_bins - 1)
        counts = np.bincount(bins, minlength=n_bins)
        used = counts > 0
        mean_p = np.bincount(bins, weights=p, minlength=n_bins)[used] / counts[used]
        rate = np.bincount(bins, weights=y, minlength=n_bins)[used] / counts[used]
        ax.plot(mean_p, rate, marker="o", label=name)
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    ax.set(xlabel="mean predicted probability", ylabel="observed rate", title="Calibration")
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper left")
    return _png(fig)


def slice_figure(slices_frame: pd.DataFrame, metric: str = "auroc") -> bytes:
    """Grouped horizontal bars of ``metric`` per slice value and model, one panel per slice."""
    from matplotlib.figure import Figure

    dimensions = list(dict.fromkeys(slices_frame["slice"]))
    models = list(dict.fromkeys(slices_frame["model"]))
    sizes = [slices_frame.loc[slices_frame["slice"] == d, "value"].nunique() for d in dimensions]
    height = max(3.0, 0.3 * len(models) * sum(sizes) + 1.2 * len(dimensions))
    fig = Figure(figsize=(7, height), layout="constrained")
    axes = fig.subplots(max(1, len(dimensions)), 1, squeeze=False, height_ratios=sizes or None)
    width = 0.8 / max(1, len(models))
    for ax, dimension in zip(axes[:, 0], dimensions, strict=False):
        table = slices_frame[slices_frame["slice"] == dimension].pivot_table(
            index="value", columns="model", values=metric, aggfunc="first", dropna=False
        )
        rows = np.arange(len(table))
        for i, model in enumerate(models):
            values = table[model] if model in table else np.full(len(table), np.nan)
            ax.barh(rows + i * width, values, height=width, label=model)
        ax.set_yticks(rows + width * (len(models) - 1) / 2, [str(v) for v in table.index])
        ax.set(xlabel=metric, title=str(dimension))
        ax.invert_yaxis()  # first value on top, reading order
    axes[0, 0].legend(loc="best", fontsize="small")
    return _png(fig)


def evaluation_plots(
    labels: np.ndarray,
    predictions: dict[str, np.ndarray],
    evaluation: Evaluation,
    classes: tuple | None = None,
) -> dict[str, bytes]:
    """An evaluation's ROC, calibration and slice plots as PNG bytes, by file name; with
    ``classes`` the labels are label values, mapped to class indices for (n, K) predictions."""
    if classes is not None:
        labels = class_indices(labels, classes)
    return {
        "roc.png": roc_figure(labels, predictions),
        "calibration.png": calibration_figure(labels, predictions),
        "slices.png": slice_figure(evaluation.slices, metric="auroc"),
    }


def weekly_auc_figure(weekly: pd.DataFrame, events: pd.DataFrame | None = None) -> bytes:
    """AUROC per week, one line per model (columns: week, model, auroc); a span of more than
    three months gets one tick per month, a shorter one a tick per week. `events` (columns day,
    kind: `alarm` or `promotion`) are marked where they happened: an alarm as a dashed line, a
    promotion as a triangle on the axis."""
    return _png(weekly_auc_plot(weekly, events))


def _mark_events(ax: object, events: pd.DataFrame) -> None:
    days = pd.to_datetime(events["day"])
    for i, day in enumerate(days[events["kind"] == "alarm"]):
        ax.axvline(day, color="tab:red", linestyle="--", alpha=0.5, label="alarm" * (i == 0))
    promoted = days[events["kind"] == "promotion"]
    if len(promoted):
        ax.plot(
            promoted,
            np.zeros(len(promoted)),
            linestyle="none",
            marker="^",
            color="tab:green",
            transform=ax.get_xaxis_transform(),
            clip_on=False,
            label="promotion",
        )


def weekly_auc_plot(weekly: pd.DataFrame, events: pd.DataFrame | None = None) -> Figure:
    """The figure of `weekly_auc_figure`."""
    from matplotlib import dates as mdates

    weeks = pd.to_datetime(weekly["week"])
    long_span = len(weekly) > 0 and (weeks.max() - weeks.min()).days > 92
    fig, ax = _figure(width=12 if long_span else 8)
    for model, rows in weekly.sort_values("week").groupby("model", sort=True):
        ax.plot(
            pd.to_datetime(rows["week"]),
            rows["auroc"],
            marker="o",
            markersize=3 if long_span else 6,
            label=str(model),
        )
    if events is not None and len(events):
        _mark_events(ax, events)
    if long_span:
        ax.xaxis.set_major_locator(mdates.MonthLocator())
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%b %Y"))
    else:
        ax.xaxis.set_major_locator(mdates.WeekdayLocator(byweekday=mdates.MO))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
    ax.set(xlabel="week (Monday)", ylabel="AUROC", title="Weekly AUROC in production")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.autofmt_xdate()
    return fig


def _roc_curve(y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-p, kind="mergesort")
    p_sorted, y_sorted = p[order], y[order]
    # One point per distinct threshold: the last row of each run of tied scores.
    last = np.r_[np.flatnonzero(p_sorted[1:] != p_sorted[:-1]), p.size - 1]
    tp = np.cumsum(y_sorted)[last]
    fp = (last + 1) - tp
    return np.r_[0.0, fp / max(fp[-1], 1)], np.r_[0.0, tp / max(tp[-1], 1)]


def _figure(width: float = 6, height: float = 5) -> tuple[Figure, object]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
