"""How the comparison's report prints its tables of paired differences.

The CSV files keep every figure in a column of its own (`auc_block_low`, `auc_block_high`...);
the Markdown report pairs each interval's bounds into one cell, `(low, high)`, shows p-values
to three places, and states under each table the minimal detectable effect of its comparisons
(sim.judge.statistics).
"""

from __future__ import annotations

import math

import pandas as pd

from sim.judge.statistics import ALPHA, POWER

READINGS = (
    "Each difference is read three ways (sim.judge.statistics): `_block`, the 95% interval "
    "of a two-level block bootstrap (seeds drawn with replacement, then blocks of consecutive "
    "weeks: a model serves about a week, so weeks are not independent), the one to read; "
    "`_week`, Student's t over the weekly means, which treats weeks as independent and runs "
    "narrow; `_seed`, Student's t over the seeds' means, 2 degrees of freedom with 3 seeds. "
    "Weeks are weighted by their flights. `_p`: the block reading's two-sided p-value; "
    "`_p_holm`: adjusted by Holm's method over every p-value of the table, the one to compare "
    "with 0.05."
)


def _bounds(low: float, high: float) -> str:
    if math.isnan(low) or math.isnan(high):
        return "-"
    return f"({low:.3f}, {high:.3f})"


def _p(value: float) -> str:
    if math.isnan(value):
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _reading_name(stem: str) -> str:
    """A `_low`/`_high` pair's cell name: the block and seed readings keep theirs, the rest
    are the week reading's."""
    if stem.endswith(("block", "seed")):
        return stem
    return f"{stem}_week" if stem else "week"


def compact(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` for Markdown: each `<x>_low`, `<x>_high` pair as one `(low, high)` column in
    the place of the first, p-values as text, the minimal detectable effects left to
    `mde_note`."""
    shown = frame.drop(columns=[c for c in frame.columns if c == "mde" or c.endswith("_mde")])
    columns: dict[str, pd.Series] = {}
    for column in shown.columns:
        stem, _, end = column.rpartition("_") if "_" in column else ("", "", column)
        if (end == "high" and f"{stem}_low" in shown) or (column == "high" and "low" in shown):
            continue
        high = f"{stem}_high" if stem else "high"
        if end == "low" and high in shown:
            pairs = zip(shown[column], shown[high], strict=True)
            columns[_reading_name(stem)] = pd.Series([_bounds(*b) for b in pairs], shown.index)
        elif column == "p" or column.endswith(("_p", "_p_holm", "p_holm")):
            columns[column] = shown[column].map(_p)
        else:
            columns[column] = shown[column]
    return pd.DataFrame(columns)


def mde_note(frame: pd.DataFrame, unit: str = "AUC") -> str:
    """A sentence on the table's minimal detectable effects (its `mde`/`<x>_mde` columns):
    their range over the rows; empty without them."""
    said = []
    for column in [c for c in frame.columns if c == "mde" or c.endswith("_mde")]:
        values = frame[column].dropna()
        values = values[values > 0]
        if values.empty:
            continue
        what = column.removesuffix("_mde").replace("_", " ") if column != "mde" else unit
        low, high = values.min(), values.max()
        span = f"{low:.3f}" if math.isclose(low, high, abs_tol=5e-4) else f"{low:.3f} to {high:.3f}"
        said.append(f"{what} {span}")
    if not said:
        return ""
    return (
        f"Minimal detectable effect (a true difference found with {POWER:.0%} power by a "
        f"two-sided test at {ALPHA:.0%}, from the block reading's standard error): "
        + "; ".join(said)
        + ". A difference smaller than that can hide in these weeks and seeds."
    )
