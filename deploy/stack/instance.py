"""The stack's Dagster instance: its tables in PostgreSQL and its pools."""

from __future__ import annotations

from pathlib import Path

# Steps writing the PostgreSQL warehouse at once (runs of different days); the other pools
# (the training step's) keep the instance's default of one.
WAREHOUSE_WRITERS = 4


def create_tables(url: str) -> None:
    """Dagster's tables in the database of `url`, where they are missing (the stack's instance
    does not look for them: deploy/dagster.stack.yaml); `dagster instance migrate` upgrades
    them."""
    from dagster_postgres import DagsterPostgresStorage

    DagsterPostgresStorage(url, should_autocreate_tables=True)  # NullPool: nothing to close


def open_warehouse_pool(dagster_home: Path) -> None:
    """Let WAREHOUSE_WRITERS steps write the PostgreSQL warehouse at once (the instance's pools
    default to one step at a time; `dagster instance concurrency set` does the same)."""
    import dagster as dg

    from pipelines.lib.warehouse import WAREHOUSE_POOL

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.event_log_storage.set_concurrency_slots(WAREHOUSE_POOL, WAREHOUSE_WRITERS)
