"""The embedded backend: a DuckDB file, one writer at a time (the `warehouse` pool, and a bounded
wait for a lock held outside Dagster)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from pipelines.lib.warehouse.base import (
    Result,
    Warehouse,
    WarehouseConnection,
    WarehouseLockedError,
)


class _DuckDBResult(Result):
    def __init__(self, cursor: duckdb.DuckDBPyConnection) -> None:
        self._cursor = cursor

    def fetchall(self) -> list[tuple]:
        return self._cursor.fetchall()

    def df(self) -> pd.DataFrame:
        return self._cursor.df()


class DuckDBConnection(WarehouseConnection):
    """A DuckDB connection (a file's, or an in-memory database's in tests)."""

    dialect = "duckdb"

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        super().__init__()
        self.raw = con

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Result:
        return _DuckDBResult(self.raw.execute(sql, list(params or [])))

    def _over_frame(self, sql: str, frame: pd.DataFrame) -> None:
        """Execute `sql`, which reads `frame` as `_frame`. Unregistered only after a success:
        inside a transaction a failed statement aborts it, and unregistering would then raise
        in its place, hiding its error. The next call replaces the registration."""
        self.raw.register("_frame", frame)
        self.raw.execute(sql)
        self.raw.unregister("_frame")

    def insert_rows(self, table: str, rows: pd.DataFrame) -> None:
        self._over_frame(f"insert into {table} by name select * from _frame", rows)

    def has_relation(self, name: str) -> bool:
        schema, _, table = name.rpartition(".")
        (found,) = self.raw.execute(
            "select count(*) from information_schema.tables where table_name = ? "
            "and (? = '' or table_schema = ?)",
            [table, schema, schema],
        ).fetchall()
        return bool(found[0])

    def create_table_like(self, table: str, like: pd.DataFrame) -> None:
        # A column of objects without a value (an empty frame's text column) would make a
        # column of DuckDB's NULL type, into which no text can be inserted later: text it is.
        untyped = [c for c in like.columns if like[c].dtype == object and like[c].isna().all()]
        like = like.astype({c: "string" for c in untyped})
        self._over_frame(
            f"create table if not exists {table} as select * from _frame where false", like
        )

    def _lock(self, keys: list[int]) -> None:
        """Nothing to take: DuckDB has one writer at a time."""

    def refresh_statistics(self, table: str) -> None:
        """Nothing to refresh: DuckDB keeps its statistics as it writes."""


class DuckDBWarehouse(Warehouse):
    """A DuckDB warehouse file (the embedded default)."""

    path: str

    @property
    def dialect(self) -> str:
        return "duckdb"

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[WarehouseConnection]:
        """A connection, waiting up to `lock_timeout_s` for another process's lock to clear."""
        # A read-only DuckDB connection conflicts with this process's other, writable ones:
        # reads open the file as writers do.
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(self.path)
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
            yield DuckDBConnection(con)
        finally:
            con.close()

    def wait_until_free(self) -> None:
        """Wait (at most `lock_timeout_s`) until no other process holds the warehouse's lock.

        dbt opens the file itself and fails at once on a lock: the dbt process of a run killed by
        SIGKILL outlives the run for a while and keeps its lock.
        """
        with self.connect():
            pass

    @contextmanager
    def held(self) -> Iterator[None]:
        """Keep the database open (and its file locked against other processes) for the block.

        Every connection this process opens inside, dbt's in-process ones included, joins the
        open database: DuckDB opens the file (reading its catalog) once, and writes its WAL back
        into the file (a checkpoint) once, when the block ends, instead of at each connection's
        close, which a simulated day's runs and sensors do many times. Commits are as
        durable: each is in the WAL, which the next open replays after a kill. Another process
        waits for the block's end (`lock_timeout_s`), so hold it for short work, never around a
        process that opens the file itself (dbt as a command)."""
        with self.connect():
            yield
