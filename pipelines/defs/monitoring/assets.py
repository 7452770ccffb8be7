"""Daily monitoring: feature and prediction drift against the champion, its realized performance,
and the excess-loss alarm."""

from datetime import date, timedelta
from functools import lru_cache

import dagster as dg
import pandas as pd

from ml.drift import TrainingProfile
from pipelines.ingestion import RAW_SCHEMA
from pipelines.labeling.selection import UNIFORM_REASONS
from pipelines.lib.asset_keys import task_key, task_prefix
from pipelines.lib.partitions import landing_partitions
from pipelines.lib.registry import PROFILE_ARTIFACT, champion, read_json, registered_name
from pipelines.lib.tracking import MlflowTracker
from pipelines.lib.warehouse import (
    WAREHOUSE_POOL,
    Warehouse,
    WarehouseConnection,
    replace_rows,
)
from pipelines.monitoring import (
    daily_excess_loss,
    drift_table,
    excess_loss_alarm,
    flagged_segments,
    realized_performance,
)
from pipelines.task import Task

GROUP = "monitoring"
DRIFT_TABLE = "monitoring_feature_drift"
FLAGS_TABLE = "drift_flagged_segments"
PERFORMANCE_TABLE = "monitoring_performance"
EXCESS_LOSS_TABLE = "monitoring_excess_loss"


def window(day: str, days: int) -> tuple[str, str]:
    """The first and last day of the `days`-day window ending on `day` (inclusive)."""
    last = date.fromisoformat(day)
    return (last - timedelta(days=days - 1)).isoformat(), last.isoformat()


def _no_champion(context: dg.AssetExecutionContext, name: str) -> dg.MaterializeResult:
    day = context.partition_key_range.end
    context.log.warning(f"{name} has no champion yet: nothing to monitor on {day}")
    return dg.MaterializeResult(metadata={"model_version": "none (no champion yet)"})


