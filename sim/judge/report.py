"""The simulation's report: how the flywheel did against a static model, and what it did.

Every figure comes from the run: predictions and labels from the warehouse, retrainings and
decisions from the Dagster instance, versions from the registry and DVC. Only the simulator
knows every example's outcome, so production AUC is computed here, on all scored examples (for a
label of several classes, the macro one-vs-rest AUC, the multi-class log loss and the figures of
each class: sim.judge.per_class).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from pipelines.lib.registry import (
    DATASET_TAG,
    load_model,
    model_version,
    registered_name,
    versions,
)
from pipelines.monitoring.recalibration import CALIBRATED
from pipelines.task import load_task
from pipelines.task.cadence import next_start
from sim.judge import alarms, history
from sim.judge.baseline_fits import BaselineFits
from sim.judge.calibration import weekly_calibration
from sim.judge.examples import Judged
from sim.judge.history import label_spend, resource, retraining_events, retrainings, trainings
from sim.judge.reference import Fitted, period_end


@dataclass
class Report:
    """The report's tables, and where its markdown and plot were written."""

    weekly: pd.DataFrame
    retrainings: pd.DataFrame
    labels: pd.DataFrame
    alarms: alarms.AlarmSummary
    markdown: Path
    plot: Path
    period: str = "week"  # what a row of `weekly` is: a week, or a month for a monthly task

    def summary(self) -> list[str]:
        """The few lines the terminal shows at the end: the headline figures and where the
        report, its plot and its tables are."""
        lines = []
        if len(self.weekly):
            mean = self.weekly[["flywheel", "static", "reference", "ceiling"]].mean()
            weeks = f"{len(self.weekly)} production {self.period}s from {self.weekly.week.iloc[0]}"
            auc = f"flywheel {mean.flywheel:.3f}, static model {mean.static:.3f}"
            if not np.isnan(mean.reference):
                auc += f", same-budget reference {mean.reference:.3f}"
                auc += f", all-labels ceiling {mean.ceiling:.3f}"
            lines.append(f"mean AUC per {self.period} over {weeks}: {auc}")
        else:
            lines.append(f"no production {self.period} was scored")
        runs = self.retrainings
        if len(runs):
            triggers = runs.trigger.value_counts()
            by_trigger = ", ".join(f"{n} {trigger}" for trigger, n in triggers.items())
            promoted = int((runs.decision == "promoted").sum())
            lines.append(f"retrainings: {len(runs)} ({by_trigger}), {promoted} promoted")
        if len(self.labels):
            labelled, exported = int(self.labels.labelled.sum()), int(self.labels.exported.sum())
            lines.append(f"labels: {labelled:,} of {exported:,} tasks came back")
        if self.alarms.judged:
            lines.append(
                f"alarm precision {self.alarms.precision:.0%} "
                f"({self.alarms.right} of {self.alarms.judged} judged)"
            )
        return [
            *lines,
            f"report: {self.markdown}",
            f"plot:   {self.plot}",
            f"tables: {self.markdown.parent}/{{weekly,retrainings,labels}}.csv",
        ]


def production_examples(
    defs: dg.Definitions, judged: Judged, first: date, last: date
) -> pd.DataFrame:
    """Every example the flywheel scored between `first` and `last`: its features, the
    flywheel's score (and probability per class), the champion version that gave it, and its
    outcome (the label's column)."""
    spec = judged.spec
    warehouse = resource(defs, "warehouse")
    with warehouse.connect() as con:
        if not con.has_relation(spec.predictions_table):
            return pd.DataFrame()  # no model was ever promoted: nothing was scored
        served = con.columns(spec.predictions_table)
    per_class = "".join(f"p.{c}, " for c in judged.scored_columns)
    per_class += f"p.{CALIBRATED} as calibrated, " if CALIBRATED in served else ""
    examples = warehouse.query(
        f"select f.*, p.probability as flywheel, {per_class}p.model_version "
        f"from {spec.features_table} f join {spec.predictions_table} p using ({spec.example_id}) "
        f"where f.{spec.time_column} between ? and ? order by f.{spec.example_id}",
        [first.isoformat(), last.isoformat()],
    )
    examples[spec.label] = judged.outcomes(examples[spec.example_id])
    return examples


