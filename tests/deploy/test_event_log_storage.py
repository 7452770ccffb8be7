"""The embedded instance's event log: Dagster's SQLite storage with its connections kept.

Same files (a new run database: the same tables, journal and stamp), same answers as Dagster's
own classes, readable by another process while written,
nothing committed lost when the writing process is killed, and a bounded number of open engines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from deploy.dagster_instance.event_log import (
    KEPT_ENGINES,
    PooledSqliteEventLogStorage,
    migration_scripts,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "deploy" / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def materialize(instance: dg.DagsterInstance, run_id: str, asset: str) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(asset, metadata={"run": run_id}))


def test_the_embedded_instance_keeps_dagsters_files_and_answers(home: Path) -> None:
    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.event_log_storage, PooledSqliteEventLogStorage)
        for i in range(KEPT_ENGINES + 4):  # more run databases than engines kept
            run = instance.add_run(
                dg.DagsterRun(job_name="j", run_id=f"run-{i}", status=dg.DagsterRunStatus.STARTED)
            )
            instance.report_engine_event(f"hello from {i}", run)
            materialize(instance, run.run_id, "a")
        assert len(instance.event_log_storage._engines) <= KEPT_ENGINES
        assert [e.message for e in instance.all_logs("run-0")] == ["hello from 0"]
    # Where Dagster's own storage keeps them, and read back by Dagster's own classes.
    assert (home / "history" / "runs.db").exists()
    assert (home / "history" / "runs" / "index.db").exists()
    own = dg.DagsterInstance.from_config(str(home), config_filename="none.yaml")
    with own:
        assert not isinstance(own.event_log_storage, PooledSqliteEventLogStorage)
        assert len(own.get_run_records(dg.RunsFilter(job_name="j"))) == KEPT_ENGINES + 4
        records = own.fetch_materializations(dg.AssetKey("a"), limit=100).records
        assert len(records) == KEPT_ENGINES + 4
        assert [e.message for e in own.all_logs(f"run-{KEPT_ENGINES}")] == [
            f"hello from {KEPT_ENGINES}"
        ]


def test_an_instance_of_another_folder_than_dagster_home_is_refused(home: Path, tmp_path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "dagster.yaml").write_text((home / "dagster.yaml").read_text())
    with pytest.raises(dg.DagsterInvariantViolationError, match=r"set DAGSTER_HOME"):
        dg.DagsterInstance.from_config(str(other))  # its event log would be DAGSTER_HOME's


def test_a_wiped_event_log_takes_new_events(home: Path) -> None:
    with dg.DagsterInstance.get() as instance:
        run = instance.add_run(dg.DagsterRun(job_name="j", run_id="r1"))
        instance.report_engine_event("before", run)
        instance.event_log_storage.wipe()
        assert instance.all_logs("r1") == []
        instance.report_engine_event("after", run)
        assert [e.message for e in instance.all_logs("r1")] == ["after"]


WRITER = """
import sys, dagster as dg
with dg.DagsterInstance.get() as instance:
    run = instance.add_run(dg.DagsterRun(job_name="j", run_id="writer"))
    for i in range(100000):
        instance.report_engine_event(f"event {i}", run)
        print(i, flush=True)
"""


def test_another_process_reads_while_one_writes_and_a_kill_loses_nothing_committed(
    home: Path,
) -> None:
    with dg.DagsterInstance.get() as reader:
        materialize(reader, "reader", "a")  # this process holds its engines open meanwhile
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER],
            cwd=REPO,
            env=os.environ,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert writer.stdout is not None
            for line in writer.stdout:
                if int(line) >= 200:
                    break
            seen_while_writing = len(reader.all_logs("writer"))
            writer.send_signal(signal.SIGKILL)
        finally:
            writer.kill()
            writer.wait()
        assert seen_while_writing >= 200
        events = reader.all_logs("writer")
        # Every event the writer reported stored is there, once, in order.
        messages = [e.message for e in events]
        assert messages == [f"event {i}" for i in range(len(messages))]
        assert len(messages) >= 201
        start = time.monotonic()
        materialize(reader, "reader", "a")  # the killed writer left no lock behind
        assert time.monotonic() - start < 5
        assert len(reader.fetch_materializations(dg.AssetKey("a"), limit=10).records) == 2


def _layout(path: Path) -> tuple[list, list, list]:
    """A SQLite file's schema, alembic stamp and journal mode."""
    with contextlib.closing(sqlite3.connect(path)) as con:
        return (
            sorted(con.execute("select type, name, sql from sqlite_master").fetchall()),
            con.execute("select version_num from alembic_version").fetchall(),
            con.execute("pragma journal_mode").fetchall(),
        )


