"""What the flywheel's labels are worth, said in labels.

The report's same-budget reference (sim.judge.reference) learns from as many uniformly random
labels of each landing day as the flywheel got. Here it is fitted at several multiples of that
budget (`MULTIPLES`: half, the same, twice, four times), on the features the warehouse does not
compute from the flywheel's own labels (the task's `model.label_features`: a segment's late rate
over the flywheel's labelled flights), so that no reference reads what the flywheel's selection
chose. The flywheel's mean weekly AUC placed on that learning curve, between the two multiples
around it on a log2 scale, says how many times its labels a random sample would need to do as
well: "worth N times its labels". The all-labels ceiling is fitted on the same features.

    FLYWHEEL_HOME=<a played run's home> python -m sim.judge.labels_worth [--seed N]

writes `<home>/report/labels_worth.csv` (a row per report week: the flywheel's AUC, each
multiple's reference and the ceiling); `flywheel-sim compare` runs it on each seed's flywheel
play and reads the weeks of all seeds with paired intervals (sim.judge.policies).
"""

from __future__ import annotations

import argparse
import itertools
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from sim.judge.reference import PlayedExamples, auc_by_period, reference_sample

MULTIPLES = (0.5, 1.0, 2.0, 4.0)
FILE = "labels_worth.csv"


def column(multiple: float) -> str:
    """The table's column of the reference fitted on `multiple` times the flywheel's labels."""
    return f"reference_x{multiple:g}"


def without(features: FeatureConfig, dropped: tuple[str, ...]) -> FeatureConfig:
    """`features` without the columns `dropped`."""
    return replace(
        features,
        categorical=tuple(c for c in features.categorical if c not in dropped),
        numeric=tuple(c for c in features.numeric if c not in dropped),
    )


def worth_by_period(
    examples: pd.DataFrame,
    spend: pd.Series,
    periods: list,
    features: FeatureConfig,
    time_column: str,
    seed: int = 0,
    multiples: tuple[float, ...] = MULTIPLES,
    jobs: int | None = None,
) -> pd.DataFrame:
    """Per report period (its first day): the AUC of the reference retrained at its start on
    `multiple` x `spend` uniformly random labels of each landing partition before it, for each
    of `multiples`, and of the ceiling (every outcome before it); all on `features`."""
    played = PlayedExamples(examples, features, time_column)
    pools = {
        column(m): reference_sample(played.examples, spend * m, time_column, seed).index.to_numpy()
        for m in multiples
    }
    pools["ceiling"] = np.arange(len(played.examples))
    rows = auc_by_period(played, pools, periods, seed, jobs)
    table = pd.DataFrame(rows)[["period", *pools]].rename(columns={"period": "week"})
    return table.assign(week=pd.to_datetime(table.week))


def worth_in_labels(auc: float, curve: dict[float, float]) -> float:
    """How many times its labels a uniformly random sample needs to reach `auc`, read on the
    reference's learning `curve` (multiple -> AUC) between the two multiples around it, linear
    in log2 of the multiple; below the smallest or above the largest multiple, that bound
    (say "at most" or "at least" it); NaN without a curve."""
    points = sorted((m, a) for m, a in curve.items() if not math.isnan(a))
    if not points:
        return math.nan
    if auc <= points[0][1]:
        return points[0][0]
    for (m0, a0), (m1, a1) in itertools.pairwise(points):
        if a0 <= auc <= a1 and a1 > a0:
            share = (auc - a0) / (a1 - a0)
            return float(2 ** (math.log2(m0) + share * (math.log2(m1) - math.log2(m0))))
    return points[-1][0]


def main(argv: list[str] | None = None) -> int:
    """Fit the references of a played run (FLYWHEEL_HOME's) and write its table."""
    from pipelines.definitions import defs
    from pipelines.settings import flywheel_home
    from pipelines.task import load_task
    from sim.judge.examples import Judged
    from sim.judge.history import resource
    from sim.judge.report import labels_per_partition, played_examples

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the references' random samples")
    parser.add_argument("--report-dir", type=Path, help="default: $FLYWHEEL_HOME/report")
    args = parser.parse_args(argv)
    report = args.report_dir or flywheel_home() / "report"
    weekly = pd.read_csv(report / "weekly.csv", parse_dates=["week"])
    judged = Judged.of(load_task().name)
    warehouse = resource(defs, "warehouse")
    last = (weekly.week.max() + pd.Timedelta(days=6)).date()
    examples = played_examples(warehouse, judged, last)
    spend = labels_per_partition(warehouse, judged)
    spec = judged.spec
    features = without(spec.features, spec.label_features)
    table = worth_by_period(
        examples, spend, list(weekly.week), features, spec.time_column, args.seed
    )
    table = weekly[["week", "flywheel"]].merge(table, on="week")
    table.to_csv(report / FILE, index=False)
    curve = {m: table[column(m)].mean() for m in MULTIPLES}
    worth = worth_in_labels(table.flywheel.mean(), curve)
    print(
        f"{report / FILE}: flywheel {table.flywheel.mean():.4f}; "
        + ", ".join(f"x{m:g} {a:.4f}" for m, a in curve.items())
        + f"; ceiling {table.ceiling.mean():.4f}; worth {worth:.2f} times its labels"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