def version_scores(defs: dg.Definitions, task_name: str) -> Callable[[int, pd.DataFrame], Any]:
    """predict(version, examples): the probabilities a registered version gives `examples`,
    (n,) for a binary label, (n, K) for K classes."""
    from ml.labels import probabilities_from_output
    from ml.pyfunc import model_input

    features = load_task(task_name).model.features
    tracker, name = resource(defs, "tracker"), registered_name(task_name)

    def predict(version: int, examples: pd.DataFrame) -> np.ndarray:
        model = load_model(tracker, model_version(tracker, name, version))
        return probabilities_from_output(model.predict(model_input(examples, features)))

    return predict


def weekly_auc(examples: pd.DataFrame, static: np.ndarray, judged: Judged) -> pd.DataFrame:
    """Production AUC and log loss per period (`Judged.period`: a week, for a daily task) of
    the flywheel's predictions and of the `static` model's, on the same `examples` (see
    `production_examples`)."""
    if examples.empty:
        return pd.DataFrame(
            columns=[
                "week",
                "examples",
                "label_mean",
                "flywheel",
                "static",
                "flywheel_logloss",
                "static_logloss",
            ]
        )
    spec = judged.spec
    flywheel = judged.flywheel_probabilities(examples)
    week = judged.period(examples[spec.time_column])
    rows = []
    for period in sorted(week.unique()):
        at = np.flatnonzero((week == period).to_numpy())
        group = examples.iloc[at]
        y = group[spec.label].to_numpy()
        flywheel_auc, flywheel_logloss = judged.metrics(y, flywheel[at])
        static_auc, static_logloss = judged.metrics(y, static[at])
        rows.append(
            {
                "week": period,
                "examples": len(group),
                "label_mean": float(np.mean(y.astype(np.float64))),
                "flywheel": flywheel_auc,
                "static": static_auc,
                "flywheel_logloss": flywheel_logloss,
                "static_logloss": static_logloss,
                "champion_versions": ",".join(map(str, sorted(group.model_version.unique()))),
            }
        )
    return pd.DataFrame(rows)


def calibration(judged: Judged, examples: pd.DataFrame, static: np.ndarray) -> pd.DataFrame:
    """Weekly ECE of the flywheel's live scores, of the static model's, and of the scores it
    served corrected for the shift of the late rate (`calibrated`, where its predictions have
    them; sim.judge.calibration), with the corrected scores' log loss."""
    spec = judged.spec
    columns = {"flywheel": judged.flywheel_probabilities(examples), "static": static}
    if "calibrated" in examples:
        columns["corrected"] = examples["calibrated"].to_numpy(dtype=np.float64)
    y = examples[spec.label].to_numpy(dtype=np.float64)
    return weekly_calibration(y, judged.period(examples[spec.time_column]), columns)


def played_examples(
    warehouse: Any, judged: Judged, last: date, after: date | None = None
) -> pd.DataFrame:
    """The features of every example played up to `last` (after `after`, when given), in the
    order of their ids, with the outcome each will have (the label's column)."""
    spec = judged.spec
    day = spec.time_column
    query = f"select * from {spec.features_table} where {day} <= ?"
    params = [last.isoformat()]
    if after is not None:
        query, params = query + f" and {day} > ?", [*params, after.isoformat()]
    examples = warehouse.query(query + f" order by {spec.example_id}", params)
    examples[day] = pd.to_datetime(examples[day]).dt.date
    examples[spec.label] = judged.outcomes(examples[spec.example_id])
    return examples


def reference_auc(
    defs: dg.Definitions,
    task_name: str,
    last: date,
    periods: list[date],
    fitted: Fitted | None = None,
) -> pd.DataFrame:
    """The same-budget reference's and the all-labels ceiling's AUC in each of the report's
    `periods` (see sim.judge.reference), trained on every example played up to `last` and on
    the labels the flywheel got for each landing partition; the periods in `fitted` with the
    same inputs are not fitted again."""
    from sim.judge.reference import reference_by_period

    judged = Judged.of(task_name)
    warehouse = resource(defs, "warehouse")
    examples = played_examples(warehouse, judged, last)
    spend = labels_per_partition(warehouse, judged)
    spec, cadence = judged.spec, judged.task.cadence
    return reference_by_period(
        examples, spend, periods, spec.features, spec.time_column, fitted=fitted, cadence=cadence
    )


