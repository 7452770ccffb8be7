"""Run inside a mount namespace by test_disk_full.py: a flywheel whose state folder is on a small
tmpfs plays a day, the disk is filled, the next day runs, the disk is freed and the day runs
again. Prints one line, `RESULT <json>`, of what each step saw.

    python tests/pipelines/disk_full_day.py DISK DAGSTER_HOME
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import traceback
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main(disk: Path, dagster_home: Path) -> dict:
    home = disk / "home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "deploy" / "dagster.yaml", dagster_home / "dagster.yaml")
    os.environ.update(
        FLYWHEEL_ENV="local",
        FLYWHEEL_HOME=str(home),
        DAGSTER_HOME=str(dagster_home),
        FLYWHEEL_DVC_REPO=str(disk / "checkout" / "data"),
    )
    os.environ.pop("FLYWHEEL_WAREHOUSE_PATH", None)
    import dagster as dg
    import duckdb

    from pipelines.definitions import build_definitions
    from pipelines.resources import landing_zone
    from sim.world.replay import land_days

    seen: dict = {"errors": []}
    land_days(landing_zone(), [date(2013, 1, 1), date(2013, 1, 2)])
    defs = build_definitions(env="local")
    instance = dg.DagsterInstance.get()

    def run(job: str, partition: str | None = None) -> bool:
        result = defs.resolve_job_def(job).execute_in_process(
            instance=instance, partition_key=partition, raise_on_error=False
        )
        for event in result.all_events:
            if event.is_step_failure:
                error = event.event_specific_data.error
                seen["errors"].append(error.message + "".join(c.message for c in _causes(error)))
        return result.success

    def rows() -> list[list]:
        with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
            query = "select _landing_date, count(*) from raw.flights group by 1 order by 1"
            return [[str(d), n] for d, n in con.execute(query).fetchall()]

    seen["first_day"] = run("dimension_warehouse_job") and run("daily_warehouse_job", "2013-01-01")
    seen["rows_before"] = rows()
    ballast = disk / "ballast"
    with ballast.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * (1 << 20))
                out.flush()
        except OSError as e:
            seen["filled"] = e.strerror
    try:
        seen["full_day"] = run("daily_warehouse_job", "2013-01-02")
    except Exception as e:  # the instance itself could not write: the run never started
        seen["full_day"] = False
        seen["errors"].append("".join(traceback.format_exception_only(e)))
    ballast.unlink()
    seen["runs"] = [[r.tags.get("dagster/partition"), r.status.value] for r in instance.get_runs()]
    seen["rows_after_full"] = rows()
    seen["again"] = run("daily_warehouse_job", "2013-01-02")
    seen["rows_final"] = rows()
    return seen


def _causes(error):
    while error.cause is not None:
        error = error.cause
        yield error


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]))), flush=True)
