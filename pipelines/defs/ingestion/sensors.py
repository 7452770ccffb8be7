"""`landing_sensor`: turn new or replaced landing files into partition runs, exactly once."""

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import dagster as dg

from pipelines.contracts import DAILY_KEY, REFERENCE_KEY, TaskSpec
from pipelines.lib.landing_zone import LandingFile, LandingZone

if TYPE_CHECKING:  # what dg.define_asset_job returns; not exported by dagster
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )


def build_landing_sensor(
    task: TaskSpec,
    daily_job: "UnresolvedAssetJobDefinition",
    reference_job: "UnresolvedAssetJobDefinition",
    daily_downstream: Sequence[dg.AssetKey],
    reference_downstream: Sequence[dg.AssetKey],
) -> dg.SensorDefinition:
    """A sensor that requests one run per landing day whose files are new or replaced."""

    @dg.sensor(
        name="landing_sensor",
        jobs=[daily_job, reference_job],
        minimum_interval_seconds=30,
        description="Requests ingestion and warehouse runs for new or replaced landing files.",
    )
    def landing_sensor(context: dg.SensorEvaluationContext, landing_zone: LandingZone):
        changed_days: dict[str, list[tuple[str, str]]] = defaultdict(list)
        changed_reference: list[tuple[str, str]] = []
        changed, cursor = changed_files(landing_zone.list_files(), context.cursor)
        for f in changed:
            match = task.match_key(f.key)
            if match is None:
                context.log.warning(
                    f"landing file {f.key!r} fits no feed of task {task.name!r} "
                    f"(expected {DAILY_KEY.pattern} or {REFERENCE_KEY.pattern} for feeds "
                    f"{sorted(task.feeds)}, days {task.start_date}..{task.end_date}): not ingested"
                )
                continue
            feed, day = match
            if day is None:
                changed_reference.append((feed.asset_name, f"{f.key}@{f.version}"))
            else:
                changed_days[day].append((feed.asset_name, f"{f.key}@{f.version}"))
        # Reference data first: the run queue starts runs in the order they are requested.
        if changed_reference:
            yield _request(reference_job.name, None, changed_reference, reference_downstream)
        for day in sorted(changed_days):
            yield _request(daily_job.name, day, changed_days[day], daily_downstream)
        context.update_cursor(cursor)

    return landing_sensor


def changed_files(files: list[LandingFile], cursor: str | None) -> tuple[list[LandingFile], str]:
    """The files new or replaced since `cursor`, and the cursor that marks them seen."""
    # The cursor maps every file seen to its version: a replaced file (new version) is taken
    # again, an unchanged one never twice, and nothing is skipped whatever the listing order.
    seen: dict[str, str] = json.loads(cursor) if cursor else {}
    changed = [f for f in files if seen.get(f.key) != f.version]
    return changed, json.dumps({f.key: f.version for f in files}, sort_keys=True)


def _request(
    job_name: str,
    partition_key: str | None,
    changes: list[tuple[str, str]],
    downstream: Sequence[dg.AssetKey],
) -> dg.RunRequest:
    tables = sorted({table for table, _ in changes})
    return dg.RunRequest(
        run_key="|".join(sorted(version for _, version in changes)),
        job_name=job_name,
        partition_key=partition_key,
        asset_selection=[dg.AssetKey(t) for t in tables] + list(downstream),
        tags={"flywheel/trigger": "landing", "flywheel/files": ",".join(tables)},
    )
