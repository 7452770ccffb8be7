"""The embedded Dagster instance's event log: Dagster's own SQLite storage, its connections kept.

Dagster's `SqliteEventLogStorage` creates a SQLAlchemy engine, opens a SQLite connection and
closes both for every event it stores and every query it answers (an asset event writes to
the run's database and the index database), and a simulated day stores many of them:
opening and closing was a large share of the day. This subclass keeps one engine (one pooled
connection, more for a moment while a database is created) per database file, for the index
database and the last runs' databases, and otherwise leaves everything to Dagster's class: the
same files and schema, WAL journal, busy timeout, the same lock around every use, and the same
durability (each event is its own committed transaction).

Two more of Dagster's per-call costs are cut the same way. Each run's new database was stamped
with the schema's alembic revision by parsing every migration script of Dagster's, and its
tables created before its WAL journal (each table's creation a journal commit), for each of a
simulated day's three or four runs. A new run database now gets the same tables, journal and
stamp with the scripts parsed once per process. And `has_table`, asked several times for each
asset event, opened and disposed an engine on the index database each time: a table it found is
remembered (migrations add tables; none are dropped under a running instance).

It is the embedded default's (`deploy/dagster.yaml`); the stack and production keep Dagster's
PostgreSQL storage. The webserver and the daemon read the same files as before.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as db
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from dagster import Field, StringSource
from dagster._core.errors import DagsterInvariantViolationError
from dagster._core.storage.event_log.schema import SqlEventLogStorageMetadata
from dagster._core.storage.event_log.sqlite import sqlite_event_log
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.sql import get_alembic_config
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import QueuePool

if TYPE_CHECKING:
    from dagster import DagsterInstance

# The index database and the databases of the runs being written or read: a run writes its own
# and the index, a sensor reads the index; older runs are read again only in the UI.
KEPT_ENGINES = 8
LOG = logging.getLogger(__name__)


@functools.cache
def migration_scripts() -> ScriptDirectory:
    """Dagster's event log migration scripts, as its SQLite storage configures them, parsed once
    per process: here, under the cache's own call, not lazily by whichever storage asks first."""
    scripts = ScriptDirectory.from_config(get_alembic_config(sqlite_event_log.__file__))
    scripts.get_current_head()  # alembic memoizes the parsed revisions on the instance
    return scripts


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """`SqliteEventLogStorage` that keeps its engines (see the module's docstring).

    Configured with `dagster_home`, the instance's folder (`{env: DAGSTER_HOME}`): the event logs
    go where Dagster's own SQLite storage keeps them, `<dagster_home>/history/runs`. An instance
    whose folder is another (one opened with `DagsterInstance.from_config(folder)` while
    DAGSTER_HOME names a different one) is refused rather than split across two folders.
    """

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        # Before Dagster's constructor, which already connects (its migrations).
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._tables_found: set[str] = set()
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def config_type(cls) -> dict[str, Field]:
        return {"dagster_home": Field(StringSource)}

    @classmethod
    def from_config_value(  # type: ignore[override]
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> PooledSqliteEventLogStorage:
        home = config_value["dagster_home"]
        return cls(os.path.join(home, "history", "runs"), inst_data=inst_data)

    def register_instance(self, instance: DagsterInstance) -> None:
        super().register_instance(instance)
        expected = Path(instance.root_directory, "history", "runs").resolve()
        if Path(self._base_dir).resolve() != expected:
            raise DagsterInvariantViolationError(
                f"the event log storage is configured under {self._base_dir}, but this "
                f"instance's folder is {instance.root_directory}: set DAGSTER_HOME to the "
                "instance's folder (dagster_home in its dagster.yaml)"
            )

    def _engine(self, shard: str) -> Engine:
        engine = self._engines.get(shard)
        if engine is not None:
            self._engines.move_to_end(shard)
            return engine
        engine = db.create_engine(
            self.conn_string_for_shard(shard),
            poolclass=QueuePool,
            pool_size=1,
            # Creating a database (its tables, then its alembic stamp) opens a few at once.
            max_overflow=4,
            # One connection serves whichever thread holds the storage's lock.
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
        )
        self._engines[shard] = engine
        while len(self._engines) > KEPT_ENGINES:
            _, oldest = self._engines.popitem(last=False)
            oldest.dispose()
        return engine

    def has_table(self, table_name: str) -> bool:
        if table_name in self._tables_found:
            return True
        found = super().has_table(table_name)
        if found:
            self._tables_found.add(table_name)
        return found

    def _initdb(self, engine: Engine, for_index_shard: bool = False) -> None:
        # A database file that does not exist yet (a new run's): Dagster's tables and its stamp
        # at the head revision, as Dagster's `_initdb` writes them, with the scripts parsed once.
        # An existing file (the index, an older run's), or a creation that failed (another
        # process creating the same file at the same moment), takes Dagster's own path, with its
        # retries.
        if not for_index_shard and self._create_run_database(engine):
            return
        super()._initdb(engine, for_index_shard=for_index_shard)

    def _create_run_database(self, engine: Engine) -> bool:
        """Create a new run database with Dagster's tables, its WAL journal and its stamp (the
        journal set first: each table's creation then commits to the WAL). False if the file
        existed, or the creation failed: Dagster's `_initdb` then does it, and raises what
        fails there (a database killed half-created has no stamp, and that path completes it;
        one another process created meanwhile is found complete)."""
        path = engine.url.database
        if not path or os.path.exists(path):
            return False
        try:
            with engine.connect() as conn:
                conn.execute(db.text("PRAGMA journal_mode=WAL;"))
                SqlEventLogStorageMetadata.create_all(conn)
                MigrationContext.configure(conn).stamp(migration_scripts(), "head")
                conn.commit()
        except (db.exc.DatabaseError, sqlite3.DatabaseError) as error:
            LOG.info("%s: created by Dagster's own path after %s", path, error)
            return False
        return True

    def _dispose_engines(self) -> None:
        while self._engines:
            _, engine = self._engines.popitem()
            engine.dispose()

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        # Dagster's own `_connect`, with the engine kept rather than created and disposed.
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def wipe(self) -> None:
        # The run databases' files are deleted: no connection may outlive them.
        with self._db_lock:
            self._dispose_engines()
            self._tables_found.clear()
        super().wipe()

    def dispose(self) -> None:
        with self._db_lock:
            self._dispose_engines()
        super().dispose()
