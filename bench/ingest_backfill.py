"""Benchmark: ingestion + dbt for one day, and a backfill as one run per partition vs one run.

    python -m bench.ingest_backfill --days 365 --per-partition-days 365

Prints wall time and flight rows/s for each mode. Each mode starts from an empty warehouse in
its own temporary FLYWHEEL_HOME, with the days already landed (landing is not timed).
A single-run backfill is what Dagster launches for assets with BackfillPolicy.single_run(): one
run whose tags name the partition range; the per-partition mode launches one run per day.
"""

import argparse
import os
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import dagster as dg

REPO = Path(__file__).resolve().parents[1]


def prepare(home: Path, days: list[date]) -> tuple[dg.Definitions, dg.DagsterInstance]:
    """Land `days` into a fresh FLYWHEEL_HOME and load the dimension tables."""
    os.environ["FLYWHEEL_HOME"] = str(home)
    os.environ["FLYWHEEL_WAREHOUSE_PATH"] = str(home / "warehouse.duckdb")
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    from pipelines.definitions import build_definitions
    from pipelines.resources import landing_zone
    from sim.world.replay import land_days

    land_days(landing_zone("local"), days)
    (home / "dagster").mkdir(parents=True)
    (home / "dagster" / "dagster.yaml").write_text((REPO / "deploy/dagster.yaml").read_text())
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    defs = build_definitions(env="local")
    defs.resolve_job_def("dimension_warehouse_job").execute_in_process(instance=instance)
    return defs, instance


def flights_rows(defs: dg.Definitions) -> int:
    return int(defs.resources["warehouse"].query("select count(*) n from fct_flight_features").n[0])


def per_partition(days: list[date]) -> tuple[float, int]:
    """One run per landing day, as a backfill without a single-run policy launches them."""
    with tempfile.TemporaryDirectory() as tmp:
        defs, instance = prepare(Path(tmp), days)
        job = defs.resolve_job_def("daily_warehouse_job")
        started = time.perf_counter()
        for day in days:
            job.execute_in_process(instance=instance, partition_key=day.isoformat())
        elapsed = time.perf_counter() - started
        return elapsed, flights_rows(defs)


def single_run(days: list[date]) -> tuple[float, int]:
    """One run over the whole partition range (BackfillPolicy.single_run)."""
    with tempfile.TemporaryDirectory() as tmp:
        defs, instance = prepare(Path(tmp), days)
        tags = {
            "dagster/asset_partition_range_start": days[0].isoformat(),
            "dagster/asset_partition_range_end": days[-1].isoformat(),
        }
        started = time.perf_counter()
        defs.resolve_job_def("daily_warehouse_job").execute_in_process(instance=instance, tags=tags)
        elapsed = time.perf_counter() - started
        return elapsed, flights_rows(defs)


def report(name: str, days: int, seconds: float, rows: int) -> None:
    """Print one mode's figures as soon as it finishes."""
    print(
        f"{name:<30}{days:>6}{seconds:>10.1f}{rows:>10,}{rows / seconds:>10,.0f}"
        f"{seconds / days:>8.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default="2013-01-01")
    parser.add_argument("--days", type=int, default=365, help="days in the single-run backfill")
    parser.add_argument(
        "--per-partition-days", type=int, default=365, help="days run one partition at a time"
    )
    args = parser.parse_args()
    start = date.fromisoformat(args.start)
    span = [start + timedelta(days=i) for i in range(args.days)]
    print(f"{'mode':<30}{'days':>6}{'wall s':>10}{'flights':>10}{'rows/s':>10}{'s/day':>8}")
    report("one day, one run", 1, *per_partition(span[:1]))
    report("backfill, single run", len(span), *single_run(span))
    if args.per_partition_days:
        part = span[: args.per_partition_days]
        report("backfill, run per partition", len(part), *per_partition(part))


if __name__ == "__main__":
    main()