def test_a_new_run_database_is_dagsters_own_tables_journal_and_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for storage in (PooledSqliteEventLogStorage(str(ours)), SqliteEventLogStorage(str(theirs))):
        with storage.run_connection("r1"):
            pass
        storage.dispose()
    # Ours never took Dagster's path for a new run's database.
    dagsters = SqliteEventLogStorage._initdb

    def only_the_index(self, engine, for_index_shard: bool = False) -> None:
        assert Path(engine.url.database).name == "index.db"
        dagsters(self, engine, for_index_shard)

    monkeypatch.setattr(SqliteEventLogStorage, "_initdb", only_the_index)
    again = PooledSqliteEventLogStorage(str(tmp_path / "again"))
    with again.run_connection("r1"):
        pass
    again.dispose()
    assert _layout(tmp_path / "again" / "r1.db") == _layout(theirs / "r1.db")
    assert _layout(ours / "r1.db") == _layout(theirs / "r1.db")
    assert _layout(ours / "r1.db")[1] == [(migration_scripts().get_current_head(),)]
    assert _layout(ours / "r1.db")[2] == [("wal",)]


def test_a_run_database_killed_half_created_is_completed(tmp_path: Path) -> None:
    storage = PooledSqliteEventLogStorage(str(tmp_path / "ours"))
    theirs = SqliteEventLogStorage(str(tmp_path / "theirs"))
    with theirs.run_connection("r1"):
        pass
    # What a process killed after the first table leaves: that table and its indexes, no stamp.
    with contextlib.closing(sqlite3.connect(tmp_path / "theirs" / "r1.db")) as con:
        first = con.execute(
            "select sql from sqlite_master where tbl_name = 'event_logs' and sql is not null "
            "order by type desc"
        ).fetchall()
    with contextlib.closing(sqlite3.connect(tmp_path / "ours" / "r1.db")) as con:
        for (statement,) in first:
            con.execute(statement)
    entry = dg.EventLogEntry(
        error_info=None, level="INFO", user_message="hello", run_id="r1", timestamp=time.time()
    )
    storage.store_event(entry)
    assert _layout(tmp_path / "ours" / "r1.db") == _layout(tmp_path / "theirs" / "r1.db")
    assert [e.user_message for e in storage.get_logs_for_run("r1")] == ["hello"]


def test_a_table_found_is_not_looked_up_again(home: Path, monkeypatch) -> None:
    calls: list[str] = []
    looked_up = SqliteEventLogStorage.has_table

    def counted(self, name: str) -> bool:
        calls.append(name)
        return looked_up(self, name)

    monkeypatch.setattr(SqliteEventLogStorage, "has_table", counted)
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        assert storage.has_table("event_logs") and storage.has_table("event_logs")
        assert not storage.has_table("no_such_table") and not storage.has_table("no_such_table")
        assert calls == ["event_logs", "no_such_table", "no_such_table"]
        for i in range(3):
            materialize(instance, f"run-{i}", "a")
        assert len(instance.fetch_materializations(dg.AssetKey("a"), limit=10).records) == 3
        # Each table the asset events asked about was looked up once at most.
        found = [name for name in calls if name != "no_such_table"]
        assert len(found) == len(set(found))
