"""Batch scoring: each landing day's scheduled flights scored by the champion."""

from datetime import UTC, datetime

import dagster as dg
import pandas as pd

from pipelines.contracts import TaskSpec
from pipelines.lib.partitions import daily_partitions
from pipelines.lib.registry import champion, load_model, registered_name
from pipelines.lib.tracking import MlflowTracker
from pipelines.lib.warehouse import WAREHOUSE_POOL, DuckDBWarehouse, replace_rows

PREDICTIONS = "flight_predictions"
FEATURES = "fct_flight_features"


def ensure_predictions_table(con) -> None:
    """Create the predictions table (typed like the features' keys) if it does not exist."""
    con.execute(
        f"create table if not exists {PREDICTIONS} as select flight_id, flight_date, "
        "0.0::double as probability, 0::integer as model_version, "
        f"now()::timestamp as scored_at from {FEATURES} where false"
    )


def build_scoring_assets(task: TaskSpec) -> list[dg.AssetsDefinition]:
    """The daily `flight_predictions` asset of `task`."""
    name = registered_name(task.name)

    @dg.asset(
        name=PREDICTIONS,
        group_name="scoring",
        partitions_def=daily_partitions(task),
        deps=[FEATURES],
        pool=WAREHOUSE_POOL,
        # A backfill scores its whole range in one run, like the models it reads.
        backfill_policy=dg.BackfillPolicy.single_run(),
        kinds={"mlflow", "duckdb"},
    )
    def flight_predictions(
        context: dg.AssetExecutionContext, warehouse: DuckDBWarehouse, tracker: MlflowTracker
    ) -> dg.MaterializeResult:
        """Score the landing day's flights with the champion; a re-run replaces the day's rows."""
        from ml.pyfunc import model_input

        days = (context.partition_key_range.start, context.partition_key_range.end)
        current = champion(tracker, name)
        if current is None:
            context.log.warning(f"{name} has no champion yet: {days[0]}..{days[1]} stay unscored")
            return dg.MaterializeResult(
                metadata={"dagster/row_count": 0, "model_version": "none (no champion yet)"}
            )
        with warehouse.connect() as con:
            features = con.execute(
                f"select * from {FEATURES} where flight_date between ? and ?", list(days)
            ).df()
        if features.empty:
            raise dg.Failure(
                f"{FEATURES} has no flights in {days[0]}..{days[1]}: build the day's models first"
            )
        scores = load_model(tracker, current).predict(model_input(features))
        rows = pd.DataFrame(
            {
                "flight_id": features.flight_id,
                "flight_date": features.flight_date,
                "probability": pd.Series(scores, dtype="float64").to_numpy(),
                "model_version": current.version,
                "scored_at": datetime.now(UTC).replace(tzinfo=None),
            }
        )
        with warehouse.connect() as con:
            ensure_predictions_table(con)
            replace_rows(con, PREDICTIONS, "flight_date", days, rows)
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": len(rows),
                "model_version": current.version,
                "model_uri": current.uri,
                "mean_probability": float(rows.probability.mean()),
            }
        )

    return [flight_predictions]
