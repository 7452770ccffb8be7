"""The production backend: a shared PostgreSQL server (the one dbt-postgres builds in), runs of
different days writing at once under per-partition advisory locks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb
import pandas as pd

from pipelines.lib.errors import secret
from pipelines.lib.warehouse.base import (
    Result,
    Warehouse,
    WarehouseConnection,
    WarehouseLockedError,
)
from pipelines.lib.warehouse.postgres_types import (
    POSTGRES_TYPES,
    arrow_type,
    column_type,
    copy_text,
    placeholders,
)


class _PostgresResult(Result):
    def __init__(self, cursor: Any) -> None:
        self._description = cursor.description
        self._rows = cursor.fetchall() if cursor.description is not None else []

    def fetchall(self) -> list[tuple]:
        return list(self._rows)

    def df(self) -> pd.DataFrame:
        import pyarrow as pa

        if self._description is None:
            return pd.DataFrame()
        columns = list(zip(*self._rows, strict=True)) if self._rows else None
        arrays = []
        for i, column in enumerate(self._description):
            values = list(columns[i]) if columns is not None else []
            kind = arrow_type(column.type_code)
            if column.type_code == 1700:
                values = [None if v is None else float(v) for v in values]
            arrays.append(pa.array(values, type=kind))
        table = pa.Table.from_arrays(arrays, names=[c.name for c in self._description])
        with duckdb.connect() as converter:
            return converter.from_arrow(table).df()


# COPY's text format: a backslash, tab, newline or carriage return inside a value is escaped,


class PostgresConnection(WarehouseConnection):
    """A psycopg2 connection in autocommit mode; `transaction()` opens explicit transactions."""

    dialect = "postgres"

    def __init__(self, con: Any, name: str = "warehouse", lock_timeout_s: float = 0) -> None:
        super().__init__()
        self.raw = con
        self.name = name
        self.lock_timeout_s = lock_timeout_s

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Result:
        with self._locked_out(), self.raw.cursor() as cursor:
            cursor.execute(placeholders(sql) if params else sql, list(params or []) or None)
            return _PostgresResult(cursor)

    @contextmanager
    def _locked_out(self) -> Iterator[None]:
        """A lock wait past `lock_timeout` as WarehouseLockedError."""
        import psycopg2.errors

        try:
            yield
        except psycopg2.errors.LockNotAvailable as e:
            raise WarehouseLockedError(
                f"{self.name}: a partition (or table) another run is writing stayed locked for "
                f"{self.lock_timeout_s:.0f}s: {str(e).strip()}"
            ) from e

    def insert_rows(self, table: str, rows: pd.DataFrame) -> None:
        if rows.empty:
            return
        columns = ", ".join(f'"{c}"' for c in rows.columns)
        with self._locked_out(), self.raw.cursor() as cursor:
            cursor.copy_expert(f"copy {table} ({columns}) from stdin", copy_text(rows))

    def has_relation(self, name: str) -> bool:
        (found,) = self.execute("select to_regclass(?) is not null", [name]).fetchall()
        return bool(found[0])

    def create_table_like(self, table: str, like: pd.DataFrame) -> None:
        columns = ", ".join(f'"{c}" {column_type(like[c])}' for c in like.columns)
        self.execute(f"create table if not exists {table} ({columns})")

    def sql_type(self, name: str) -> str:
        return POSTGRES_TYPES.get(name.upper(), name)

    def refresh_statistics(self, table: str) -> None:
        # A day's rows are a few percent of a table: autovacuum would analyze it only later,
        # and the day's dbt build would plan its joins on the statistics of an emptier table.
        self.execute(f"analyze {table}")

    def _lock(self, keys: list[int]) -> None:
        with self._locked_out(), self.raw.cursor() as cursor:
            for key in keys:
                cursor.execute("select pg_advisory_xact_lock(%s)", [key])

    def _rollback(self) -> None:
        if not self.raw.closed:  # a lost connection rolled back on the server already
            self.execute("rollback")


class PostgresWarehouse(Warehouse):
    """A PostgreSQL database (prod): the same one dbt-postgres builds its models in.

    Runs of different days write at once; a connection waits at most `lock_timeout_s` for any
    lock (a partition another run is replacing) and then fails naming what it waited for.
    """

    host: str
    port: int = 5432
    user: str
    # A `dg.EnvVar` in the definitions (pipelines/resources.py): the UI shows only its name.
    password: str = ""
    database: str
    connect_timeout_s: int = 10

    @property
    def dialect(self) -> str:
        return "postgres"

    def _connect(self, timeout_s: float | None = None) -> Any:
        import psycopg2

        con = psycopg2.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=secret(self.password),
            dbname=self.database,
            connect_timeout=max(1, int(timeout_s or self.connect_timeout_s)),
            application_name="flywheel",
            # A client killed without closing (SIGKILL, a lost node) frees its locks once the
            # server notices: probe an idle connection after 30 s.
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
            options=f"-c lock_timeout={int(self.lock_timeout_s * 1000)}",
        )
        con.autocommit = True
        return con

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[WarehouseConnection]:
        con = self._connect()
        name = f"warehouse {self.database} on {self.host}:{self.port}"
        try:
            yield PostgresConnection(con, name, self.lock_timeout_s)
        finally:
            con.close()

    def check(self, timeout_s: float, user_setting: str = "FLYWHEEL_WAREHOUSE_USER") -> str:
        """Connect once (at most `timeout_s`); a ConfigurationError naming the setting at fault
        (`user_setting`: the one that names the role, and its password's)."""
        import psycopg2

        from pipelines.lib.errors import ConfigurationError

        faults = (
            ("password authentication failed", f"{user_setting}, _PASSWORD"),
            ('role "', user_setting),
            ('database "', "FLYWHEEL_WAREHOUSE_DATABASE"),
        )
        try:
            self._connect(timeout_s).close()
        except psycopg2.OperationalError as e:
            why = str(e).strip().splitlines()[0]
            at_fault = next(
                (f for text, f in faults if text in why),
                f"FLYWHEEL_WAREHOUSE_HOST={self.host}, _PORT={self.port}",
            )
            raise ConfigurationError(f"warehouse PostgreSQL ({at_fault}): {why}") from e
        return f"{self.user}@{self.host}:{self.port}/{self.database}"

    @contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        with self.connect() as con, con.transaction():
            # However long the holder takes: it is a live run (a dead one's lock is gone).
            con.execute("set local lock_timeout = 0")
            con.lock(name)
            yield
