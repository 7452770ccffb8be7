"""What sets the labeling loop going: a sensor on each day's monitoring, a sensor on the inbox.

A day's label export is requested by the day's last daily asset (`feature_drift`, which the
export's selection reads with the day's predictions), not by a wall-clock schedule: the export
then follows the day's data whenever it lands, in real time or in a simulation where a day passes
in seconds, and a day whose warehouse run was retried is exported once it succeeds.
"""

import re
from typing import TYPE_CHECKING

import dagster as dg

from pipelines.defs.ingestion.sensors import changed_files
from pipelines.lib.landing_zone import LandingZone

if TYPE_CHECKING:  # what dg.define_asset_job returns; not exported by dagster
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

INBOX_KEY = re.compile(r"^inbox/(?P<day>\d{4}-\d{2}-\d{2})/[^/]+\.json$")


def build_labeling_triggers(
    export_job: "UnresolvedAssetJobDefinition",
    import_job: "UnresolvedAssetJobDefinition",
    day_built: dg.AssetKey,
    interval_s: int | None = None,
) -> tuple[dg.SensorDefinition, dg.SensorDefinition]:
    """`label_export_sensor` (each day, once `day_built` is materialized for it) and
    `inbox_sensor` (each delivery day whose inbox files changed); evaluated every `interval_s`
    seconds at least (default 30 and 60)."""

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
        description="Requests a label import for each delivery day whose inbox files changed.",
    )
    def inbox_sensor(context: dg.SensorEvaluationContext, label_store: LandingZone):
        changed, cursor = changed_files(label_store.list_files("inbox/"), context.cursor)
        days: dict[str, list[str]] = {}
        for f in changed:
            if m := INBOX_KEY.match(f.key):
                days.setdefault(m["day"], []).append(f"{f.key}@{f.version}")
            else:
                context.log.warning(f"inbox file {f.key!r} is not inbox/YYYY-MM-DD/*.json")
        for day, versions in sorted(days.items()):
            yield dg.RunRequest(run_key="|".join(sorted(versions)), partition_key=day)
        context.update_cursor(cursor)

    return label_export_sensor, inbox_sensor