def labels_per_partition(warehouse: Any, judged: Judged) -> pd.Series:
    """How many examples of each landing partition the flywheel got a label for, so far."""
    spec, task = judged.spec, judged.task
    spend = warehouse.query(
        f"select f.{spec.time_column} as day, count(distinct l.{spec.example_id}) as labels "
        f"from raw.{task.labels_table} l join {spec.features_table} f using ({spec.example_id}) "
        f"group by f.{spec.time_column}"
    )
    return pd.Series(spend["labels"].to_numpy(), index=pd.to_datetime(spend.day).dt.date)


class BaselinesInBackground:
    """The baselines' fits of each report period made while the simulation plays the partitions
    (see sim.judge.baseline_fits.BaselineFits): after each played partition that ends a period (a
    Sunday for a daily task), the examples played since the last one go to the fitting process,
    with the labels spent on each partition so far and the periods now complete from the
    production period's first on. Its `fits` give the report those whose inputs are still the
    same: the ceiling's (all of them, unless a played partition's features were rebuilt) and the
    reference's (unless a partition's labels came after its period was fitted)."""

    def __init__(
        self, warehouse: Any, judged: Judged, features: FeatureConfig | None = None
    ) -> None:
        """`features`: what the baselines read, by default the task's model's."""
        self.warehouse, self.judged = warehouse, judged
        spec, self.cadence = judged.spec, judged.task.cadence
        self.fits = BaselineFits(features or spec.features, spec.time_column, cadence=self.cadence)
        self.sent: date | None = None  # examples up to this partition were added
        self.periods: set[date] = set()  # periods asked for

    @classmethod
    def of_task(cls, defs: dg.Definitions, task_name: str) -> BaselinesInBackground:
        """For the task's examples in the code location's warehouse."""
        return cls(resource(defs, "warehouse"), Judged.of(task_name))

    def played(self, day: date, production_start: date | None) -> None:
        """The partition starting on `day` was played (production from `production_start`;
        None: not yet)."""
        following = next_start(day, self.cadence)
        if production_start is None or period_end(self.period(day), self.cadence) != following:
            return
        complete, first = [], self.period(production_start)
        while (end := period_end(first, self.cadence)) <= following:
            complete.append(first)
            first = end
        periods = [period for period in complete if period not in self.periods]
        examples = played_examples(self.warehouse, self.judged, day, self.sent)
        self.fits.add(examples, periods, labels_per_partition(self.warehouse, self.judged))
        self.sent = day
        self.periods.update(periods)

    def period(self, day: date) -> date:
        """The first day of the report period holding `day`."""
        return self.judged.period(pd.Series([day])).iloc[0]


def _table(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False, floatfmt=".3f") if len(frame) else "(none)"


