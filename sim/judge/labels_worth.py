"""What the flywheel's labels are worth, said in labels.

The report's same-budget reference (sim.judge.reference) learns from as many uniformly random
labels of each landing day as the flywheel got. Here it is fitted at several multiples of that
budget (`MULTIPLES`: half, the same, twice, four times), each on every feature the flywheel's
model reads: the ones the warehouse computes from labels (the task's `model.label_features`: a
segment's late rate over its labelled flights of the days before) computed from the reference's
own labels (sim.judge.label_features), each known `latency_days` after its flight's day as the
world's annotators answer, so that no reference reads what the flywheel's selection chose and
none loses what such features are worth. The flywheel's mean weekly AUC placed on that learning
curve, between the two multiples around it on a log2 scale, says how many times its labels a
random sample would need to do as well: "worth N times its labels". The all-labels ceiling's
label features are computed from every outcome.

    FLYWHEEL_HOME=<a played run's home> python -m sim.judge.labels_worth [--seed N]

writes `<home>/report/labels_worth.csv` (a row per report week: the flywheel's AUC, each
multiple's reference and the ceiling); `flywheel-sim compare` runs it on each seed's flywheel
play and reads the weeks of all seeds with paired intervals (sim.judge.policies).
"""

from __future__ import annotations

import argparse
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from sim.judge.label_features import COLUMNS as LABEL_COLUMNS
from sim.judge.label_features import late_rate_features
from sim.judge.reference import PlayedExamples, auc_by_period, reference_sample

MULTIPLES = (0.5, 1.0, 2.0, 4.0)
FILE = "labels_worth.csv"


def column(multiple: float) -> str:
    """The table's column of the reference fitted on `multiple` times the flywheel's labels."""
    return f"reference_x{multiple:g}"


def worth_by_period(
    examples: pd.DataFrame,
    spend: pd.Series,
    periods: list,
    features: FeatureConfig,
    time_column: str,
    seed: int = 0,
    multiples: tuple[float, ...] = MULTIPLES,
    jobs: int | None = None,
    label_features: tuple[str, ...] = (),
    latency_days: int = 1,
) -> pd.DataFrame:
    """Per report period (its first day): the AUC of the reference retrained at its start on
    `multiple` x `spend` uniformly random labels of each landing partition before it, for each
    of `multiples`, and of the ceiling (every outcome before it); all on `features`, those of
    `label_features` computed from each one's own labels, each known `latency_days` after its
    example's day."""
    if stray := sorted(set(label_features) - set(LABEL_COLUMNS)):
        raise ValueError(
            f"label features {stray} cannot be computed from labels here; "
            f"known: {list(LABEL_COLUMNS)}"
        )
    examples = examples.reset_index(drop=True)
    pools = {
        column(m): reference_sample(examples, spend * m, time_column, seed).index.to_numpy()
        for m in multiples
    }
    pools["ceiling"] = np.arange(len(examples))
    table = None
    for name, pool in pools.items():
        own = examples
        if label_features:
            labelled = examples.iloc[pool]
            known = pd.to_datetime(labelled[time_column]) + pd.Timedelta(days=latency_days)
            late = labelled[features.label].to_numpy(dtype=np.float64)
            own = late_rate_features(examples, pool, late, known, time_column)
        played = PlayedExamples(own, features, time_column)
        rows = pd.DataFrame(auc_by_period(played, {name: pool}, periods, seed, jobs))
        rows = rows[["period", name]]
        table = rows if table is None else table.merge(rows, on="period")
    table = table.rename(columns={"period": "week"})
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
    table = worth_by_period(
        examples,
        spend,
        list(weekly.week),
        spec.features,
        spec.time_column,
        args.seed,
        label_features=spec.label_features,
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
