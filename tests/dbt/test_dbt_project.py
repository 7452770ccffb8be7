"""The dbt project on its own: unit tests of model logic and every data test on empty sources."""

import os
import subprocess
import sys
from pathlib import Path

import duckdb

from pipelines.contracts import load_task
from pipelines.ingestion import ensure_raw_tables
from pipelines.lib.dbt import DBT_PROJECT_DIR


def test_dbt_build_empty_runs_unit_tests_and_checks(tmp_path):
    warehouse = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(warehouse)) as con:
        ensure_raw_tables(con, load_task())
    env = os.environ | {
        "FLYWHEEL_WAREHOUSE_PATH": str(warehouse),
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
        "DBT_TARGET_PATH": str(tmp_path / "target"),
        "DBT_LOG_PATH": str(tmp_path / "logs"),
    }
    out = subprocess.run(
        [Path(sys.executable).with_name("dbt"), "build", "--empty", "--profiles-dir", "."],
        cwd=DBT_PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert "ERROR=0" in out.stdout
    # A unit test's result line names it `<model>::<unit test>`.
    passed_unit_tests = [
        line for line in out.stdout.splitlines() if " PASS " in line and "::" in line
    ]
    assert len(passed_unit_tests) >= 5, out.stdout[-3000:]
