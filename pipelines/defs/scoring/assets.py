"""Batch scoring: each landing day's examples scored by the champion."""

from collections.abc import Callable
from datetime import UTC, datetime

import dagster as dg
import numpy as np
import pandas as pd

from pipelines.lib.asset_keys import task_key, task_prefix
from pipelines.lib.partitions import landing_partitions
from pipelines.lib.registry import DIGEST_TAG, champion, registered_name, serving_model
from pipelines.lib.tracking import MlflowTracker
from pipelines.lib.warehouse import WAREHOUSE_POOL, Warehouse, WarehouseConnection, replace_rows
from pipelines.monitoring.recalibration import CALIBRATED, recalibrate, uniform_labels, window_of
from pipelines.task import Task
from pipelines.task.model_spec import ModelSpec


def ensure_predictions_table(con: WarehouseConnection, spec: ModelSpec) -> None:
    """Create the predictions table (keys typed like the features') if it does not exist: the
    score (`probability`: P(true), or the expected class over K - 1) and, for K classes, each
    class's probability; for two, P(true) moved to the recent prior (`calibrated_probability`,
    pipelines/monitoring/recalibration.py), added to a table made before it had one."""
    table = spec.predictions_table
    binary = not spec.class_columns
    if con.has_relation(table):
        if binary and CALIBRATED not in con.columns(table):
            with con.ddl():
                con.execute(f"alter table {table} add column {CALIBRATED} double precision")
        return
    per_class = "".join(f"cast(0.0 as double precision) as {c}, " for c in spec.class_columns)
    calibrated = f"cast(0.0 as double precision) as {CALIBRATED}, " if binary else ""
    with con.ddl():
        con.execute(
            f"create table if not exists {table} as "
            f"select {spec.example_id}, {spec.time_column}, "
            f"cast(0.0 as double precision) as probability, {per_class}{calibrated}"
            "cast(0 as integer) as model_version, "
            f"cast(now() as timestamp) as scored_at from {spec.features_table} where false"
        )


def build_scoring_assets(task: Task) -> list[dg.AssetsDefinition]:
    """The daily predictions asset of `task`, named like its table."""
    spec = task.model
    name = registered_name(task.name)

    @dg.asset(
        name=spec.predictions_table,
        key_prefix=task_prefix(task),
        group_name="scoring",
        partitions_def=landing_partitions(task),
        deps=[task_key(task, spec.features_table)],
        pool=WAREHOUSE_POOL,
        # A backfill scores its whole range in one run, like the models it reads.
        backfill_policy=dg.BackfillPolicy.single_run(),
        kinds={"mlflow", "sql"},
    )
    def predictions(
        context: dg.AssetExecutionContext, warehouse: Warehouse, tracker: MlflowTracker
    ) -> dg.MaterializeResult:
        """Score the landing day's examples with the champion; a re-run replaces the day's rows."""
        days = (context.partition_key_range.start, context.partition_key_range.end)
        current = champion(tracker, name)
        if current is None:
            context.log.warning(f"{name} has no champion yet: {days[0]}..{days[1]} stay unscored")
            return dg.MaterializeResult(
                metadata={"dagster/row_count": 0, "model_version": "none (no champion yet)"}
            )
        with warehouse.connect() as con:
            features = con.execute(
                f"select * from {spec.features_table} where {spec.time_column} between ? and ?",
                list(days),
            ).df()
        if features.empty:
            built = context.instance.get_materialized_partitions(
                task_key(task, spec.features_table)
            )
            if not set(context.partition_keys) <= built:
                raise dg.Failure(
                    f"{spec.features_table} has no rows in {days[0]}..{days[1]}: "
                    "build the day's models first"
                )
            # Built, and empty: a partition in which nothing happened (a month without ratings).
            context.log.warning(f"{spec.features_table} has no rows in {days[0]}..{days[1]}")
            return dg.MaterializeResult(
                metadata={"dagster/row_count": 0, "model_version": current.version}
            )
        # Torch and MLflow's pyfunc only once there is a model to score with: a process per run
        # would import them for nothing before the first model.
        from ml.labels import probabilities_from_output, score_of
        from ml.pyfunc import model_input

        # A champion whose stored files fail their check is refused; the champion before it
        # serves meanwhile, and each refusal is an error in the run's log.
        served, model, refused = serving_model(tracker, current)
        for why in refused:
            context.log.error(f"refused to score with {why}; serving version {served.version}")

        def score(frame: pd.DataFrame) -> np.ndarray:
            # One score per example: P(true), or the expected class over K - 1 (ml.labels).
            output = model.predict(model_input(frame, spec.features))
            return probabilities_from_output(output)

        probs = score(features)
        per_class = {c: probs[:, k] for k, c in enumerate(spec.class_columns)}
        rows = pd.DataFrame(
            {
                spec.example_id: features[spec.example_id],
                spec.time_column: features[spec.time_column],
                "probability": pd.Series(score_of(probs), dtype="float64").to_numpy(),
                **per_class,
                "model_version": served.version,
                "scored_at": datetime.now(UTC).replace(tzinfo=None),
            }
        )
        recalibrated = {}
        if not spec.class_columns:
            rows[CALIBRATED], recalibrated = calibrated(warehouse, task, rows, score)
        with warehouse.connect() as con:
            ensure_predictions_table(con, spec)
            replace_rows(con, spec.predictions_table, spec.time_column, days, rows)
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": len(rows),
                "model_version": served.version,
                "model_uri": served.uri,
                "artifact_sha256": served.tags.get(DIGEST_TAG, "not recorded"),
                **({"refused_champion": current.version} if refused else {}),
                "mean_probability": float(rows.probability.mean()),
                **recalibrated,
            }
        )

    return [predictions]


def calibrated(
    warehouse: Warehouse,
    task: Task,
    rows: pd.DataFrame,
    score: Callable[[pd.DataFrame], np.ndarray],
) -> tuple[np.ndarray, dict[str, object]]:
    """A binary task's scored `rows` moved to the recent prior
    (pipelines/monitoring/recalibration.py), and what to record of it: the newest day's shift and
    the labels behind it, the mean calibrated probability, and the AUC the calibrated scores
    expect (a label-free estimate of the day's performance, ml.metrics.expected_auroc)."""
    from ml.metrics import expected_auroc

    monitoring, day = task.monitoring, task.model.time_column
    days = pd.to_datetime(rows[day]).dt.date
    first, end = window_of(days.min(), days.max(), monitoring.recalibration_days)
    with warehouse.connect(read_only=True) as con:
        labelled = uniform_labels(con, task, first, end)
    probs, shifts = recalibrate(
        days,
        rows.probability.to_numpy(),
        labelled,
        score,
        monitoring.recalibration_days,
        monitoring.recalibration_min_labels,
    )
    newest = shifts.get(str(days.max()), (0.0, 0))
    return probs, {
        "prior_shift": round(newest[0], 4),
        "recalibration_labels": newest[1],
        "mean_calibrated_probability": float(probs.mean()),
        "expected_auroc": expected_auroc(probs) if len(probs) > 1 else None,
    }
