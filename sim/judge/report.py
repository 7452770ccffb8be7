"""The simulation's report: how the flywheel did against a static model, and what it did.

Every figure comes from the run: predictions and labels from the warehouse, retrainings and
decisions from the Dagster instance, versions from the registry and DVC. Only the simulator
knows every flight's outcome, so production AUC is computed here, on all scored flights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from ml.metrics import auroc, logloss
from pipelines.lib.registry import (
    DATASET_TAG,
    load_model,
    model_version,
    registered_name,
    versions,
)
from pipelines.lib.runs import RETRAINING_JOB
from pipelines.task import load_task
from sim.judge import alarms
from sim.judge.reference import BaselineFits, Fitted
from sim.world.nycflights import is_late


@dataclass
class Report:
    """The report's tables, and where its markdown and plot were written."""

    weekly: pd.DataFrame
    retrainings: pd.DataFrame
    labels: pd.DataFrame
    alarms: alarms.AlarmSummary
    markdown: Path
    plot: Path

    def summary(self) -> list[str]:
        """The few lines the terminal shows at the end: the headline figures and where the
        report, its plot and its tables are."""
        lines = []
        if len(self.weekly):
            mean = self.weekly[["flywheel", "static", "reference", "ceiling"]].mean()
            weeks = f"{len(self.weekly)} production weeks from {self.weekly.week.iloc[0]}"
            auc = f"flywheel {mean.flywheel:.3f}, static model {mean.static:.3f}"
            if not np.isnan(mean.reference):
                auc += f", same-budget reference {mean.reference:.3f}"
                auc += f", all-labels ceiling {mean.ceiling:.3f}"
            lines.append(f"mean weekly AUC over {weeks}: {auc}")
        else:
            lines.append("no production week was scored")
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


def resource(defs: dg.Definitions, key: str) -> Any:
    """The code location's resource `key` as a run would see it: its settings read from the
    environment (a prod resource names them with `dg.EnvVar`)."""
    value = defs.resources[key]
    if isinstance(value, dg.ConfigurableResource):
        return value.process_config_and_initialize()
    return value


def production_flights(defs: dg.Definitions, first: date, last: date) -> pd.DataFrame:
    """Every flight the flywheel scored between `first` and `last`: its features, the
    flywheel's probability, the champion version that gave it, and its outcome."""
    warehouse = resource(defs, "warehouse")
    with warehouse.connect() as con:
        if not con.has_relation("flight_predictions"):
            return pd.DataFrame()  # no model was ever promoted: nothing was scored
    flights = warehouse.query(
        "select f.*, p.probability as flywheel, p.model_version from fct_flight_features f "
        "join flight_predictions p using (flight_id) where f.flight_date between ? and ? "
        "order by f.flight_id",
        [first.isoformat(), last.isoformat()],
    )
    flights["is_late"] = [is_late(f) for f in flights.flight_id]
    return flights


def version_scores(defs: dg.Definitions, task_name: str) -> Callable[[int, pd.DataFrame], Any]:
    """predict(version, flights): the probabilities a registered version gives `flights`."""
    from ml.pyfunc import model_input

    tracker, name = resource(defs, "tracker"), registered_name(task_name)

    def predict(version: int, flights: pd.DataFrame) -> np.ndarray:
        model = load_model(tracker, model_version(tracker, name, version))
        return np.asarray(model.predict(model_input(flights)), dtype=np.float64)

    return predict


def weekly_auc(flights: pd.DataFrame, static: np.ndarray) -> pd.DataFrame:
    """Production AUC per week of the flywheel's predictions and of the `static` model's, on
    the same `flights` (see `production_flights`)."""
    if flights.empty:
        return pd.DataFrame(
            columns=[
                "week",
                "flights",
                "late_rate",
                "flywheel",
                "static",
                "flywheel_logloss",
                "static_logloss",
            ]
        )
    flights = flights.assign(static=static)
    dates = pd.to_datetime(flights.flight_date)
    flights["week"] = (dates - pd.to_timedelta(dates.dt.weekday, unit="D")).dt.date
    rows = []
    for week, group in flights.groupby("week"):
        y = group.is_late.to_numpy()
        both = 0 < y.sum() < len(y)
        rows.append(
            {
                "week": week,
                "flights": len(group),
                "late_rate": float(y.mean()),
                "flywheel": auroc(y, group.flywheel) if both else np.nan,
                "static": auroc(y, group.static) if both else np.nan,
                "flywheel_logloss": logloss(y, group.flywheel),
                "static_logloss": logloss(y, group.static),
                "champion_versions": ",".join(map(str, sorted(group.model_version.unique()))),
            }
        )
    return pd.DataFrame(rows)


