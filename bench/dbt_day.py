"""Benchmark: one day's daily dbt build on a grown warehouse, for two versions of the dbt project.

    python -m bench.dbt_day --home DIR [--day 2013-12-27] [--repeat 5] [--before REF]

Copies the warehouse of a finished simulation (DIR: its FLYWHEEL_HOME; the whole year's grows to
336,776 flights) and rebuilds one day there as the daily run's dbt step does (`dbt build
--select tag:daily --exclude tag:training`, unit tests left out, the day's window in the
environment), `--repeat` times with each version in turn: the dbt project at git revision REF (a
temporary worktree) and the working tree's. Each build starts from the same copy, so both
versions do the same work. Prints the median of dbt's own elapsed seconds per version and, for
the last build of each, its slowest nodes. dbt runs as a command, so its start-up and parse are
not in the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import date, timedelta
from pathlib import Path

from bench.day_cost import REPO, checkout, remove_checkout


def build(project: Path, warehouse: Path, day: date, target: Path) -> dict:
    """One daily build of `day` with the dbt project under `project`; its run results."""
    env = {
        **os.environ,
        "FLYWHEEL_WAREHOUSE_PATH": str(warehouse),
        "FLYWHEEL_MIN_DATE": day.isoformat(),
        "FLYWHEEL_MAX_DATE": (day + timedelta(days=1)).isoformat(),
    }
    command = [
        str(Path(sys.prefix) / "bin" / "dbt"),
        "build",
        "--select",
        "tag:daily",
        "--exclude",
        "tag:training",
        "--exclude-resource-type",
        "unit_test",
        "--project-dir",
        str(project),
        "--profiles-dir",
        str(project),
        "--target-path",
        str(target),
        "--log-path",
        str(target / "logs"),
        "--quiet",
    ]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"dbt build failed in {project}:\n{done.stdout}\n{done.stderr}")
    return json.loads((target / "run_results.json").read_text())


def main() -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--home", type=Path, required=True, help="a finished simulation's home")
    parser.add_argument("--day", type=date.fromisoformat, default=date(2013, 12, 27))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--before", help="git revision to compare with (default: none)")
    args = parser.parse_args()
    source = args.home / "warehouse.duckdb"
    if not source.exists():
        raise SystemExit(f"no warehouse at {source}: --home names a simulation's FLYWHEEL_HOME")
    work = Path(tempfile.mkdtemp(prefix="flywheel-dbt-day-"))
    versions = []
    if args.before:
        versions.append((f"before ({args.before})", checkout(args.before, work / "before")))
    versions.append(("after (working tree)", REPO))
    elapsed: dict[str, list[float]] = {name: [] for name, _ in versions}
    last: dict[str, dict] = {}
    try:
        for i in range(args.repeat):
            for index, (name, code) in enumerate(versions):
                warehouse = work / "warehouse.duckdb"
                shutil.copyfile(source, warehouse)
                # A target folder per version: dbt's partial parse state is its project's own.
                target = work / f"target-{index}"
                results = build(code / "dbt_project", warehouse, args.day, target)
                elapsed[name].append(results["elapsed_time"])
                last[name] = results
                print(
                    f"[{i + 1}/{args.repeat}] {name}: {results['elapsed_time']:.2f} s", flush=True
                )
    finally:
        if args.before:
            remove_checkout(work / "before")
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ndaily dbt build of {args.day} on {source}, {args.repeat} builds each:")
    for name, seconds in elapsed.items():
        nodes = last[name]["results"]
        print(
            f"{name}: median {statistics.median(seconds):.2f} s "
            f"(min {min(seconds):.2f}, max {max(seconds):.2f}), {len(nodes)} nodes, "
            f"their own seconds {sum(n['execution_time'] for n in nodes):.2f}"
        )
        slowest = sorted(nodes, key=lambda n: n["execution_time"], reverse=True)[:5]
        for node in slowest:
            print(f"    {node['execution_time']:.3f} s  {node['unique_id']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
