"""Benchmark: can the drift statistics tell a broken feed from an ordinary day?

    python -m bench.break_detection --home DIR [--days-before 14]

Reads the features of every flight a finished simulation built (its FLYWHEEL_HOME's warehouse,
ideally a whole year). Each day is compared with the `--days-before` days before it, with the
monitoring's own statistics (ml.drift: PSI and KS per feature, the features the task's
`monitoring` section watches). Then the same day as the first day of a planted unit change (the
weather feed reports temperature and dew point in Celsius, `sim.world.drift`), against the same
unconverted days before it. For rules "at least K features with KS (or PSI) above X", it prints
on how many ordinary days the rule fires and on what share of converted first days. A rule worth
deploying as a break alarm fires on every converted day and on almost no ordinary one.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

from ml.drift import build_training_profile, feature_drift

CONVERTED = ("temp", "dewp")
RULES = [("ks", 1, x) for x in (0.9, 0.95, 0.99)] + [("ks", 2, x) for x in (0.7, 0.8, 0.9, 0.95)]
RULES += [("psi", 2, x) for x in (3.0, 5.0, 7.0)]


def celsius(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as the drifted feed would report it (sim.world.drift's kind `celsius`)."""
    return frame.assign(**{c: (frame[c] - 32) * 5 / 9 for c in CONVERTED})


def statistics(home: Path, days_before: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """PSI and KS per feature of each day against the days before it: ordinary, and converted."""
    os.environ["FLYWHEEL_HOME"] = str(home)
    os.environ.pop("FLYWHEEL_WAREHOUSE_PATH", None)
    from pipelines.definitions import defs
    from pipelines.task import load_task
    from sim.judge.report import resource

    task = load_task()
    features, monitoring = task.model.features, task.monitoring
    skip = set(monitoring.exclude_features) | {"scheduled_weekday"}  # one weekday against a week
    categorical = [c for c in features.categorical if c not in skip]
    numeric = [c for c in features.numeric if c not in skip]
    flights = resource(defs, "warehouse").query(
        f"select flight_date, {', '.join(categorical + numeric)} from fct_flight_features"
    )
    by_day = {d: rows.drop(columns="flight_date") for d, rows in flights.groupby("flight_date")}
    days = sorted(by_day)
    ordinary, converted = [], []
    for i in range(days_before, len(days)):
        before = pd.concat([by_day[d] for d in days[i - days_before : i]], ignore_index=True)
        day = by_day[days[i]]
        if day[list(CONVERTED)].isna().all().all():
            continue  # no weather that day (2013-12-31): nothing to convert
        profile = build_training_profile(before, categorical, numeric)
        ordinary.append(feature_drift(profile, day).assign(day=days[i]))
        converted.append(feature_drift(profile, celsius(day)).assign(day=days[i]))
        if (i + 1) % 50 == 0:
            print(f"  {i + 1}/{len(days)} days", flush=True)
    return pd.concat(ordinary), pd.concat(converted)


def rule_table(ordinary: pd.DataFrame, converted: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for stat, k, x in RULES:
        fired = {
            name: (frame.assign(over=frame[stat] > x).groupby("day").over.sum() >= k)
            for name, frame in (("ordinary", ordinary), ("converted", converted))
        }
        rows.append(
            {
                "rule": f"at least {k} with {stat.upper()} > {x:g}",
                "ordinary days it fires on": int(fired["ordinary"].sum()),
                "converted first days caught": fired["converted"].mean(),
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="a finished simulation's state")
    parser.add_argument("--days-before", type=int, default=14, help="the days a day is set against")
    args = parser.parse_args()
    ordinary, converted = statistics(args.home.resolve(), args.days_before)
    days = ordinary.day.nunique()
    print(f"{days} days, each against the {args.days_before} days before it")
    quantiles = ordinary.groupby("feature")[["psi", "ks"]].quantile(0.95).sort_values("psi")
    print("95th percentile on ordinary days, by feature:")
    print(quantiles.tail(8).to_markdown(floatfmt=".2f"))
    first = converted[converted.feature.isin(CONVERTED)].groupby("feature")[["psi", "ks"]]
    print("converted first days, minimum and median:")
    spread = first.agg(["min", "median"])
    spread.columns = [f"{stat} {how}" for stat, how in spread.columns]
    print(spread.to_markdown(floatfmt=".2f"))
    print(rule_table(ordinary, converted).to_markdown(index=False, floatfmt=".3f"))
    worst = ordinary[ordinary.ks > 0.99].groupby("day").feature.agg(", ".join)
    print(f"ordinary days with a KS above 0.99 ({len(worst)}):")
    print("; ".join(f"{pd.Timestamp(day).date()} {names}" for day, names in worst.items()))


if __name__ == "__main__":
    main()
