"""Benchmark: seconds per simulated day, by stage, for two versions of the code on the same days.

    python -m bench.day_cost --start 2013-01-01 --days 10 --bootstrap-days 6 --before REF

Plays the simulation (the same code as `make flywheel`) on the same days twice, one after the
other, each in a fresh FLYWHEEL_HOME: once with the code at git revision REF (checked out in a
temporary worktree; its dbt project parsed there) and once with the working tree. Then reads
each Dagster instance and prints, per simulated day, where the seconds went: each step of the
daily warehouse run, the other runs by job, and what the driver spent outside any run (landing
files, ticking sensors, opening runs). Retraining runs are reported apart (they are weekly).
Without --before, only the working tree is measured.

The second of two plays runs a few percent faster, even with the same code on both sides, so
one pair cannot resolve a smaller cut. `--pairs N` plays each version N times, the order
alternating from one pair to the next (before first, then after first, ...), and compares the
means of each version's plays.
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
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RETRAINING_BY_DAY = "retraining by day"
PROGRESS = re.compile(r"^\[(\d+)/(\d+) (\d+)s\] (\d{4}-\d\d-\d\d):")
DAILY_JOBS = (
    "daily_warehouse_job",
    "label_export_job",
    "label_import_job",
    "dimension_warehouse_job",
)


def checkout(ref: str, into: Path) -> Path:
    """A worktree of `ref` under `into`, with its dbt project parsed."""
    tree = into / "tree"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-q", str(tree), ref], cwd=REPO, check=True
    )
    dbt = str(Path(sys.prefix) / "bin" / "dbt")
    project = tree / "dbt_project"
    subprocess.run(
        [dbt, "parse", "--project-dir", str(project), "--profiles-dir", str(project), "-q"],
        cwd=project,
        check=True,
        env={**os.environ, "FLYWHEEL_WAREHOUSE_PATH": str(into / "parse.duckdb")},
    )
    return tree


def remove_checkout(into: Path) -> None:
    """Remove the worktree `checkout` made under `into`."""
    subprocess.run(
        ["git", "worktree", "remove", "--force", str(into / "tree")], cwd=REPO, check=False
    )


def play(code: Path, home: Path, args: argparse.Namespace) -> tuple[float, dict[str, float]]:
    """Play the days with the code under `code` in a fresh `home`; (wall s, each day's wall s)."""
    from bench.drift_to_promotion import fresh_home

    fresh_home(home, code)
    command = [sys.executable, "-m", "sim", "run", "--start", args.start.isoformat()]
    command += ["--days", str(args.days), "--bootstrap-days", str(args.bootstrap_days)]
    command += ["--trials", str(args.trials), "--max-epochs", str(args.max_epochs)]
    command += ["--validation-days", "2", "--test-days", "2", "--report-dir", str(home / "rep")]
    log = home / "simulation.log"
    print(f"  playing {args.days} days with the code in {code} (output: {log})", flush=True)
    began = time.monotonic()
    with log.open("w") as out:
        # One network per challenger, as code from before FLYWHEEL_MEMBERS trains (the setting
        # is an environment variable: code that predates it ignores it).
        env = {**os.environ, "FLYWHEEL_MEMBERS": "1"}
        done = subprocess.run(command, cwd=code, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - began
    days, previous = {}, 0.0
    for line in log.read_text().splitlines():
        match = PROGRESS.match(line)
        if match:
            elapsed = float(match.group(3))
            days[match.group(4)] = elapsed - previous
            previous = elapsed
    if done.returncode != 0:
        # An older revision may fail after its last day (e.g. in its report): its days still count.
        if len(days) < args.days:
            raise SystemExit(f"the simulation failed (exit {done.returncode}); see {log}")
        print(f"  the simulation exited {done.returncode} after its {len(days)} days; see {log}")
    return wall, days


def breakdown(home: Path) -> dict[str, dict[str, float]]:
    """Seconds per simulated day: each daily-warehouse step, each other job, the run overhead,
    and the retraining runs (under "retraining", by day in RETRAINING_BY_DAY)."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    stages: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    with dg.DagsterInstance.get() as instance:
        playing = "?"  # the simulated day being played: its daily run starts it
        for record in instance.get_run_records(dg.RunsFilter(), ascending=True):
            run = record.dagster_run
            if run.job_name == "daily_warehouse_job":
                playing = run.tags.get("dagster/partition", "?")
            day = run.tags.get("dagster/partition") or playing
            wall = (record.end_time or 0) - (record.start_time or 0)
            if run.job_name not in DAILY_JOBS:
                stages["retraining"][run.job_name] += wall
                stages[RETRAINING_BY_DAY][playing] += wall
                continue
            steps = step_seconds(instance, run.run_id)
            if run.job_name == "daily_warehouse_job":
                for step, seconds in steps.items():
                    stages[day][f"daily: {step}"] += seconds
                stages[day]["daily: run overhead"] += wall - sum(steps.values())
            else:
                stages[day][run.job_name.removesuffix("_job")] += wall
    return stages


def step_seconds(instance, run_id: str) -> dict[str, float]:
    """Each step's seconds from its start event to its success or failure event."""
    import dagster as dg

    started, seconds = {}, {}
    for entry in instance.all_logs(
        run_id,
        of_type={
            dg.DagsterEventType.STEP_START,
            dg.DagsterEventType.STEP_SUCCESS,
            dg.DagsterEventType.STEP_FAILURE,
        },
    ):
        key = entry.step_key
        if entry.dagster_event.event_type == dg.DagsterEventType.STEP_START:
            started[key] = entry.timestamp
        elif key in started:
            seconds[key] = entry.timestamp - started[key]
    return seconds


def summarize(name: str, wall: float, days: dict[str, float], stages) -> dict[str, float]:
    """Print the mean seconds per simulated day by stage; the means."""
    played = [d for d in days if d in stages]
    count = len(played) or 1
    means: dict[str, float] = defaultdict(float)
    retrained = stages.get(RETRAINING_BY_DAY, {})
    for day in played:
        in_runs = retrained.get(day, 0.0)
        for stage, seconds in stages[day].items():
            means[stage] += seconds / count
            in_runs += seconds
        means["driver outside runs (landing, sensors, run start)"] += (
            max(days[day] - in_runs, 0.0) / count
        )
    per_day = sum(days[d] - retrained.get(d, 0.0) for d in played) / count
    retraining = stages.get("retraining", {})
    # Day 1 holds the process's start and dbt's first parse.
    steady = [days[d] - retrained.get(d, 0.0) for d in played[1:]]
    print(
        f"\n{name}: {wall:.0f} s for {len(days)} days; {per_day:.2f} s per day without retraining"
        + (f" ({sum(steady) / len(steady):.2f} s on days 2-{len(played)})" if steady else "")
    )
    for stage, seconds in sorted(means.items(), key=lambda kv: -kv[1]):
        print(f"  {seconds:7.2f} s  {stage}")
    for job, seconds in retraining.items():
        print(f"  retraining: {job} {seconds:.0f} s in all")
    means["per day"] = per_day
    means["steady day"] = sum(steady) / len(steady) if steady else per_day
    means["retraining"] = sum(retraining.values())
    return means


def play_order(versions: list[tuple[str, Path]], pairs: int) -> list[tuple[int, str, Path]]:
    """(pair, name, code) of each play: each version once a pair, the order alternating."""
    return [
        (pair, name, code)
        for pair in range(pairs)
        for name, code in (versions if pair % 2 == 0 else versions[::-1])
    ]


def mean_of_plays(plays: list[dict[str, float]]) -> dict[str, float]:
    """The figures of a version's plays, averaged."""
    keys = {key for play in plays for key in play}
    return {key: sum(play.get(key, 0.0) for play in plays) / len(plays) for key in keys}


def main() -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--start", type=date.fromisoformat, default=date(2013, 1, 1))
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--bootstrap-days", type=int, default=6)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--max-epochs", type=int, default=2)
    parser.add_argument("--before", help="git revision to compare with (default: none)")
    parser.add_argument(
        "--pairs", type=int, default=1, help="plays of each version, the order alternating"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flywheel-day-cost-"))
    print(f"state under {work}")
    versions = []
    if args.before:
        versions.append((f"before ({args.before})", checkout(args.before, work / "before")))
    versions.append(("after (working tree)", REPO))
    plays: dict[str, list[dict[str, float]]] = defaultdict(list)
    try:
        for pair, name, code in play_order(versions, args.pairs):
            folder = name.split()[0] + (f"-{pair + 1}" if args.pairs > 1 else "")
            home = work / folder / "home"
            wall, days = play(code, home, args)
            label = name + (f", pair {pair + 1}" if args.pairs > 1 else "")
            plays[name].append(summarize(label, wall, days, breakdown(home)))
    finally:
        if args.before:
            remove_checkout(work / "before")
    means = {name: mean_of_plays(figures) for name, figures in plays.items()}
    if args.pairs > 1:
        print()
        for name, figures in plays.items():
            each = ", ".join(f"{f['steady day']:.2f}" for f in figures)
            print(
                f"{name}: a steady day {means[name]['steady day']:.2f} s over {len(figures)} "
                f"plays ({each}); retraining runs {means[name]['retraining']:.0f} s a play"
            )
    if len(means) == 2:
        before, after = means.values()
        if after["per day"]:
            print(f"\nper-day cost cut {before['per day'] / after['per day']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
