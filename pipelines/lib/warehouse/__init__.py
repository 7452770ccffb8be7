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

One module per concern: `base` (the interface, locks, `replace_rows`), `duckdb_backend`,
`postgres_backend`, and `postgres_types` (PostgreSQL's values as the warehouse's). The names
below are the package's interface.
"""

from pipelines.lib.warehouse.base import (
    DDL_LOCK,
    WAREHOUSE_POOL,
    Result,
    Warehouse,
    WarehouseConnection,
    WarehouseLockedError,
    lock_key,
    partition_days,
    replace_rows,
)
from pipelines.lib.warehouse.duckdb_backend import DuckDBConnection, DuckDBWarehouse
from pipelines.lib.warehouse.postgres_backend import PostgresConnection, PostgresWarehouse

__all__ = [
    "DDL_LOCK",
    "WAREHOUSE_POOL",
    "DuckDBConnection",
    "DuckDBWarehouse",
    "PostgresConnection",
    "PostgresWarehouse",
    "Result",
    "Warehouse",
    "WarehouseConnection",
    "WarehouseLockedError",
    "lock_key",
    "partition_days",
    "replace_rows",
]
