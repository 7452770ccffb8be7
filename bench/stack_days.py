"""Benchmark: seconds per simulated day, the stack's daemon against the embedded simulation.

    python -m bench.stack_days --start 2013-02-27 --days 5 --bootstrap-days 4 --trials 1

Plays the same days twice, each in a fresh FLYWHEEL_HOME: the simulation in process on the
embedded defaults, then `sim run --daemon` on a fresh stack (a process per run, Postgres, S3,
the MLflow server). Prints each day's seconds both ways, and where the daemon-driven day's
seconds go, read from the stack's Dagster instance: in the queue (enqueued to launched), from
launch to the first step (a new process loads the code location), in the steps, and the rest
(the daemon's sensor ticks, every 5 s, and the world waiting for them).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from deploy.stack.stack import Stack
from pipelines.lib.datasets import init_repository

REPO = Path(__file__).resolve().parents[1]
DAY_LINE = re.compile(r"^\[(\d+)/\d+ (\d+)s\] (\d{4}-\d{2}-\d{2}): (.*)$")


def play(env: dict[str, str], args: argparse.Namespace, *flags: str) -> dict[str, float]:
    """Run the simulation; each day's seconds (from its progress lines)."""
    command = [sys.executable, "-m", "sim", "run", "--start", args.start, "--days", str(args.days)]
    command += ["--bootstrap-days", str(args.bootstrap_days), *flags]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the simulation failed:\n{done.stdout}\n{done.stderr}")
    days, previous = {}, 0.0
    for line in done.stdout.splitlines():
        if m := DAY_LINE.match(line):
            days[m[3]] = float(m[2]) - previous
            previous = float(m[2])
    return days


def phases() -> dict[str, dict[str, float]]:
    """Per day of the daemon-driven run, from the stack's instance (DAGSTER_HOME): seconds
    queued, launching and in steps, summed over the day's runs (a retraining counts on its
    event day)."""
    import dagster as dg

    kinds = dg.DagsterEventType
    per_day: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    with dg.DagsterInstance.get() as instance:
        for record in instance.get_run_records(dg.RunsFilter(), ascending=True):
            at: dict = {}
            for entry in instance.all_logs(record.dagster_run.run_id):
                at.setdefault(entry.dagster_event_type, entry.timestamp)
            tags = record.dagster_run.tags
            day = tags.get("dagster/partition") or tags.get("flywheel/event_day")
            enqueued, starting = at.get(kinds.RUN_ENQUEUED), at.get(kinds.RUN_STARTING)
            first, end = at.get(kinds.STEP_START), at.get(kinds.RUN_SUCCESS)
            if None in (day, enqueued, starting, first, end):
                continue
            per_day[day]["queued"] += starting - enqueued
            per_day[day]["launch"] += first - starting
            per_day[day]["steps"] += end - first
            per_day[day]["runs"] += 1
    return per_day


def main() -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--start", default="2013-02-27")
    parser.add_argument("--days", type=int, default=5)
    parser.add_argument("--bootstrap-days", type=int, default=4)
    parser.add_argument("--trials", default="1")
    parser.add_argument("--max-epochs", default="2")
    parser.add_argument("--windows", default="1", help="validation and test days each")
    parser.add_argument(
        "--keep-stack", action="store_true", help="leave the stack up (its UI) afterwards"
    )
    args = parser.parse_args()
    budget = {
        "FLYWHEEL_TRIALS": args.trials,
        "FLYWHEEL_MAX_EPOCHS": args.max_epochs,
        "FLYWHEEL_VALIDATION_DAYS": args.windows,
        "FLYWHEEL_TEST_DAYS": args.windows,
    }
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("FLYWHEEL_", "DAGSTER_"))}

    embedded = Path(tempfile.mkdtemp(prefix="flywheel-embedded-"))
    (embedded / "dagster").mkdir()
    (embedded / "dagster" / "dagster.yaml").write_text((REPO / "deploy/dagster.yaml").read_text())
    init_repository(embedded / "data")
    env = {**clean, **budget, "FLYWHEEL_ENV": "local", "FLYWHEEL_HOME": str(embedded)}
    env |= {"DAGSTER_HOME": str(embedded / "dagster"), "FLYWHEEL_DVC_REPO": str(embedded / "data")}
    print(f"in process, embedded defaults, under {embedded}", flush=True)
    began = time.monotonic()
    in_process = play(env, args)
    print(f"  {time.monotonic() - began:.0f} s", flush=True)

    home = Path(tempfile.mkdtemp(prefix="flywheel-stack-", dir="/tmp"))
    home.chmod(0o755)  # PostgreSQL's server user must reach its cluster under it
    os.environ.update({**budget, "FLYWHEEL_HOME": str(home)})
    stack = Stack.of_home(home)
    print(f"through the daemon, a fresh stack under {home}", flush=True)
    try:
        began = time.monotonic()
        stack.up(say=lambda line: None)
        print(f"  stack up {time.monotonic() - began:.0f} s", flush=True)
        env = {**os.environ, **stack.environment()}
        began = time.monotonic()
        daemon = play(env, args, "--daemon")
        print(f"  {time.monotonic() - began:.0f} s", flush=True)
        split = phases()
    finally:
        if args.keep_stack:
            print(f"  the stack is still up: FLYWHEEL_HOME={home} python -m deploy.stack down")
        else:
            stack.down(say=lambda line: None)

    print(
        "\n| day | in process s | daemon s | runs | queued s | launch to first step s | "
        "steps s | the rest s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    total = defaultdict(float)
    for day, seconds in daemon.items():
        p = split.get(day, {})
        rest = seconds - p.get("queued", 0) - p.get("launch", 0) - p.get("steps", 0)
        row = {"in process": in_process.get(day, 0.0), "daemon": seconds, **p, "rest": rest}
        for key, value in row.items():
            total[key] += value
        print(
            f"| {day} | {row['in process']:.0f} | {seconds:.0f} | {p.get('runs', 0):.0f} | "
            f"{p.get('queued', 0):.0f} | {p.get('launch', 0):.0f} | {p.get('steps', 0):.0f} | "
            f"{rest:.0f} |"
        )
    n = len(daemon)
    print(
        f"| mean of {n} | {total['in process'] / n:.1f} | {total['daemon'] / n:.1f} | "
        f"{total['runs'] / n:.1f} | {total['queued'] / n:.1f} | {total['launch'] / n:.1f} | "
        f"{total['steps'] / n:.1f} | {total['rest'] / n:.1f} |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
