"""The warehouse's interface: a `Warehouse` resource yields `WarehouseConnection`s, whose
`transaction()`, `lock()` and `lock_partitions()` make a partition's replacement all-or-nothing
and serialised on every backend (the package's docstring says how)."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date, timedelta
from typing import Any

import dagster as dg
import pandas as pd

WAREHOUSE_POOL = "warehouse"
# The advisory lock every DDL of the Python side takes (creating schemas and tables): two runs
# creating the same table at once would otherwise fail on PostgreSQL's catalog.
DDL_LOCK = "flywheel/ddl"


class WarehouseLockedError(RuntimeError):
    """The warehouse (or a partition of it) stayed locked for longer than the configured wait."""


class Result(ABC):
    """The rows of a statement."""

    @abstractmethod
    def fetchall(self) -> list[tuple]: ...

    @abstractmethod
    def df(self) -> pd.DataFrame: ...

    def fetchone(self) -> tuple | None:
        rows = self.fetchall()
        return rows[0] if rows else None


class WarehouseConnection(ABC):
    """A connection to the warehouse, the same on every backend."""

    dialect: str

    def __init__(self) -> None:
        self._depth = 0

    @abstractmethod
    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Result:
        """Run `sql` with `?` placeholders bound to `params`."""

    @abstractmethod
    def insert_rows(self, table: str, rows: pd.DataFrame) -> None:
        """Insert `rows` into `table`, matching columns by name."""

    @abstractmethod
    def has_relation(self, name: str) -> bool:
        """Whether a table or view called `name` (optionally `schema.name`) exists."""

    @abstractmethod
    def create_table_like(self, table: str, like: pd.DataFrame) -> None:
        """Create `table` with the columns and types of `like`, unless it exists."""

    @abstractmethod
    def _lock(self, keys: list[int]) -> None:
        """Take the transaction-level locks `keys` (in this order)."""

    def _begin(self) -> None:
        self.execute("begin")

    def _commit(self) -> None:
        self.execute("commit")

    def _rollback(self) -> None:
        self.execute("rollback")

    def sql_type(self, name: str) -> str:
        """The backend's name of a column type written the DuckDB way (DOUBLE, VARCHAR, ...)."""
        return name

    @abstractmethod
    def refresh_statistics(self, table: str) -> None:
        """Bring the query planner's statistics of `table` up to date after a load."""

    def df(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        return self.execute(sql, params).df()

    def columns(self, relation: str) -> list[str]:
        """The columns of table or view `relation`, in order."""
        return list(self.df(f"select * from {relation} where false").columns)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction around the block: committed at its end, rolled back on any exception.
        Nested blocks join the outermost one."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._begin()
        self._depth = 1
        try:
            yield
        except BaseException:
            self._depth = 0
            self._rollback()
            raise
        self._depth = 0
        self._commit()

    def lock(self, *names: str) -> None:
        """Hold the named locks until the current transaction ends (taken in sorted order, so
        two transactions locking overlapping names cannot deadlock)."""
        if not self._depth:
            raise RuntimeError("WarehouseConnection.lock needs an open transaction")
        self._lock(sorted({lock_key(n) for n in names}))

    def lock_partitions(self, table: str, days: str | tuple[str, str] | Iterable[str]) -> None:
        """Lock the partitions `days` of `table` (a day, an inclusive (first, last) range or
        several days) until the current transaction ends."""
        self.lock(*(f"{table}/{d}" for d in partition_days(days)))

    @contextmanager
    def ddl(self) -> Iterator[None]:
        """A transaction holding the DDL lock: create schemas and tables inside."""
        with self.transaction():
            self.lock(DDL_LOCK)
            yield


def lock_key(name: str) -> int:
    """A lock name as a signed 64-bit key (PostgreSQL's advisory locks take a bigint)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def partition_days(days: str | tuple[str, str] | Iterable[str]) -> list[str]:
    """The ISO days named by a day, an inclusive (first, last) range, or an iterable of days."""
    if isinstance(days, str):
        return [days]
    if isinstance(days, tuple) and len(days) == 2:
        first, last = date.fromisoformat(days[0]), date.fromisoformat(days[1])
        return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
    return sorted(set(days))


class Warehouse(dg.ConfigurableResource, ABC):
    """The warehouse dbt builds its models in, as the assets read and write it."""

    lock_timeout_s: float = 120.0

    @abstractmethod
    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[WarehouseConnection]:
        """A connection, closed at the end of the block."""

    @property
    @abstractmethod
    def dialect(self) -> str:
        """The dbt adapter's type of this backend: `duckdb` or `postgres`."""

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        """Run a read query and return its result as a DataFrame."""
        with self.connect(read_only=True) as con:
            return con.df(sql, params)

    def wait_until_free(self) -> None:
        """Wait until a tool that opens the warehouse itself (dbt) can: nothing to wait for
        unless the backend allows one writer."""

    @contextmanager
    def held(self) -> Iterator[None]:
        """Keep the warehouse open in this process for the block, for the work of one process
        that opens it many times (the in-process driver's day). Nothing to keep unless opening
        the warehouse costs more than a connection (PostgreSQL's are per use)."""
        yield

    @contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """Hold the lock `name` for the block, against every other process of this warehouse
        (waiting at most `lock_timeout_s`); DuckDB's single writer already is."""
        yield


def replace_rows(
    con: WarehouseConnection,
    table: str,
    column: str,
    day: str | tuple[str, str],
    rows: pd.DataFrame,
) -> None:
    """Replace the rows of `table` whose `column` is `day` (or within a (first, last) range)
    with `rows`, in one transaction (the caller's, if it holds one), holding the partitions'
    locks."""
    first, last = day if isinstance(day, tuple) else (day, day)
    with con.transaction():
        con.lock_partitions(table, (first, last))
        con.execute(f"delete from {table} where {column} between ? and ?", [first, last])
        if len(rows):
            con.insert_rows(table, rows)
