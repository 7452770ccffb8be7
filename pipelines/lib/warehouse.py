"""The warehouse: one interface, a DuckDB implementation (the embedded default, a local file) and
a PostgreSQL one (prod: a shared server with concurrent writers).

Everything that reads or writes the warehouse from Python goes through `Warehouse.connect()` and
the `WarehouseConnection` it yields: parameters are `?` placeholders on both, `df()` returns the
same pandas types on both (PostgreSQL's rows are converted as DuckDB converts its own), and
`transaction()` makes a partition's replacement all-or-nothing on both.

Writers of the same partition never interleave:
- DuckDB lets one process write at a time: writers sit in the `warehouse` concurrency pool (a
  limit of 1 in the embedded instance) and `connect` also waits (bounded) for a lock held by
  something outside Dagster.
- PostgreSQL lets runs of different days write at once. A replacement locks each day it
  replaces (`lock_partitions`, a transaction-level advisory lock per table and day) before it
  deletes, so two runs of the same day are serialised by the lock, never by luck. dbt's models
  take the same kind of lock in their pre-hook (`macros/lock_relation.sql`).
"""

from __future__ import annotations

import hashlib
import io
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
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


# --- DuckDB -----------------------------------------------------------------------------------


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


# --- PostgreSQL -------------------------------------------------------------------------------

# PostgreSQL's type OIDs of the columns the warehouse holds, as Arrow types; DuckDB then turns
# the Arrow table into pandas exactly as it turns its own tables (nullable integers as Int64,
# dates as datetime64, ...), so a frame read from either backend is the same frame.
_ARROW_TYPES = {
    16: "bool_",
    20: "int64",
    21: "int16",
    23: "int32",
    700: "float32",
    701: "float64",
    1700: "float64",  # numeric: the models cast to double; a stray one is read as a double
    25: "string",
    1043: "string",
    1042: "string",
    1082: "date32",
    1114: "timestamp_us",
    1184: "timestamp_us_utc",
}
# DuckDB's names of column types (the contracts' and the Python side's tables), for PostgreSQL.
_POSTGRES_TYPES = {
    "DOUBLE": "DOUBLE PRECISION",
    "VARCHAR": "TEXT",
    "HUGEINT": "NUMERIC",
    "UBIGINT": "NUMERIC",
}
# pandas dtypes (by kind) as PostgreSQL column types, for tables created like a frame.
_DTYPE_TYPES = {"b": "BOOLEAN", "i": "BIGINT", "u": "BIGINT", "f": "DOUBLE PRECISION"}


def _arrow_type(oid: int) -> Any:
    import pyarrow as pa

    name = _ARROW_TYPES.get(oid)
    if name is None:
        return None
    if name == "timestamp_us":
        return pa.timestamp("us")
    if name == "timestamp_us_utc":
        return pa.timestamp("us", tz="UTC")
    return getattr(pa, name)()


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
            kind = _arrow_type(column.type_code)
            if column.type_code == 1700:
                values = [None if v is None else float(v) for v in values]
            arrays.append(pa.array(values, type=kind))
        table = pa.Table.from_arrays(arrays, names=[c.name for c in self._description])
        with duckdb.connect() as converter:
            return converter.from_arrow(table).df()


# COPY's text format: a backslash, tab, newline or carriage return inside a value is escaped,
# so any text (a quarantined record holding `\\N`, a tab, a newline) arrives as it was.
_COPY_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))


def _copy_text(rows: pd.DataFrame) -> io.StringIO:
    """`rows` in COPY's text format: tab-separated, `\\N` for a null, escapes in values."""
    lines = None
    for name in rows.columns:
        column = rows[name]
        if pd.api.types.is_bool_dtype(column.dtype):
            column = column.map({True: "t", False: "f"})
        text = column.astype("string")
        if not (pd.api.types.is_numeric_dtype(rows[name].dtype)):
            for raw, escaped in _COPY_ESCAPES:
                text = text.str.replace(raw, escaped, regex=False)
        text = text.fillna("\\N")
        lines = text if lines is None else lines + "\t" + text
    return io.StringIO("\n".join(lines.tolist()) + "\n")


def _placeholders(sql: str) -> str:
    """`?` placeholders as psycopg2's `%s` (and a literal `%` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


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
            cursor.execute(_placeholders(sql) if params else sql, list(params or []) or None)
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
            cursor.copy_expert(f"copy {table} ({columns}) from stdin", _copy_text(rows))

    def has_relation(self, name: str) -> bool:
        (found,) = self.execute("select to_regclass(?) is not null", [name]).fetchall()
        return bool(found[0])

    def create_table_like(self, table: str, like: pd.DataFrame) -> None:
        columns = ", ".join(f'"{c}" {_column_type(like[c])}' for c in like.columns)
        self.execute(f"create table if not exists {table} ({columns})")

    def sql_type(self, name: str) -> str:
        return _POSTGRES_TYPES.get(name.upper(), name)

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


def _column_type(column: pd.Series) -> str:
    if pd.api.types.is_datetime64_any_dtype(column):
        return "TIMESTAMP"
    kind = getattr(column.dtype, "kind", "O")
    if kind in _DTYPE_TYPES:
        return _DTYPE_TYPES[kind]
    values = column.dropna()
    if len(values) and all(isinstance(v, date) for v in values):
        return "DATE"
    if len(values) and all(isinstance(v, bool) for v in values):
        return "BOOLEAN"
    return "TEXT"


class PostgresWarehouse(Warehouse):
    """A PostgreSQL database (prod): the same one dbt-postgres builds its models in.

    Runs of different days write at once; a connection waits at most `lock_timeout_s` for any
    lock (a partition another run is replacing) and then fails naming what it waited for.
    """

    host: str
    port: int = 5432
    user: str
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
            password=self.password,
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

    def check(self, timeout_s: float) -> str:
        """Connect once (at most `timeout_s`); a ConfigurationError naming the setting at fault."""
        import psycopg2

        from pipelines.lib.errors import ConfigurationError

        faults = (
            ("password authentication failed", "FLYWHEEL_WAREHOUSE_USER, _PASSWORD"),
            ('role "', "FLYWHEEL_WAREHOUSE_USER"),
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
