"""`landing_sensor`: turn new or replaced landing files into partition runs, exactly once, and
report each daily feed's freshness whenever the landing zone's daily files change."""

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import dagster as dg

from pipelines.defs.ingestion.checks import freshness_evaluations
from pipelines.lib.asset_keys import task_key
from pipelines.lib.landing_zone import LandingZone, held_back, seen_keys, settled_changes
from pipelines.task.contracts import DAILY_KEY, DIMENSION_KEY, TaskSpec

if TYPE_CHECKING:  # what dg.define_asset_job returns; not exported by dagster
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )


def build_landing_sensor(
    task: TaskSpec,
    daily_job: "UnresolvedAssetJobDefinition",
    dimension_job: "UnresolvedAssetJobDefinition",
    daily_downstream: Sequence[dg.AssetKey],
    dimension_downstream: Sequence[dg.AssetKey],
    interval_s: int | None = None,
) -> dg.SensorDefinition:
    """A sensor that requests one run per landing day whose files are new or replaced, and
    reports the daily feeds' freshness checks when their files change; evaluated every
    `interval_s` seconds at least (default 30). New files are taken once the landing zone lists
    the same files at two evaluations in a row, so a landing of several files is taken whole.

    A task's days are built on its dimension tables (an example's films or airports), so until the
    dimension run has built `dimension_downstream` once, landing days are held back: a day's run
    started beside the first dimension run would read views not created yet. The days are
    taken at the first evaluation after it has."""
    freshness = task.feed_checks.freshness

    @dg.sensor(
        name="landing_sensor",
        jobs=[daily_job, dimension_job],
        minimum_interval_seconds=interval_s or 30,
        description="Requests ingestion and warehouse runs for new or replaced landing files; "
        "reports each daily feed's freshness against the landing frontier.",
    )
    def landing_sensor(
        context: dg.SensorEvaluationContext, landing_zone: LandingZone
    ) -> dg.SensorResult:
        changed_days: dict[str, list[tuple[str, str]]] = defaultdict(list)
        changed_dimension: list[tuple[str, str]] = []
        files = landing_zone.list_files()
        found = settled_changes(files, context.cursor, lambda key: task.match_key(key) is not None)
        if found.waiting:
            return dg.SensorResult(
                cursor=found.cursor,
                skip_reason=f"{found.waiting} new or replaced landing file(s): taken at the next "
                "evaluation if the landing zone lists the same files then",
            )
        for f in found.files:
            match = task.match_key(f.key)
            if match is None:
                context.log.warning(
                    f"landing file {f.key!r} fits no feed of task {task.name!r} "
                    f"(expected {DAILY_KEY.pattern} or {DIMENSION_KEY.pattern} for feeds "
                    f"{sorted(task.feeds)}, days {task.start_date}..{task.end_date}): not ingested"
                )
                continue
            feed, day = match
            if day is None:
                changed_dimension.append((feed.asset_name, f"{f.key}@{f.version}"))
            else:
                changed_days[day].append((feed.asset_name, f"{f.key}@{f.version}"))
        cursor = found.cursor
        if (
            changed_days
            and task.dimension_feeds
            and not _built(context.instance, dimension_downstream)
        ):
            held = [f.key for f in found.files if DAILY_KEY.match(f.key)]
            cursor = held_back(found, context.cursor, held)
            context.log.info(
                f"{len(changed_days)} landing day(s) held until {dimension_job.name} has built "
                f"{', '.join(k.to_user_string() for k in dimension_downstream)} once"
                + ("" if changed_dimension else ": land the task's dimension files if missing")
            )
            changed_days.clear()
        # Dimension tables first: the run queue starts runs in the order they are requested.
        requests = (
            [_request(task, dimension_job.name, None, changed_dimension, dimension_downstream)]
            if changed_dimension
            else []
        )
        requests += [
            _request(task, daily_job.name, day, changed_days[day], daily_downstream)
            for day in sorted(changed_days)
        ]
        # Freshness depends only on which daily files exist, so it is reported when that set
        # changes, not on every tick; a run that later ingests the feed reports it again.
        daily = [f for f in files if DAILY_KEY.match(f.key)]
        reported = {k for k in seen_keys(context.cursor) if DAILY_KEY.match(k)} != {
            f.key for f in daily
        }
        return dg.SensorResult(
            run_requests=requests,
            cursor=cursor,
            asset_events=freshness_evaluations(task, daily, freshness) if reported else [],
        )

    return landing_sensor


def _built(instance: dg.DagsterInstance, keys: Sequence[dg.AssetKey]) -> bool:
    """Whether every asset of `keys` has been materialized."""
    return all(instance.get_latest_materialization_event(key) is not None for key in keys)


def _request(
    task: TaskSpec,
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
        asset_selection=[task_key(task, t) for t in tables] + list(downstream),
        tags={"flywheel/trigger": "landing", "flywheel/files": ",".join(tables)},
    )