def write_report(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    task_name: str,
    production: tuple[date, date],
    static: int,
    out_dir: Path,
    header: list[str],
    horizon: alarms.Horizon | None = None,
    baselines: bool = True,
    fitted: Fitted | None = None,
) -> Report:
    """Compute the report's tables and write `flywheel_report.md`, `weekly_auc.png` and the
    tables as CSV (`weekly.csv`, `retrainings.csv`, `labels.csv`, and for several classes
    `classes.csv`); each retraining is judged on the `horizon`'s partitions after it (default:
    the task's cadence's, see sim.judge.alarms).
    Without `baselines`, the same-budget reference and the ceiling are not trained (their
    columns stay empty); `fitted` holds those of their fits already made (see
    `BaselinesInBackground`)."""
    from ml.plots import weekly_auc_figure

    out_dir.mkdir(parents=True, exist_ok=True)
    judged = Judged.of(task_name)
    horizon = horizon or alarms.HORIZONS[judged.task.cadence]
    examples = production_examples(defs, judged, *production)
    predict = version_scores(defs, task_name)
    static_probs = predict(static, examples) if len(examples) else np.array([])
    weekly = weekly_auc(examples, static_probs, judged)
    if len(examples) and judged.classes is None:
        weekly = weekly.merge(calibration(judged, examples, static_probs), on="week")
    models = ["flywheel", "static", "reference", "ceiling"]
    if len(weekly) and baselines:
        references = reference_auc(defs, task_name, production[1], list(weekly.week), fitted)
        weekly = weekly.merge(references.rename(columns={"period": "week"}), on="week", how="left")
    else:
        weekly = weekly.assign(reference=np.nan, ceiling=np.nan, reference_labels=np.nan)
    first = ["week", "examples", "label_mean", *models]
    weekly = weekly[first + [c for c in weekly.columns if c not in first and c != "ceiling_labels"]]
    weekly = weekly.rename(columns={"reference_labels": "labels_before"})
    runs, labels = retrainings(instance, task_name), label_spend(defs, judged)
    if len(examples) and len(runs):
        runs["champion"] = alarms.champions(runs, examples, judged)
        runs = alarms.judge(runs, examples, predict, judged, production[1], horizon)
    else:
        runs = runs.assign(**{c: np.nan for c in alarms.JUDGEMENT})
    verdicts = alarms.summarize(runs, horizon) if len(runs) else alarms.AlarmSummary.none(horizon)
    long = weekly.melt(id_vars="week", value_vars=models, var_name="model")
    plot = out_dir / "weekly_auc.png"
    by_model = long.rename(columns={"value": "auroc"}).dropna()
    plot.write_bytes(weekly_auc_figure(by_model, retraining_events(runs)))
    tracker = resource(defs, "tracker")
    registry = pd.DataFrame(
        [
            {
                "version": v.version,
                "decision": v.tags.get("flywheel.decision", ""),
                "dataset": tracker.client().get_run(v.run_id).data.tags.get(DATASET_TAG),
                "reason": v.tags.get("flywheel.reason", ""),
            }
            for v in versions(tracker, registered_name(task_name))
        ]
    )
    mean = weekly[[*models, "flywheel_logloss", "static_logloss"]].mean()
    period = judged.period_name
    when, partition = (
        ("each Monday", "day")
        if judged.task.cadence == "daily"
        else (f"at the start of each {period}", period)
    )
    references = (
        f"Same-budget reference {mean.reference:.3f}, all-labels ceiling {mean.ceiling:.3f}: a "
        f"HistGradientBoosting retrained {when} on the same features, from as many "
        f"uniformly random labels of each {partition} as the flywheel got (`labels_before`: "
        f"those before the {period}), and from every outcome."
        if baselines
        else "The same-budget reference and the all-labels ceiling were not trained."
    )
    summary = (
        f"Mean production AUC per {judged.period_name} over {len(weekly)} {judged.period_name}s "
        "(every scored example, outcomes "
        f"from the simulator): flywheel {mean.flywheel:.3f}, static model (version {static}) "
        f"{mean.static:.3f}; log loss {mean.flywheel_logloss:.3f} vs {mean.static_logloss:.3f}. "
        + references
        if len(weekly)
        else f"No production {judged.period_name} was scored."
    )
    classes = judged.class_report(examples, static_probs)  # None for a binary label
    text = "\n\n".join(
        [
            "# Flywheel report",
            "\n".join(header),
            f"## Production AUC by {judged.period_name}\n\n{summary}\n\n"
            f"![AUC by {judged.period_name}]({plot.name})\n\n" + _table(weekly),
            *([classes[0]] if classes else []),
            "## Retrainings\n\n`gain`: the challenger's production AUC minus the champion's "
            f"(`champion`) on every example of the {horizon.partitions} {horizon.unit} after the "
            "event day.\n\n"
            + _table(runs.drop(columns=["judged_examples", "champion_auc", "challenger_auc"])),
            "## Alarms\n\n" + verdicts.describe() + "\n\nMissed: scheduled retrainings that gained "
            f"{alarms.MISSED} or more with no alarm since the last retraining.\n\n"
            + _table(verdicts.missed),
            f"## Labels spent\n\n{int(labels.labelled.sum()) if len(labels) else 0} labels "
            f"of {int(labels.exported.sum()) if len(labels) else 0} tasks exported.\n\n"
            + _table(labels),
            "## Model versions\n\n" + _table(registry),
        ]
    )
    markdown = out_dir / "flywheel_report.md"
    markdown.write_text(text + "\n")
    for name, frame in (("weekly", weekly), ("retrainings", runs), ("labels", labels)):
        frame.to_csv(out_dir / f"{name}.csv", index=False)
    if classes:
        classes[1].to_csv(out_dir / "classes.csv", index=False)
    # Apart from the tables a report compares cell by cell (bench.same_report): the seconds of
    # machine the models took (a policy comparison's compute), the days a check failed on.
    trainings(instance, task_name).to_csv(out_dir / "trainings.csv", index=False)
    history.failed_checks(instance, task_name).to_csv(out_dir / "checks.csv", index=False)
    return Report(weekly, runs, labels, verdicts, markdown, plot, judged.period_name)
