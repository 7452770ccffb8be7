"""Load landing files into raw warehouse tables: validate, quarantine bad rows, replace atomically.

One call loads one feed for one or more landing days in a single transaction, so a run either
replaces every partition it names or leaves the warehouse exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd

from pipelines.ingestion.validation import ValidatedFile, validate_file
from pipelines.lib.landing_zone import LandingZone
from pipelines.lib.warehouse import WarehouseConnection
from pipelines.task.contracts import SQL_TYPES, FeedSpec, TaskSpec

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


def ensure_raw_tables(con: WarehouseConnection, task: TaskSpec) -> None:
    """Create the raw schema's tables if absent; fail naming the table if one has drifted.

    One query reads the columns of every table in the raw schema: each run of a day's ingestion,
    label export and import asks."""
    tables = {f.name: raw_table_columns(f) for f in task.feeds.values()}
    tables["quarantine"] = QUARANTINE_COLUMNS
    if task.labels_table:
        tables[task.labels_table] = task.labels_columns
    if task.label_tasks_table:
        tables[task.label_tasks_table] = task.label_tasks_columns
    found = raw_columns(con)
    missing = [n for n in tables if n not in found]
    if missing:
        with con.ddl():
            con.execute(f"create schema if not exists {RAW_SCHEMA}")
            for name in missing:
                ddl = ", ".join(f'"{c}" {con.sql_type(t)}' for c, t in tables[name].items())
                con.execute(f"create table if not exists {RAW_SCHEMA}.{name} ({ddl})")
        found = raw_columns(con)
    for name, columns in tables.items():
        if found.get(name) != list(columns):
            raise RuntimeError(
                f"warehouse table {RAW_SCHEMA}.{name} has columns {found.get(name, [])}, "
                f"the contract expects {list(columns)}: migrate or rebuild it"
            )


def raw_columns(con: WarehouseConnection) -> dict[str, list[str]]:
    """Each table (or view) of the raw schema: its columns in order."""
    rows = con.execute(
        "select table_name, column_name from information_schema.columns "
        "where table_schema = ? order by table_name, ordinal_position",
        [RAW_SCHEMA],
    ).fetchall()
    columns: dict[str, list[str]] = {}
    for table, column in rows:
        columns.setdefault(table, []).append(column)
    return columns


def read_and_validate(
    task: TaskSpec, feed: FeedSpec, days: list[str | None], landing_zone: LandingZone
) -> list[tuple[str | None, ValidatedFile]]:
    """Read and validate the feed's file for each day; the first unparseable file raises."""
    results = []
    for day in days:
        key = feed.landing_key(day)
        data = landing_zone.read_bytes(key)
        end = None if day is None or task.cadence == "daily" else task.partition_end(day)
        results.append((day, validate_file(feed, key, data, task.null_values, day, end)))
    return results


def load_validated(
    con: WarehouseConnection,
    feed: FeedSpec,
    files: list[tuple[str | None, ValidatedFile]],
) -> list[DayLoad]:
    """Replace each day's raw rows and quarantine rows with `files`, in one transaction that
    holds the days' partitions of the feed's table."""
    now = datetime.now(UTC).replace(tzinfo=None)
    table = f"{RAW_SCHEMA}.{feed.name}"
    loads = []
    with con.transaction():
        con.lock_partitions(table, [day or "dimension" for day, _ in files])
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
            con.insert_rows(table, rows)
            rejected = vf.rejected.assign(
                feed=feed.name,
                landing_date=pd.Timestamp(day).date() if day else None,
                source_file=vf.key,
                quarantined_at=now,
            )
            con.insert_rows(f"{RAW_SCHEMA}.quarantine", rejected)
            loads.append(DayLoad(day, vf.key, len(vf.rows), len(vf.rejected), vf.ignored_columns))
    con.refresh_statistics(table)
    return loads
