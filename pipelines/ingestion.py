"""Load landing files into raw warehouse tables: validate, quarantine bad rows, replace atomically.

One call loads one feed for one or more landing days in a single transaction, so a run either
replaces every partition it names or leaves the warehouse exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import pandas as pd

from pipelines.contracts import SQL_TYPES, FeedSpec, TaskSpec
from pipelines.lib.landing_zone import LandingZone
from pipelines.validation import ValidatedFile, validate_file

RAW_SCHEMA = "raw"
QUARANTINE_COLUMNS = {
    "feed": "VARCHAR",
    "landing_date": "DATE",
    "source_file": "VARCHAR",
    "source_line": "BIGINT",
    "reason": "VARCHAR",
    "record": "VARCHAR",
    "quarantined_at": "TIMESTAMP",
}
LINEAGE_COLUMNS = {"_source_file": "VARCHAR", "_source_line": "BIGINT", "_ingested_at": "TIMESTAMP"}


@dataclass(frozen=True)
class DayLoad:
    """What one landing file contributed: rows loaded and rows quarantined."""

    landing_date: str | None
    source_file: str
    rows_loaded: int
    rows_quarantined: int
    ignored_columns: tuple[str, ...]


def raw_table_columns(feed: FeedSpec) -> dict[str, str]:
    """The raw table's columns: the contract's, then the landing day (daily feeds) and lineage."""
    columns = {c.name: SQL_TYPES[c.type] for c in feed.columns}
    if feed.kind == "daily":
        columns["_landing_date"] = "DATE"
    return columns | LINEAGE_COLUMNS


def ensure_raw_tables(con: duckdb.DuckDBPyConnection, task: TaskSpec) -> None:
    """Create the raw schema's tables if absent; fail naming the table if one has drifted."""
    con.execute(f"create schema if not exists {RAW_SCHEMA}")
    tables = {f.name: raw_table_columns(f) for f in task.feeds.values()}
    tables["quarantine"] = QUARANTINE_COLUMNS
    if task.labels_table:
        tables[task.labels_table] = task.labels_columns
    if task.label_tasks_table:
        tables[task.label_tasks_table] = task.label_tasks_columns
    for name, columns in tables.items():
        ddl = ", ".join(f'"{c}" {t}' for c, t in columns.items())
        con.execute(f"create table if not exists {RAW_SCHEMA}.{name} ({ddl})")
        found = con.execute(
            "select column_name from information_schema.columns "
            "where table_schema = ? and table_name = ? order by ordinal_position",
            [RAW_SCHEMA, name],
        ).fetchall()
        if [c for (c,) in found] != list(columns):
            raise RuntimeError(
                f"warehouse table {RAW_SCHEMA}.{name} has columns {[c for (c,) in found]}, "
                f"the contract expects {list(columns)}: migrate or rebuild it"
            )


def read_and_validate(
    task: TaskSpec, feed: FeedSpec, days: list[str | None], landing_zone: LandingZone
) -> list[tuple[str | None, ValidatedFile]]:
    """Read and validate the feed's file for each day; the first unparseable file raises."""
    results = []
    for day in days:
        key = feed.landing_key(day)
        results.append(
            (day, validate_file(feed, key, landing_zone.read_bytes(key), task.null_values, day))
        )
    return results


def load_validated(
    con: duckdb.DuckDBPyConnection,
    feed: FeedSpec,
    files: list[tuple[str | None, ValidatedFile]],
) -> list[DayLoad]:
    """Replace each day's raw rows and quarantine rows with `files`, in one transaction."""
    now = datetime.now(UTC).replace(tzinfo=None)
    table = f"{RAW_SCHEMA}.{feed.name}"
    loads = []
    con.execute("begin transaction")
    try:
        for day, vf in files:
            if feed.kind == "daily":
                con.execute(f"delete from {table} where _landing_date = ?", [day])
                con.execute(
                    f"delete from {RAW_SCHEMA}.quarantine where feed = ? and landing_date = ?",
                    [feed.name, day],
                )
            else:
                con.execute(f"delete from {table}")
                con.execute(
                    f"delete from {RAW_SCHEMA}.quarantine where feed = ? and landing_date is null",
                    [feed.name],
                )
            rows = vf.rows.assign(_source_file=vf.key, _ingested_at=now)
            if feed.kind == "daily":
                rows["_landing_date"] = pd.Timestamp(day).date()
            con.register("_rows", rows)
            con.execute(f"insert into {table} by name select * from _rows")
            con.unregister("_rows")
            rejected = vf.rejected.assign(
                feed=feed.name,
                landing_date=pd.Timestamp(day).date() if day else None,
                source_file=vf.key,
                quarantined_at=now,
            )
            con.register("_rejected", rejected)
            con.execute(f"insert into {RAW_SCHEMA}.quarantine by name select * from _rejected")
            con.unregister("_rejected")
            loads.append(DayLoad(day, vf.key, len(vf.rows), len(vf.rejected), vf.ignored_columns))
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
    return loads
