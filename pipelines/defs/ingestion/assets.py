"""Ingestion assets: one per landing feed, generated from the task's contracts."""

import dagster as dg
import pandas as pd

from pipelines.defs.ingestion.checks import (
    FRESHNESS,
    HUMIDITY,
    VOLUME,
    feed_check_specs,
    freshness_result,
    humidity_result,
    judge_files,
    loaded_rows,
    refuse_redeliveries,
    volume_result,
)
from pipelines.ingestion import ensure_raw_tables, load_validated, read_and_validate
from pipelines.lib.asset_keys import task_key
from pipelines.lib.landing_zone import LandingZone
from pipelines.lib.partitions import landing_partitions
from pipelines.lib.warehouse import WAREHOUSE_POOL, Warehouse
from pipelines.task.contracts import FeedSpec, TaskSpec
from pipelines.task.feed_checks import FeedChecks, baseline_days

GROUP = "ingestion"


def feed_asset_key(task: TaskSpec, feed: FeedSpec) -> dg.AssetKey:
    """The asset key of a feed's raw table (`<task>/raw_<feed>`)."""
    return task_key(task, feed.asset_name)


def build_feed_asset(task: TaskSpec, feed: FeedSpec, checks: FeedChecks) -> dg.AssetsDefinition:
    """An asset that loads `feed`'s landing files into its raw table, quarantining bad rows;
    a daily feed's asset also checks the volume and freshness of its files (and, where the task
    has a humidity rule for it, their humidity against temperature and dew point, judged
    before the load: a failing day is quarantined whole where the rule says so)."""
    daily = feed.kind == "daily"
    pattern = feed.landing_key("YYYY-MM-DD") if daily else feed.landing_key()
    key = feed_asset_key(task, feed)
    humidity = checks.humidity.get(feed.name)
    specs = (
        feed_check_specs(key, checks.volume[feed.name], checks.freshness, humidity)
        if daily
        else None
    )

    @dg.asset(
        key=key,
        group_name=GROUP,
        description=(
            f"{feed.description} Loaded from `{pattern}` into `raw.{feed.name}`; rows that break "
            "the contract go to `raw.quarantine`."
        ),
        partitions_def=landing_partitions(task) if daily else None,
        backfill_policy=dg.BackfillPolicy.single_run() if daily else None,
        pool=WAREHOUSE_POOL,
        kinds={"sql", "csv"},
        check_specs=specs,
    )
    def _feed_asset(
        context: dg.AssetExecutionContext, landing_zone: LandingZone, warehouse: Warehouse
    ) -> dg.MaterializeResult:
        days = list(context.partition_keys) if daily else [None]
        files = read_and_validate(task, feed, days, landing_zone)
        verdicts = judge_files(files, humidity) if daily and humidity is not None else []
        if humidity is not None and humidity.quarantine:
            # A day in other units than the contract's is loaded as one the feed missed.
            failed = {v.day: v.reason for v in verdicts if not v.passed}
            files = [
                (day, vf.quarantined(f"humidity: {failed[str(day)]}") if str(day) in failed else vf)
                for day, vf in files
            ]
        selected = {k.name for k in context.selected_asset_check_keys}
        with warehouse.connect() as con:
            ensure_raw_tables(con, task)
            if daily and VOLUME in selected:
                baseline = _baseline(task, days, checks, feed)
                refuse_redeliveries(con, task, feed, files, baseline, checks.volume[feed.name])
            loads = load_validated(con, feed, files)
            # The baseline is read after the commit: days loaded by this same run count too.
            history = loaded_rows(con, feed, _baseline(task, days, checks, feed)) if daily else {}
        loaded = sum(d.rows_loaded for d in loads)
        quarantined = sum(d.rows_quarantined for d in loads)
        if quarantined:
            context.log.warning(f"{quarantined} rows of {feed.name} quarantined (raw.quarantine)")
        per_file = pd.DataFrame([d.__dict__ for d in loads]).drop(columns="ignored_columns")
        results = []
        if VOLUME in selected:
            results.append(volume_result(key, task, loads, history, checks.volume[feed.name]))
        if FRESHNESS in selected:
            listing = landing_zone.list_files()
            results.append(freshness_result(key, task, feed, listing, checks.freshness))
        if HUMIDITY in selected and humidity is not None:
            results.append(humidity_result(key, verdicts, humidity))
        for failed in (r for r in results if not r.passed):
            context.log.warning(
                f"{failed.check_name} check {failed.severity.value}: {failed.description}"
            )
        return dg.MaterializeResult(
            check_results=results,
            metadata={
                "dagster/row_count": loaded,
                "rows_quarantined": quarantined,
                "files": len(loads),
                "landing_zone": landing_zone.uri,
                "ignored_columns": sorted({c for d in loads for c in d.ignored_columns}),
                "per_file": dg.MetadataValue.md(per_file.head(50).to_markdown(index=False)),
            },
        )

    return _feed_asset


def _baseline(task: TaskSpec, days: list, checks: FeedChecks, feed: FeedSpec) -> set[str]:
    count = checks.volume[feed.name].trailing
    return {b for d in days for b in baseline_days(d, count, task.cadence, task.start_date)}


def build_ingestion_assets(task: TaskSpec) -> list[dg.AssetsDefinition]:
    """One ingestion asset per feed of `task`."""
    checks = task.feed_checks
    return [build_feed_asset(task, feed, checks) for feed in task.feeds.values()]