def build_monitoring_assets(task: Task) -> list[dg.AssetsDefinition]:
    """`feature_drift` (after scoring), `model_performance` and `excess_loss` (after label
    import), daily."""
    spec, monitoring = task.model, task.monitoring
    name = registered_name(task.name)
    predictions, day_column = spec.predictions_table, spec.time_column
    tasks_table = f"{RAW_SCHEMA}.{task.label_tasks_table}"
    per_class = "".join(f", p.{c}" for c in spec.class_columns)

    # The monitoring assets of label_import_job, partitioned by delivery day.
    after_label_import = {
        "key_prefix": task_prefix(task),
        "group_name": GROUP,
        "partitions_def": landing_partitions(task),
        "deps": [task_key(task, task.labels_table), task_key(task, predictions)],
        "pool": WAREHOUSE_POOL,
        "kinds": {"sql"},
    }

    def uniform_labels(con: WarehouseConnection, where: str, params: list) -> pd.DataFrame:
        """The served scores of the uniformly drawn examples labelled (audit and random picks:
        targeted ones favour hard cases), with their labels, where `where` holds."""
        if not con.has_relation(predictions):
            return pd.DataFrame(columns=["label", "probability", *spec.class_columns])
        return con.execute(
            f"select l.{spec.label} as label, p.probability{per_class} "
            f"from {predictions} p "
            f"join {spec.labels_view} l using ({spec.example_id}) "
            f"join {tasks_table} t using ({spec.example_id}) "
            f"where {where} "
            f"and t.reason in ({', '.join('?' * len(UNIFORM_REASONS))})",
            [*params, *UNIFORM_REASONS],
        ).df()

    @dg.asset(
        key_prefix=task_prefix(task),
        group_name=GROUP,
        partitions_def=landing_partitions(task),
        deps=[task_key(task, spec.features_table), task_key(task, predictions)],
        pool=WAREHOUSE_POOL,
        # In a backfill's single run the window ends on the range's last day.
        backfill_policy=dg.BackfillPolicy.single_run(),
        kinds={"sql"},
    )
    def feature_drift(
        context: dg.AssetExecutionContext, warehouse: Warehouse, tracker: MlflowTracker
    ) -> dg.MaterializeResult:
        """PSI and KS of the recent window's features and scores against the champion's
        training data; flags drifted segments for labeling."""
        current = champion(tracker, name)
        if current is None:
            return _no_champion(context, name)
        profile = training_profile(tracker, current.run_id)
        day = context.partition_key_range.end
        first, last = window(day, monitoring.window_days)
        with warehouse.connect() as con:
            recent = con.execute(
                f"select * from {spec.features_table} where {day_column} between ? and ?",
                [first, last],
            ).df()
            scores = None
            if con.has_relation(predictions):
                scores = con.execute(
                    f"select probability from {predictions} where {day_column} between ? and ? "
                    "and model_version = ?",
                    [first, last, current.version],
                ).df()["probability"]
        if recent.empty:  # nothing happened in the window (months without a rating, say)
            context.log.warning(f"{spec.features_table} has no rows in {first}..{last}")
            return dg.MaterializeResult(
                metadata={
                    "is_drifted": False,
                    "drifted_features": [],
                    "model_version": current.version,
                    "window": f"{first}..{last}",
                    "examples": 0,
                }
            )
        drift = drift_table(profile, recent, scores, spec.features, monitoring)
        flags = flagged_segments(profile, recent, drift, monitoring)
        drift = drift.assign(monitored_on=pd.Timestamp(day).date(), model_version=current.version)
        flags = flags.assign(flagged_at=pd.Timestamp(day), model_version=current.version)
        with warehouse.connect() as con:
            _ensure(con, DRIFT_TABLE, drift)
            _ensure(con, FLAGS_TABLE, flags)
            replace_rows(con, DRIFT_TABLE, "monitored_on", day, drift)
            replace_rows(con, FLAGS_TABLE, "cast(flagged_at as date)", day, flags)
        drifted = drift[drift.is_drifted & (drift.kind != "prediction")].feature.tolist()
        prediction = drift[drift.kind == "prediction"]
        prediction_drifted = bool(prediction.is_drifted.any())
        is_event = len(drifted) >= monitoring.min_drifted_features or prediction_drifted
        return dg.MaterializeResult(
            metadata={
                "is_drifted": is_event,
                "drifted_features": drifted,
                "prediction_psi": float(prediction.psi.iloc[0]) if len(prediction) else None,
                "max_psi": float(drift.psi.max()),
                "model_version": current.version,
                "window": f"{first}..{last}",
                "examples": len(recent),
                "flagged_segments": [
                    f"{kind}:{value}"
                    for kind, value in zip(flags.segment_type, flags.segment_value, strict=True)
                ],
                "drift": dg.MetadataValue.md(
                    drift.drop(columns=["monitored_on", "model_version"]).to_markdown(
                        index=False, floatfmt=".4f"
                    )
                ),
            }
        )

    @dg.asset(**after_label_import)
    def model_performance(
        context: dg.AssetExecutionContext, warehouse: Warehouse, tracker: MlflowTracker
    ) -> dg.MaterializeResult:
        """The champion's realized AUC and log loss on the uniformly sampled labels known so far
        for the recent window's examples, beside the figures it showed at evaluation."""
        current = champion(tracker, name)
        if current is None:
            return _no_champion(context, name)
        first, last = window(context.partition_key, monitoring.performance_window_days)
        with warehouse.connect() as con:
            labelled = uniform_labels(
                con,
                f"p.{day_column} between ? and ? and l.known_at < cast(? as date) + 1 "
                "and p.model_version = ?",
                [first, last, last, current.version],
            )
        metrics = tracker.client().get_run(current.run_id).data.metrics
        expected = {m: metrics.get(f"test/{m}", float("nan")) for m in ("auroc", "logloss")}
        row = realized_performance(labelled, expected, monitoring, spec.features.classes)
        row |= {"monitored_on": pd.Timestamp(last).date(), "model_version": current.version}
        frame = pd.DataFrame([row])
        with warehouse.connect() as con:
            _ensure(con, PERFORMANCE_TABLE, frame)
            replace_rows(con, PERFORMANCE_TABLE, "monitored_on", last, frame)
        return dg.MaterializeResult(
            metadata={
                **{k: v for k, v in row.items() if k != "monitored_on"},
                "window": f"{first}..{last}",
            }
        )

    @dg.asset(**after_label_import)
    def excess_loss(
        context: dg.AssetExecutionContext, warehouse: Warehouse, tracker: MlflowTracker
    ) -> dg.MaterializeResult:
        """The served model's excess loss on the uniformly drawn labels that came in on the day, and
        the CUSUM of the days since the last alarm, which alarms past a threshold set for a known
        false-alarm rate."""
        current = champion(tracker, name)
        if current is None:
            return _no_champion(context, name)
        day = context.partition_key
        with warehouse.connect() as con:
            # Whichever champion served them: after a promotion, the day's labels are of the
            # flights its predecessor scored, and the stream of days goes on.
            labelled = uniform_labels(
                con,
                "l.known_at >= cast(? as date) and l.known_at < cast(? as date) + 1",
                [day, day],
            )
            history = pd.DataFrame(columns=["monitored_on", "excess_loss", "is_alarm"])
            if con.has_relation(EXCESS_LOSS_TABLE):
                history = con.execute(
                    f"select monitored_on, excess_loss, is_alarm from {EXCESS_LOSS_TABLE} "
                    "where monitored_on <> cast(? as date)",
                    [day],
                ).df()
        today = daily_excess_loss(labelled, spec.features.classes)
        row = {"monitored_on": pd.Timestamp(day).date(), "model_version": current.version, **today}
        history = pd.concat([history, pd.DataFrame([row])], ignore_index=True)
        row |= excess_loss_alarm(history, date.fromisoformat(day), monitoring)
        frame = pd.DataFrame([row])
        with warehouse.connect() as con:
            _ensure(con, EXCESS_LOSS_TABLE, frame)
            replace_rows(con, EXCESS_LOSS_TABLE, "monitored_on", day, frame)
        return dg.MaterializeResult(metadata={k: v for k, v in row.items() if k != "monitored_on"})

    return [feature_drift, model_performance, excess_loss]


def training_profile(tracker: MlflowTracker, run_id: str) -> TrainingProfile:
    """The training profile stored on a training run (cached: a run's artifacts are final)."""
    return _training_profile(tracker.tracking_uri, tracker.registry_uri, run_id)


@lru_cache(maxsize=4)
def _training_profile(tracking_uri: str, registry_uri: str | None, run_id: str) -> TrainingProfile:
    tracker = MlflowTracker(tracking_uri=tracking_uri, registry_uri=registry_uri)
    return TrainingProfile.from_dict(read_json(tracker, run_id, PROFILE_ARTIFACT))


def _ensure(con: WarehouseConnection, table: str, like: pd.DataFrame) -> None:
    """Create `table` with the columns of `like` if it does not exist yet."""
    if not con.has_relation(table):
        with con.ddl():
            con.create_table_like(table, like)
