"""The report's same-budget reference and all-labels ceiling on a played run, three ways.

    FLYWHEEL_HOME=<a played run's home> python -m bench.report_baselines [--since 2013-02-01]

On the flights and labels of the run under FLYWHEEL_HOME (e.g. the whole year's), one after the
other, the weeks from `--since` to the last played:

1. every fit after the last day, as the report made them before the ceiling's fits moved into
   the days (`encode` per fit, joblib processes): the code of that time, kept here;
2. every fit after the last day, as the report makes them without the fits made during the days
   (the features encoded once: `sim.judge.reference.Columns`);
3. the ceiling's and the reference's fits made by `sim.judge.baseline_fits.BaselineFits` as the
   simulation feeds it, week by week with the labels spent so far (the seconds until its last
   result: on an otherwise idle machine, not alongside the days), then what is left for the
   report after the last day: the check of each fit's inputs, and the fits whose inputs
   changed since.

Prints the seconds of each and whether the three give the same AUCs to the last digit.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import date, timedelta

import numpy as np
import pandas as pd


def fits_per_call(
    flights: pd.DataFrame, spend: pd.Series, weeks: list[date], features, seed: int = 0
) -> pd.DataFrame:
    """The weekly fits as the report made them before: `encode` on each fit's own rows."""
    from joblib import Parallel, delayed

    from ml.metrics import auroc
    from sim.judge.reference import (
        COLUMNS,
        MIN_TRAINING_ROWS,
        encode,
        fit_predict,
        reference_sample,
    )

    sample = reference_sample(flights, spend, "flight_date", seed)
    rows, fits = [], []
    for week in weeks:
        end = week + timedelta(days=7)
        scored = flights[(flights.flight_date >= week) & (flights.flight_date < end)]
        y = scored[features.label].to_numpy(dtype=np.int64)
        row: dict[str, object] = {"period": week}
        for name, pool in (("reference", sample), ("ceiling", flights)):
            train = pool[pool.flight_date < week]
            labels = train[features.label].to_numpy(dtype=np.int64)
            row[name], row[f"{name}_labels"] = np.nan, len(train)
            enough = len(labels) >= MIN_TRAINING_ROWS and labels.min() != labels.max()
            if 0 < y.sum() < len(y) and enough:
                fits.append((len(rows), name, y, (*encode(train, scored, features),), labels))
        rows.append(row)
    scores = Parallel(n_jobs=os.cpu_count() or 1)(
        delayed(fit_predict)(x, labels, other, categorical, seed)
        for _, _, _, (x, other, categorical), labels in fits
    )
    for (i, name, y, _, _), predicted in zip(fits, scores, strict=True):
        rows[i][name] = auroc(y, predicted)
    return pd.DataFrame(rows, columns=COLUMNS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", type=date.fromisoformat, default=date(2013, 2, 1))
    args = parser.parse_args()

    from pipelines.definitions import defs
    from pipelines.task import load_task
    from sim.judge.baseline_fits import BaselineFits
    from sim.judge.examples import Judged
    from sim.judge.reference import reference_by_period
    from sim.judge.report import labels_per_partition, played_examples, resource

    features = load_task().model.features
    warehouse = resource(defs, "warehouse")
    last = warehouse.query("select max(flight_date) as d from fct_flight_features").d[0]
    last = pd.Timestamp(last).date()
    flights = played_examples(warehouse, Judged.of("flights"), last)
    per_day = labels_per_partition(warehouse, Judged.of("flights"))
    first = args.since - timedelta(days=args.since.weekday())
    weeks = [first + timedelta(weeks=k) for k in range((last - first).days // 7 + 1)]
    print(f"{len(flights):,} flights played up to {last}; {len(weeks)} weeks from {first}")

    began = time.perf_counter()
    before = fits_per_call(flights, per_day, weeks, features)
    print(f"1. every fit after the last day, encoded per fit: {time.perf_counter() - began:.1f} s")

    began = time.perf_counter()
    now = reference_by_period(flights, per_day, weeks, features, "flight_date")
    print(f"2. every fit after the last day, encoded once: {time.perf_counter() - began:.1f} s")

    began = time.perf_counter()
    fits, sent = BaselineFits(features, "flight_date"), None
    for week in weeks:
        end = week + timedelta(days=6)
        if end > last:
            break
        new = flights[flights.flight_date <= end]
        spent = per_day[per_day.index <= end]
        fits.add(new if sent is None else new[new.flight_date > sent], [week], spent)
        sent = end
    fitted = fits.results()
    during = time.perf_counter() - began
    began = time.perf_counter()
    reused = reference_by_period(flights, per_day, weeks, features, "flight_date", fitted=fitted)
    print(
        f"3. the baselines' {len(fitted)} fits in the idle-priority process: {during:.1f} s; "
        f"what is left after the last day: {time.perf_counter() - began:.1f} s"
    )
    for name, frame in (("2", now), ("3", reused)):
        same = frame.equals(before)
        print(f"the AUCs of {name} and 1 are {'the same' if same else 'DIFFERENT'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