def played_flights(
    warehouse: Any, features: FeatureConfig, last: date, after: date | None = None
) -> pd.DataFrame:
    """The features of every flight played up to `last` (after `after`, when given), in the
    order of their ids, with the outcome each will have (`features.label`)."""
    query = "select * from fct_flight_features where flight_date <= ?"
    params = [last.isoformat()]
    if after is not None:
        query, params = query + " and flight_date > ?", [*params, after.isoformat()]
    flights = warehouse.query(query + " order by flight_id", params)
    flights["flight_date"] = pd.to_datetime(flights.flight_date).dt.date
    flights[features.label] = [is_late(f) for f in flights.flight_id]
    return flights


def reference_auc(
    defs: dg.Definitions,
    task_name: str,
    last: date,
    weeks: list[date],
    fitted: Fitted | None = None,
) -> pd.DataFrame:
    """The same-budget reference's and the all-labels ceiling's AUC in each of `weeks` (see
    sim.judge.reference), trained on every flight played up to `last` and on the labels the flywheel
    got for each landing day; the weeks in `fitted` with the same inputs are not fitted again."""
    from sim.judge.reference import weekly_reference

    features = load_task(task_name).model.features
    warehouse = resource(defs, "warehouse")
    flights = played_flights(warehouse, features, last)
    spend = labels_per_day(warehouse)
    return weekly_reference(flights, spend, weeks, features, "flight_date", fitted=fitted)


def labels_per_day(warehouse: Any) -> pd.Series:
    """How many flights of each landing day the flywheel got a label for, so far."""
    spend = warehouse.query(
        "select f.flight_date, count(distinct l.flight_id) as labels from raw.flight_labels l "
        "join fct_flight_features f using (flight_id) group by f.flight_date"
    )
    return pd.Series(spend["labels"].to_numpy(), index=pd.to_datetime(spend.flight_date).dt.date)


