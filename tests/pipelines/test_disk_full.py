"""A full state disk: the day's run fails whole, naming the disk, nothing it had is lost, no run
is left running, and the day completes once space is back. The state folder is a small tmpfs in
a mount namespace of the test's own (root only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipelines.conftest import source_rows

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "pipelines" / "disk_full_day.py"

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a tmpfs in a mount namespace of its own needs root and unshare",
)


def play(tmp_path: Path, instance_on_the_full_disk: bool) -> dict:
    disk = tmp_path / "disk"
    disk.mkdir()
    dagster_home = disk / "dagster" if instance_on_the_full_disk else tmp_path / "dagster"
    mount = f"mount -t tmpfs -o size=200m tmpfs {disk}"
    script = f"{mount} && exec {sys.executable} {SCRIPT} {disk} {dagster_home}"
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_a_full_warehouse_disk_fails_the_steps_naming_it_and_the_day_completes_after(
    tmp_path,
) -> None:
    """The warehouse and the landing zone on the full disk, Dagster's instance elsewhere: the
    run starts, its ingestion steps fail on DuckDB's write (not retried: a full disk is no
    outage), the run is failed, the day before keeps its rows, and with space back the day
    loads whole."""
    seen = play(tmp_path, instance_on_the_full_disk=False)
    assert seen["first_day"] and seen["filled"] == "No space left on device"
    assert seen["full_day"] is False
    assert any("No space left on device" in e and "warehouse.duckdb" in e for e in seen["errors"])
    assert ["2013-01-02", "FAILURE"] in seen["runs"]
    assert not [r for r in seen["runs"] if r[1] in ("STARTED", "STARTING", "QUEUED")]
    expected = [["2013-01-01", source_rows("flights", "2013-01-01")]]
    assert seen["rows_before"] == seen["rows_after_full"] == expected
    assert seen["again"]
    assert seen["rows_final"] == [*expected, ["2013-01-02", source_rows("flights", "2013-01-02")]]


@pytest.mark.slow
def test_a_full_instance_disk_refuses_the_run_before_it_starts_and_the_day_completes_after(
    tmp_path,
) -> None:
    """Everything on the full disk, Dagster's instance too: the run cannot be recorded, so it
    never starts (SQLite's "disk I/O error"); nothing is left half-written or running."""
    seen = play(tmp_path, instance_on_the_full_disk=True)
    assert seen["full_day"] is False
    assert any("disk I/O error" in e for e in seen["errors"])
    assert [r[1] for r in seen["runs"]] == ["SUCCESS", "SUCCESS"]  # the day before's, only
    assert seen["rows_before"] == seen["rows_after_full"]
    assert seen["again"] and len(seen["rows_final"]) == 2
