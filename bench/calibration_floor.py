"""Benchmark: how far is the served calibrated probability from the floor of a one-shift-a-day
correction, and does Platt scaling, a recency-weighted shift or a day-level offset model close
the gap?

    python -m bench.calibration_floor --home DIR

Reads a finished simulation's state (its FLYWHEEL_HOME): every production flight's score and
served `calibrated_probability`, its outcome from the simulator, and the uniformly drawn labels
with the day each came back. Each production day is corrected by every method of
sim/judge/recalibration_floor.py from the labels known before the day, the window's labels
scored by the day's champion as scoring does. Prints a row per method: mean weekly ECE over all
flights and over the uniform labels, log loss, the share of the gap from the served window
shift to the per-day oracle it closes, its mean weekly ECE difference to the window shift with
the standard error of that mean, and the RMSE of its daily shift against the oracle's.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from sim.judge.recalibration_floor import (
    DAY,
    DELIVERED,
    OUTCOME,
    WEATHER,
    FloorSettings,
    corrections,
    day_features,
    floor_table,
)

# The settings varied one at a time by --sensitivity.
NEARBY = (
    {"half_life_days": 2.0},
    {"half_life_days": 5.0},
    {"history_days": 56},
    {"alpha": 16.0},
)


@dataclass
class Played:
    """What the measurement reads of a played state: its production flights, its uniform labels
    and the champions' scores of them, the days' calendar and weather, the weeks."""

    production: pd.DataFrame
    labelled: pd.DataFrame
    score: Callable[[int], np.ndarray]
    past: pd.DataFrame
    uniform: np.ndarray
    week: pd.Series


def played(home: Path, settings: FloorSettings) -> Played:
    """The played state under `home`, read as `Played`."""
    from bench.alarm_signals import played_state

    defs, (first, last) = played_state(home.resolve())
    from pipelines.monitoring.recalibration import DELIVERED as SERVED_DELIVERED
    from pipelines.monitoring.recalibration import OUTCOME as SERVED_OUTCOME
    from pipelines.monitoring.recalibration import uniform_labels
    from pipelines.task import load_task
    from sim.judge.examples import Judged
    from sim.judge.report import production_examples, resource, version_scores

    task = load_task()
    judged, spec = Judged.of(task.name), task.model
    as_day = {spec.time_column: DAY}
    production = production_examples(defs, judged, first, last).rename(columns=as_day)
    production = production.rename(columns={"flywheel": "probability", spec.label: OUTCOME})
    production[DAY] = pd.to_datetime(production[DAY]).dt.date
    start = first - timedelta(days=settings.window_days + settings.history_days)
    warehouse = resource(defs, "warehouse")
    with warehouse.connect(read_only=True) as con:
        labelled = uniform_labels(con, task, start, last + timedelta(days=1))
    labelled = labelled.rename(columns={SERVED_OUTCOME: OUTCOME, SERVED_DELIVERED: DELIVERED})
    labelled = labelled.rename(columns=as_day).reset_index(drop=True)
    labelled[DAY] = pd.to_datetime(labelled[DAY]).dt.date
    flights = warehouse.query(
        f"select {spec.time_column} as {DAY}, {', '.join(WEATHER)} from {spec.features_table} "
        f"where {spec.time_column} between ? and ?",
        [start.isoformat(), last.isoformat()],
    )
    flights[DAY] = pd.to_datetime(flights[DAY]).dt.date
    predict, cache = version_scores(defs, task.name), {}

    def score(version: int) -> np.ndarray:
        if version not in cache:
            frame = labelled.rename(columns={DAY: spec.time_column})
            cache[version] = np.asarray(predict(int(version), frame), dtype=np.float64)
        return cache[version]

    uniform = production[spec.example_id].isin(labelled[spec.example_id]).to_numpy()
    week = judged.period(pd.Series(production[DAY]))
    return Played(production, labelled, score, day_features(flights), uniform, week)


def measure(state: Played, settings: FloorSettings) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The methods' table and the days' shifts on a `played` state."""
    production = state.production
    columns, days = corrections(production, state.labelled, state.score, state.past, settings)
    columns = {"model": production.probability.to_numpy(dtype=np.float64), **columns}
    if "calibrated" in production:
        columns["served"] = production.calibrated.to_numpy(dtype=np.float64)
    y = production[OUTCOME].to_numpy(dtype=np.float64)
    table = floor_table(y, state.week, columns, state.uniform)
    return table.assign(shift_rmse=[_rmse(days, name) for name in table.method]), days


def _rmse(days: pd.DataFrame, name: str) -> float:
    """The RMSE of a method's daily shift against the oracle's, over the days it moved."""
    if name not in days or name == "platt":
        return float("nan")  # no shift (the model's, the served) or not one (Platt's slope)
    moved = days[name].notna()
    return float(np.sqrt(((days[name][moved] - days.oracle[moved]) ** 2).mean()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--days-csv", type=Path, help="write the days' shifts here")
    parser.add_argument(
        "--sensitivity",
        action="store_true",
        help="also the servable methods under nearby settings (is the verdict a setting's?)",
    )
    args = parser.parse_args()
    began = time.perf_counter()
    settings = FloorSettings()
    state = played(args.home, settings)
    table, days = measure(state, settings)
    if args.days_csv:
        days.to_csv(args.days_csv, index=False)
    weeks = state.week.nunique()
    print(f"{args.home}: {len(days)} production days, {weeks} weeks")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if args.sensitivity:
        print("\nservable methods under nearby settings (mean weekly ECE, minus the window's):")
        for change in NEARBY:
            varied, _ = measure(state, replace(settings, **change))
            rows = varied.set_index("method").loc[["recent_shift", "offset_model", "offset_glm"]]
            figures = ", ".join(
                f"{m} {r.weekly_ece:.4f} ({r.minus_window:+.4f} +- {r.minus_window_se:.4f})"
                for m, r in rows.iterrows()
            )
            print(f"  {change}: {figures}")
    print(f"wall time {time.perf_counter() - began:.0f}s")


if __name__ == "__main__":
    main()