class BaselinesInBackground:
    """The baselines' weekly fits made while the simulation plays the days (see
    sim.judge.reference.BaselineFits): after each played Sunday, the flights played since the last
    one go to the fitting process, with the labels spent on each day so far and the weeks now
    complete from the production period's first on. Its `fits` give the report those whose
    inputs are still the same: the ceiling's (all of them, unless a played day's features were
    rebuilt) and the reference's (unless a day's labels came after its week was fitted)."""

    def __init__(self, warehouse: Any, features: FeatureConfig) -> None:
        self.warehouse, self.features = warehouse, features
        self.fits = BaselineFits(features)
        self.sent: date | None = None  # flights up to this day were added
        self.weeks: set[date] = set()  # weeks asked for

    @classmethod
    def of_task(cls, defs: dg.Definitions, task_name: str) -> BaselinesInBackground:
        """For the task's flights in the code location's warehouse."""
        features = load_task(task_name).model.features
        return cls(resource(defs, "warehouse"), features)

    def played(self, day: date, production_start: date | None) -> None:
        """`day` was played (production from `production_start`; None: not yet)."""
        if day.weekday() != 6 or production_start is None:
            return
        first = production_start - timedelta(days=production_start.weekday())
        complete = [first + timedelta(weeks=k) for k in range(((day - first).days + 1) // 7)]
        weeks = [week for week in complete if week not in self.weeks]
        flights = played_flights(self.warehouse, self.features, day, self.sent)
        self.fits.add(flights, weeks, labels_per_day(self.warehouse))
        self.sent = day
        self.weeks.update(weeks)


def _by_run(instance: dg.DagsterInstance, asset: str) -> dict[str, dict[str, object]]:
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=10_000).records
    return {
        r.run_id: {k: v.value for k, v in r.asset_materialization.metadata.items()}
        for r in records
        if r.asset_materialization is not None
    }


def retrainings(instance: dg.DagsterInstance) -> pd.DataFrame:
    """Each retraining run: what triggered it, on which data, and what the gate decided."""
    datasets, challengers = (
        _by_run(instance, "training_dataset"),
        _by_run(instance, "challenger_model"),
    )
    decisions = _by_run(instance, "champion_model")
    rows = []
    records = instance.get_run_records(dg.RunsFilter(job_name=RETRAINING_JOB), ascending=True)
    for record in records:
        run = record.dagster_run
        dataset, challenger = datasets.get(run.run_id, {}), challengers.get(run.run_id, {})
        decision = decisions.get(run.run_id, {})
        seconds = (record.end_time or 0) - (record.start_time or 0)
        rows.append(
            {
                "event_day": run.tags.get("flywheel/event_day", ""),
                "trigger": run.tags.get("flywheel/trigger", ""),
                "status": run.status.value,
                "seconds": round(seconds),
                "dataset": str(dataset.get("dvc_hash", ""))[:12],
                "examples": dataset.get("dagster/row_count", ""),
                "version": challenger.get("registered_model_version", ""),
                "val_auroc": challenger.get("val/auroc", np.nan),
                "decision": decision.get("decision", ""),
                "reason": decision.get("reason", ""),
            }
        )
    return pd.DataFrame(rows)


def label_spend(defs: dg.Definitions) -> pd.DataFrame:
    """Label tasks exported per selection reason, and how many came back labelled."""
    return resource(defs, "warehouse").query(
        "select t.reason, count(*) as exported, count(l.flight_id) as labelled "
        "from raw.label_tasks t left join raw.flight_labels l using (task_id) "
        "group by t.reason order by exported desc"
    )


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
    horizon_days: int = alarms.HORIZON_DAYS,
    min_days: int = alarms.MIN_DAYS,
    baselines: bool = True,
    fitted: Fitted | None = None,
) -> Report:
    """Compute the report's tables and write `flywheel_report.md`, `weekly_auc.png` and the
    tables as CSV (`weekly.csv`, `retrainings.csv`, `labels.csv`); each retraining is judged on
    the `horizon_days` after it (see sim.judge.alarms). Without `baselines`, the same-budget
    reference and the ceiling are not trained (their columns stay empty); `fitted` holds those
    of their fits already made (see `BaselinesInBackground`)."""
    from ml.plots import weekly_auc_figure

    out_dir.mkdir(parents=True, exist_ok=True)
    flights, predict = production_flights(defs, *production), version_scores(defs, task_name)
    weekly = weekly_auc(flights, predict(static, flights) if len(flights) else np.array([]))
    models = ["flywheel", "static", "reference", "ceiling"]
    if len(weekly) and baselines:
        references = reference_auc(defs, task_name, production[1], list(weekly.week), fitted)
        weekly = weekly.merge(references, on="week", how="left")
    else:
        weekly = weekly.assign(reference=np.nan, ceiling=np.nan, reference_labels=np.nan)
    first = ["week", "flights", "late_rate", *models]
    weekly = weekly[first + [c for c in weekly.columns if c not in first and c != "ceiling_labels"]]
    weekly = weekly.rename(columns={"reference_labels": "labels_before"})
    runs, labels = retrainings(instance), label_spend(defs)
    if len(flights) and len(runs):
        runs["champion"] = alarms.champions(runs, flights)
        runs = alarms.judge(runs, flights, predict, production[1], horizon_days, min_days)
    else:
        runs = runs.assign(**{c: np.nan for c in alarms.JUDGEMENT})
    judged = alarms.summarize(runs, horizon_days) if len(runs) else alarms.AlarmSummary.none()
    long = weekly.melt(id_vars="week", value_vars=models, var_name="model")
    plot = out_dir / "weekly_auc.png"
    plot.write_bytes(weekly_auc_figure(long.rename(columns={"value": "auroc"}).dropna()))
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
    references = (
        f"Same-budget reference {mean.reference:.3f}, all-labels ceiling {mean.ceiling:.3f}: a "
        "HistGradientBoosting retrained each Monday on the same features, from as many "
        "uniformly random labels of each day as the flywheel got (`labels_before`: those "
        "before the week), and from every outcome."
        if baselines
        else "The same-budget reference and the all-labels ceiling were not trained."
    )
    summary = (
        f"Mean weekly production AUC over {len(weekly)} weeks (every scored flight, outcomes "
        f"from the simulator): flywheel {mean.flywheel:.3f}, static model (version {static}) "
        f"{mean.static:.3f}; log loss {mean.flywheel_logloss:.3f} vs {mean.static_logloss:.3f}. "
        + references
        if len(weekly)
        else "No production week was scored."
    )
    text = "\n\n".join(
        [
            "# Flywheel report",
            "\n".join(header),
            f"## Production AUC by week\n\n{summary}\n\n![weekly AUC]({plot.name})\n\n"
            + _table(weekly),
            "## Retrainings\n\n`gain`: the challenger's production AUC minus the champion's "
            f"(`champion`) on every flight of the {horizon_days} days after the event "
            "day.\n\n"
            + _table(runs.drop(columns=["judged_flights", "champion_auc", "challenger_auc"])),
            "## Alarms\n\n" + judged.describe() + "\n\nMissed: scheduled retrainings that gained "
            f"{alarms.MISSED} or more with no alarm since the last retraining.\n\n"
            + _table(judged.missed),
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
    return Report(weekly, runs, labels, judged, markdown, plot)
