"""Ingestion assets: one per landing feed, generated from the task's contracts."""

import dagster as dg
import pandas as pd

from pipelines.contracts import FeedSpec, TaskSpec
from pipelines.ingestion import ensure_raw_tables, load_validated, read_and_validate
from pipelines.lib.landing_zone import LandingZone
from pipelines.lib.partitions import daily_partitions
from pipelines.lib.warehouse import WAREHOUSE_POOL, DuckDBWarehouse

GROUP = "ingestion"


def feed_asset_key(feed: FeedSpec) -> dg.AssetKey:
    """The asset key of a feed's raw table (`raw_flights`)."""
    return dg.AssetKey(feed.asset_name)


def build_feed_asset(task: TaskSpec, feed: FeedSpec) -> dg.AssetsDefinition:
    """An asset that loads `feed`'s landing files into its raw table, quarantining bad rows."""
    daily = feed.kind == "daily"
    pattern = feed.landing_key("YYYY-MM-DD") if daily else feed.landing_key()

    @dg.asset(
        key=feed_asset_key(feed),
        group_name=GROUP,
        description=(
            f"{feed.description} Loaded from `{pattern}` into `raw.{feed.name}`; rows that break "
            "the contract go to `raw.quarantine`."
        ),
        partitions_def=daily_partitions(task) if daily else None,
        backfill_policy=dg.BackfillPolicy.single_run() if daily else None,
        pool=WAREHOUSE_POOL,
        kinds={"duckdb", "csv"},
    )
    def _feed_asset(
        context: dg.AssetExecutionContext, landing_zone: LandingZone, warehouse: DuckDBWarehouse
    ) -> dg.MaterializeResult:
        days = list(context.partition_keys) if daily else [None]
        files = read_and_validate(task, feed, days, landing_zone)
        with warehouse.connect() as con:
            ensure_raw_tables(con, task)
            loads = load_validated(con, feed, files)
        loaded = sum(d.rows_loaded for d in loads)
        quarantined = sum(d.rows_quarantined for d in loads)
        if quarantined:
            context.log.warning(f"{quarantined} rows of {feed.name} quarantined (raw.quarantine)")
        per_file = pd.DataFrame([d.__dict__ for d in loads]).drop(columns="ignored_columns")
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": loaded,
                "rows_quarantined": quarantined,
                "files": len(loads),
                "landing_zone": landing_zone.uri,
                "ignored_columns": sorted({c for d in loads for c in d.ignored_columns}),
                "per_file": dg.MetadataValue.md(per_file.head(50).to_markdown(index=False)),
            }
        )

    return _feed_asset


def build_ingestion_assets(task: TaskSpec) -> list[dg.AssetsDefinition]:
    """One ingestion asset per feed of `task`."""
    return [build_feed_asset(task, feed) for feed in task.feeds.values()]
