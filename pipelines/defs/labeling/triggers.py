"""What sets the labeling loop going: a sensor on each day's monitoring, a sensor on deliveries.

A day's label export is requested by the day's last daily asset (`feature_drift`, which the
export's selection reads with the day's predictions), not by a wall-clock schedule: the export
then follows the day's data whenever it lands, in real time or in a simulation where a day passes
in seconds, and a day whose warehouse run was retried is exported once it succeeds.
"""

import re
from typing import TYPE_CHECKING

import dagster as dg

from pipelines.lib.label_exchange import LabelExchange

if TYPE_CHECKING:  # what dg.define_asset_job returns; not exported by dagster
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def build_labeling_triggers(
    export_job: "UnresolvedAssetJobDefinition",
    import_job: "UnresolvedAssetJobDefinition",
    day_built: dg.AssetKey,
    exported: dg.AssetKey,
    interval_s: int | None = None,
) -> tuple[dg.SensorDefinition, dg.SensorDefinition]:
    """`label_export_sensor` (each day, once `day_built` is materialized for it) and
    `inbox_sensor` (each delivery day the label exchange received something on: an inbox file
    that changed, or new annotations in Label Studio, delivered on the newest day `exported`);
    evaluated every `interval_s` seconds at least (default 30 and 60)."""

    @dg.sensor(
        name="label_export_sensor",
        job=export_job,
        minimum_interval_seconds=interval_s or 30,
        description=f"Requests a day's label export once its {day_built.to_user_string()} "
        "is materialized (once per day).",
    )
    def label_export_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        after = int(context.cursor) if context.cursor else None
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=day_built, after_storage_id=after),
            limit=1000,
            ascending=True,
        ).records
        days: dict[str, None] = {}
        for record in records:
            after = record.storage_id
            if record.partition_key is not None:
                days[record.partition_key] = None
        requests = [dg.RunRequest(run_key=f"label_export:{day}", partition_key=day) for day in days]
        return dg.SensorResult(
            run_requests=requests, cursor=str(after) if after is not None else None
        )

    @dg.sensor(
        name="inbox_sensor",
        job=import_job,
        minimum_interval_seconds=interval_s or 60,
        description="Requests a label import for each delivery day the label exchange received "
        "annotations on.",
    )
    def inbox_sensor(context: dg.SensorEvaluationContext, label_exchange: LabelExchange):
        changed, cursor = label_exchange.changes(context.cursor)
        days: dict[str, list[str]] = {}
        newest: str | None = None
        for day, signature in changed:
            if day is None:  # delivered now: on the newest day exported
                if newest is None:
                    partitions = context.instance.get_materialized_partitions(exported)
                    newest = max(partitions, default="")
                day = newest
            if DAY.match(day):
                days.setdefault(day, []).append(signature)
            else:
                context.log.warning(f"delivery {signature!r} names no YYYY-MM-DD day")
        for day, signatures in sorted(days.items()):
            yield dg.RunRequest(run_key="|".join(sorted(signatures)), partition_key=day)
        context.update_cursor(cursor)

    return label_export_sensor, inbox_sensor
