"""Figures from a benchmark log: wall time of each Dagster run, from its start and end events.

    python -m bench.backfill_log_figures bench/results/ingest_backfill.log

For when the per-partition mode of `bench.ingest_backfill` is stopped before it ends: the runs
that did finish are timed from their RUN_START and RUN_SUCCESS events.
"""

import argparse
import re
from datetime import datetime
from statistics import mean, median

EVENT = re.compile(
    r"^(?P<at>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) \+0000 - dagster - DEBUG - "
    r"(?P<job>\w+) - (?P<run>[0-9a-f-]{36}) - \d+ - (?P<event>RUN_START|RUN_SUCCESS) - "
)


def run_durations(path: str) -> list[tuple[str, float]]:
    """(job, seconds) of every run that started and succeeded, in log order."""
    started: dict[str, datetime] = {}
    runs = []
    with open(path) as log:
        for line in log:
            if m := EVENT.match(line):
                at = datetime.fromisoformat(m["at"])
                if m["event"] == "RUN_START":
                    started[m["run"]] = at
                elif m["run"] in started:
                    runs.append((m["job"], (at - started[m["run"]]).total_seconds()))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    runs = [s for job, s in run_durations(parser.parse_args().log) if job == "daily_warehouse_job"]
    print(f"daily_warehouse_job runs: {len(runs)}")
    for i, seconds in enumerate(runs[:2]):
        print(f"  run {i + 1}: {seconds:.0f} s")
    rest = runs[2:]
    if rest:
        print(
            f"  runs 3..{len(runs)} (one partition each): {len(rest)} runs, {sum(rest):.0f} s, "
            f"mean {mean(rest):.1f} s, median {median(rest):.1f} s"
        )


if __name__ == "__main__":
    main()
