"""Benchmark: the daily warehouse job (ingestion, dbt, scoring, drift) on DuckDB vs PostgreSQL,
as a full-year single-run backfill and as a per-partition backfill with 1 and 2 runs at once.

    python -m bench.warehouse_backends --year-days 365 --partition-days 30

Each case starts from an empty warehouse (a DuckDB file, or a new database on a scratch
PostgreSQL server of the distribution's package) in its own temporary FLYWHEEL_HOME, with the
days already landed and the dimension tables loaded (neither is timed). The per-partition cases
run one Dagster run per day, in 1 or 2 worker processes taking days from a shared queue, on one
Dagster instance (SQLite) whose `warehouse` pool allows 1 step at a time on DuckDB (its single
writer) and 2 on PostgreSQL. Every case then checks that each day holds exactly its flights.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from contextlib import ExitStack, nullcontext
from datetime import date, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The runs' events stay in the instance; the terminal shows the figures (and errors).
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def environment(home: Path, warehouse: dict[str, str] | None) -> None:
    """Point this process at `home` (and at the PostgreSQL `warehouse` settings, if any)."""
    os.environ["FLYWHEEL_HOME"] = str(home)
    os.environ["FLYWHEEL_WAREHOUSE_PATH"] = str(home / "warehouse.duckdb")
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    for name, value in (warehouse or {}).items():
        os.environ[name] = value


def definitions(warehouse: dict[str, str] | None):
    """The local definitions, with the PostgreSQL warehouse (dbt's `prod` target) if given."""
    from pipelines.definitions import build_definitions
    from pipelines.resources import warehouse_resources

    resources = warehouse_resources("prod") if warehouse else None
    return build_definitions(env="local", resources=resources)


def prepare(home: Path, days: list[date], warehouse: dict[str, str] | None, writers: int):
    """Land `days`, make the instance (the warehouse pool's limit `writers`), load dimensions."""
    import dagster as dg

    from pipelines.lib.warehouse import WAREHOUSE_POOL
    from pipelines.resources import landing_zone
    from sim.world.replay import land_days

    environment(home, warehouse)
    land_days(landing_zone("local"), days)
    (home / "dagster").mkdir(parents=True)
    (home / "dagster" / "dagster.yaml").write_text((REPO / "deploy/dagster.yaml").read_text())
    defs = definitions(warehouse)
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        instance.event_log_storage.set_concurrency_slots(WAREHOUSE_POOL, writers)
        defs.resolve_job_def("dimension_warehouse_job").execute_in_process(
            instance=instance, run_config=QUIET
        )
    return defs


def worker(home: str, warehouse: dict[str, str] | None, queue, failures) -> None:
    """Run the daily job for each day taken from `queue` until it is empty."""
    import dagster as dg

    environment(Path(home), warehouse)
    defs = definitions(warehouse)
    job = defs.resolve_job_def("daily_warehouse_job")
    with dg.DagsterInstance.from_config(str(Path(home) / "dagster")) as instance:
        while True:
            day = queue.get()
            if day is None:
                return
            result = job.execute_in_process(
                instance=instance, partition_key=day, raise_on_error=False, run_config=QUIET
            )
            if not result.success:
                failures.put(day)


def check_days(defs, days: list[date]) -> int:
    """Every day holds exactly its flights, once; the flights in all."""
    from sim.world.nycflights import read_table

    flights = read_table("flights")
    month, day_of_month = flights.month.str.zfill(2), flights.day.str.zfill(2)
    per_day = (flights.year + "-" + month + "-" + day_of_month).value_counts()
    found = defs.resources["warehouse"].query(
        "select cast(flight_date as varchar) as day, count(*) as n, "
        "count(distinct flight_id) as ids from fct_flight_features group by 1"
    )
    counts = {r.day: (r.n, r.ids) for r in found.itertuples()}
    for day in days:
        expected = int(per_day.get(day.isoformat(), 0))
        if counts.get(day.isoformat()) != (expected, expected):
            raise SystemExit(f"{day}: {counts.get(day.isoformat())} rows, expected {expected}")
    return sum(n for n, _ in counts.values())


def single_run(home: Path, days: list[date], warehouse) -> tuple[float, int]:
    """One run over the whole range (BackfillPolicy.single_run)."""
    import dagster as dg

    defs = prepare(home, days, warehouse, writers=1)
    tags = {
        "dagster/asset_partition_range_start": days[0].isoformat(),
        "dagster/asset_partition_range_end": days[-1].isoformat(),
    }
    started = time.perf_counter()
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        defs.resolve_job_def("daily_warehouse_job").execute_in_process(
            instance=instance, tags=tags, run_config=QUIET
        )
    elapsed = time.perf_counter() - started
    return elapsed, check_days(defs, days)


def per_partition(home: Path, days: list[date], warehouse, runs: int) -> tuple[float, int]:
    """One run per day, `runs` of them at once (worker processes sharing a queue of days)."""
    defs = prepare(home, days, warehouse, writers=runs if warehouse else 1)
    context = multiprocessing.get_context("spawn")
    queue, failures = context.Queue(), context.Queue()
    for day in days:
        queue.put(day.isoformat())
    for _ in range(runs):
        queue.put(None)
    started = time.perf_counter()
    processes = [
        context.Process(target=worker, args=(str(home), warehouse, queue, failures))
        for _ in range(runs)
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    elapsed = time.perf_counter() - started
    failed = []
    while not failures.empty():
        failed.append(failures.get())
    if failed or any(p.exitcode for p in processes):
        codes = [p.exitcode for p in processes]
        raise SystemExit(f"runs failed: days {sorted(failed)}, worker exit codes {codes}")
    return elapsed, check_days(defs, days)


def report(backend: str, mode: str, days: int, seconds: float, rows: int) -> None:
    from sim.driver.console import say

    say(
        f"{backend:<10}{mode:<34}{days:>6}{seconds:>10.1f}{rows:>10,}{rows / seconds:>10,.0f}"
        f"{seconds / days:>8.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default="2013-01-01")
    parser.add_argument("--year-days", type=int, default=365, help="days of the single run")
    parser.add_argument("--partition-days", type=int, default=30, help="days run one per run")
    parser.add_argument("--backends", nargs="+", default=["duckdb", "postgres"])
    parser.add_argument("--runs", nargs="+", type=int, default=[1, 2], help="runs at once")
    parser.add_argument(
        "--log",
        type=Path,
        default=Path(tempfile.gettempdir()) / "flywheel-bench-warehouse_backends.log",
        help="where the runs' output (Dagster, dbt) goes",
    )
    args = parser.parse_args()
    from sim.driver.console import output_to_log, say

    say(f"the runs' output: {args.log}")
    with output_to_log(args.log):
        try:
            run(args)
        except SystemExit as e:
            say(f"failed: {e}", error=True)
            raise SystemExit(1) from None


def run(args: argparse.Namespace) -> None:
    """Every case of `args`, a line of figures each."""
    from sim.driver.console import say

    start = date.fromisoformat(args.start)
    year = [start + timedelta(days=i) for i in range(args.year_days)]
    part = [start + timedelta(days=i) for i in range(args.partition_days)]
    say(
        f"{'backend':<10}{'mode':<34}{'days':>6}{'wall s':>10}{'flights':>10}{'rows/s':>10}"
        f"{'s/day':>8}"
    )
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flywheel-bench-")))
        url = None
        if "postgres" in args.backends:
            from deploy.stack.postgres import scratch_server

            root.chmod(0o711)  # PostgreSQL's server user passes through to its folder
            (root / "postgres").mkdir()
            url = stack.enter_context(scratch_server(root / "postgres"))
        cases = [("single run", None)] if args.year_days else []
        if args.partition_days:
            cases += [(f"run per partition, {n} at once", n) for n in args.runs]
        for backend in args.backends:
            for i, (mode, runs) in enumerate(cases):
                from deploy.stack.postgres import scratch_database

                home = root / f"{backend}-{i}"
                scratch = (
                    scratch_database(url, f"bench_{i}") if backend == "postgres" else nullcontext()
                )
                with scratch as warehouse:
                    if runs is None:
                        report(backend, mode, len(year), *single_run(home, year, warehouse))
                    else:
                        report(
                            backend, mode, len(part), *per_partition(home, part, warehouse, runs)
                        )


if __name__ == "__main__":
    main()
