"""Benchmark: the stack's start-up, and where a daemon-launched run's seconds go.

    python -m bench.stack_runs --start 2013-01-01 --days 3

In a fresh FLYWHEEL_HOME: `deploy.stack up` from nothing (cluster initialised, databases and
bucket created), `down`, then `up` again (resume); then lands the days through S3, turns the
landing sensor on and lets the daemon launch its runs. For each run, read from the stack's
Dagster instance on Postgres: the seconds in the queue (enqueued to launched), from launch to its
first step (a new process loads the code location), in its steps, and in all.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from deploy.stack.stack import Stack

BIN = Path(sys.executable).parent


def timed(what: str, action) -> float:
    began = time.monotonic()
    action()
    seconds = time.monotonic() - began
    print(f"  {what}: {seconds:.1f} s", flush=True)
    return seconds


def wait_for_runs(count: int, timeout_s: float) -> None:
    """Until `count` runs finished (success or failure), on the instance in DAGSTER_HOME."""
    import dagster as dg

    deadline = time.monotonic() + timeout_s
    finished = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE}
    while time.monotonic() < deadline:
        with dg.DagsterInstance.get() as instance:
            records = instance.get_run_records(dg.RunsFilter())
        if len([r for r in records if r.dagster_run.status in finished]) >= count:
            return
        time.sleep(2)
    raise SystemExit(f"fewer than {count} runs finished in {timeout_s:.0f} s")


def phases() -> None:
    """Print each run's queue, launch-to-first-step, steps and total seconds."""
    import dagster as dg

    kinds = dg.DagsterEventType
    print("\n| run | partition | queued s | launch to first step s | steps s | total s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    with dg.DagsterInstance.get() as instance:
        for record in instance.get_run_records(dg.RunsFilter(), ascending=True):
            run, at = record.dagster_run, {}
            for entry in instance.all_logs(record.dagster_run.run_id):
                kind = entry.dagster_event_type
                if kind is not None and kind not in at:
                    at[kind] = entry.timestamp
            enqueued, starting = at.get(kinds.RUN_ENQUEUED), at.get(kinds.RUN_STARTING)
            first, end = at.get(kinds.STEP_START), at.get(kinds.RUN_SUCCESS)
            if None in (enqueued, starting, first, end):
                print(f"| {run.job_name} | {run.status.value} | | | | |")
                continue
            print(
                f"| {run.job_name} | {run.tags.get('dagster/partition', '')} | "
                f"{starting - enqueued:.1f} | {first - starting:.1f} | {end - first:.1f} | "
                f"{end - enqueued:.1f} |"
            )


def main() -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--start", type=date.fromisoformat, default=date(2013, 1, 1))
    parser.add_argument("--days", type=int, default=3)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="flywheel-stack-", dir="/tmp"))
    home.chmod(0o755)  # PostgreSQL's server user must reach its cluster under it
    os.environ["FLYWHEEL_HOME"] = str(home)
    stack = Stack.of_home(home)
    quiet = lambda line: None  # noqa: E731
    print(f"stack under {home}")
    try:
        timed("stack up from nothing", lambda: stack.up(say=quiet))
        timed("stack down", lambda: stack.down(say=quiet))
        timed("stack up again (resume)", lambda: stack.up(say=quiet))
        env = {**os.environ, **stack.environment()}
        advance = [str(BIN / "flywheel-sim"), "advance", "--env", "prod"]
        advance += ["--start", args.start.isoformat(), "--days", str(args.days)]
        subprocess.run(advance, env=env, check=True, capture_output=True)
        sensor = [str(BIN / "dagster"), "sensor", "start", "landing_sensor"]
        subprocess.run(
            [*sensor, "-w", str(stack.workspace)], env=env, check=True, capture_output=True
        )
        timed(
            f"landing sensor's {args.days + 1} runs (dimensions + days), from the sensor's start",
            lambda: wait_for_runs(args.days + 1, timeout_s=900),
        )
        phases()
    finally:
        stack.down(say=quiet)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
