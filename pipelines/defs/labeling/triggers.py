"""What sets the labeling loop going: a daily export schedule and a sensor on the inbox."""

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
    export_job: "UnresolvedAssetJobDefinition", import_job: "UnresolvedAssetJobDefinition"
) -> tuple[dg.ScheduleDefinition, dg.SensorDefinition]:
    """`label_export_schedule` (each day's flights, once built) and `inbox_sensor`."""
    export_schedule = dg.build_schedule_from_partitioned_job(
        export_job, name="label_export_schedule", hour_of_day=23, minute_of_hour=30
    )

    @dg.sensor(
        name="inbox_sensor",
        job=import_job,
        minimum_interval_seconds=60,
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

    return export_schedule, inbox_sensor
