"""The warehouse: a DuckDB database (a local file by default, MotherDuck or a mounted file in prod).

DuckDB lets one process write at a time. Writers are serialised by the `warehouse` concurrency
pool; `connect` also waits (bounded) for a lock held by something outside Dagster.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd

WAREHOUSE_POOL = "warehouse"


class WarehouseLockedError(RuntimeError):
    """The warehouse stayed locked by another process for longer than the configured wait."""


class DuckDBWarehouse(dg.ConfigurableResource):
    """A DuckDB warehouse file; the same database dbt builds its models in."""

    path: str
    lock_timeout_s: float = 120.0

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection, waiting up to `lock_timeout_s` for another process's lock to clear."""
        if not self.path.startswith("md:"):
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(self.path, read_only=read_only)
                break
            except duckdb.IOException as e:
                if "lock" not in str(e).lower():
                    raise
                if time.monotonic() >= deadline:
                    raise WarehouseLockedError(
                        f"warehouse {self.path} stayed locked for {self.lock_timeout_s:.0f}s: {e}"
                    ) from e
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        try:
            yield con
        finally:
            con.close()

    def wait_until_free(self) -> None:
        """Wait (at most `lock_timeout_s`) until no other process holds the warehouse's lock.

        For a tool that opens the warehouse itself and fails at once on a lock (dbt): the dbt
        process of a run killed by SIGKILL outlives the run for a while and keeps its lock.
        """
        with self.connect():
            pass

    def query(self, sql: str, params: list | None = None) -> pd.DataFrame:
        """Run a read query and return its result as a DataFrame."""
        with self.connect() as con:
            return con.execute(sql, params or []).df()


def has_relation(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether a table or view called `name` exists."""
    (found,) = con.execute(
        "select count(*) from information_schema.tables where table_name = ?", [name]
    ).fetchall()
    return bool(found[0])


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: pd.DataFrame) -> None:
    """Insert `rows` into `table`, matching columns by name."""
    con.register("_rows", rows)
    try:
        con.execute(f"insert into {table} by name select * from _rows")
    finally:
        con.unregister("_rows")


def replace_rows(
    con: duckdb.DuckDBPyConnection,
    table: str,
    column: str,
    day: str | tuple[str, str],
    rows: pd.DataFrame,
    transaction: bool = True,
) -> None:
    """Replace the rows of `table` whose `column` is `day` (or within a (first, last) range)
    with `rows`, in one transaction unless the caller holds one."""
    first, last = day if isinstance(day, tuple) else (day, day)
    if transaction:
        con.execute("begin transaction")
    try:
        con.execute(f"delete from {table} where {column} between ? and ?", [first, last])
        if len(rows):
            insert_rows(con, table, rows)
        if transaction:
            con.execute("commit")
    except BaseException:
        if transaction:
            con.execute("rollback")
        raise
