"""The same report, figure for figure, from two revisions of the code: a reshaping's proof.

    python -m bench.same_report --base REV [--head REV] [--start 2013-11-01 --days 49 ...]
        [--policy flywheel]

Plays the simulation over one fixed span twice, each in a state of its own: once with the code of
git revision `--base` and once with the working tree's (or revision `--head`'s), each revision
checked out in a temporary worktree. Both
use this environment's packages. Then it compares the two reports' tables (`weekly.csv`,
`retrainings.csv`, `labels.csv`) cell by cell, leaving out what measures the machine rather than
the loop (a retraining's wall seconds), and prints each difference; it exits 1 if there is one.
Numbers are equal when they agree to `REL_TOL`: two plays of the same code may differ in the
last bits of a mean over float32 scores (the order of a sum), never more.
A small tuning budget keeps it to minutes.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
TABLES = ("weekly", "retrainings", "labels")
# Columns that measure the machine, not the loop.
MACHINE_COLUMNS = {"retrainings": ["seconds"]}
# Columns a later version of the report names otherwise: compared under their new name.
RENAMED = {"flights": "examples", "late_rate": "label_mean", "judged_flights": "judged_examples"}
REL_TOL = 1e-9
# Settings that would point a side at another state than its own.
STATE_SETTINGS = (
    "FLYWHEEL_WAREHOUSE_PATH",
    "FLYWHEEL_DATASET_CACHE",
    "FLYWHEEL_DVC_REMOTE",
    "MLFLOW_TRACKING_URI",
    "FLYWHEEL_OPTUNA_STORAGE",
)


def tool(name: str) -> str:
    """An executable of this environment (dvc, dbt), beside its Python."""
    return str(Path(sys.executable).with_name(name))


def own_state(home: Path, code: Path) -> dict[str, str]:
    """The environment of one side: its home, Dagster instance and DVC repository, on the
    embedded defaults. (The simulation's own `own_state` is not imported: where it lives differs
    between the revisions compared.)"""
    dagster_home, data = home / "dagster", home / "checkout" / "data"
    dagster_home.mkdir(parents=True)
    shutil.copy(code / "deploy" / "dagster.yaml", dagster_home / "dagster.yaml")
    data.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=data.parent, check=True)
    quiet = {**os.environ, "DVC_NO_ANALYTICS": "1"}  # `dvc init` reports its use otherwise
    subprocess.run([tool("dvc"), "init", "--subdir", "-q"], cwd=data, env=quiet, check=True)
    subprocess.run([tool("dvc"), "config", "core.analytics", "false"], cwd=data, check=True)
    env = {k: v for k, v in os.environ.items() if k not in STATE_SETTINGS}
    env.update(
        FLYWHEEL_HOME=str(home),
        DAGSTER_HOME=str(dagster_home),
        FLYWHEEL_DVC_REPO=str(data),
        FLYWHEEL_ENV="local",
        FLYWHEEL_LABELING="files",
        FLYWHEEL_TASK="flights",
        PYTHONPATH=str(code),
    )
    return env


def play(code: Path, home: Path, run_args: list[str], log: Path) -> Path:
    """The simulation with the code under `code`; its report's folder."""
    subprocess.run(
        [tool("dbt"), "parse", "--quiet", "--profiles-dir", "."],
        cwd=code / "dbt_project",
        check=True,
        env={**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"},
    )
    report = home / "report"
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "sim", "run", *run_args, "--report-dir", str(report)],
            cwd=code,
            env=own_state(home, code),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if done.returncode:
        raise SystemExit(f"the simulation of {code} failed ({done.returncode}): see {log}")
    return report


def same(x: object, y: object) -> bool:
    """Whether two cells agree: equal, both missing, or numbers within REL_TOL."""
    if x == y or (pd.isna(x) and pd.isna(y)):
        return True
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (x, y))
    return numbers and math.isclose(float(x), float(y), rel_tol=REL_TOL)


def read_table(report: Path, name: str) -> pd.DataFrame:
    """A report's table `name`, its columns under their current names."""
    return pd.read_csv(report / f"{name}.csv").rename(columns=RENAMED)


def largest_gap(before: Path, after: Path) -> float:
    """The largest relative difference between two numeric cells of the reports."""
    gap = 0.0
    for name in TABLES:
        a, b = (
            read_table(d, name)
            .drop(columns=MACHINE_COLUMNS.get(name, []), errors="ignore")
            .select_dtypes("number")
            for d in (before, after)
        )
        if a.shape == b.shape and list(a.columns) == list(b.columns):
            scale = np.maximum(a.abs().to_numpy(), b.abs().to_numpy())
            with np.errstate(invalid="ignore", divide="ignore"):
                relative = np.abs(a.to_numpy() - b.to_numpy()) / scale
            gap = max(gap, float(np.nanmax(relative, initial=0.0)))
    return gap


def differences(before: Path, after: Path) -> list[str]:
    """Each cell that differs between the two reports' tables, named."""
    found = []
    for name in TABLES:
        a, b = (read_table(d, name) for d in (before, after))
        a, b = (t.drop(columns=MACHINE_COLUMNS.get(name, []), errors="ignore") for t in (a, b))
        if list(a.columns) != list(b.columns):
            found.append(f"{name}: columns {list(a.columns)} != {list(b.columns)}")
            continue
        if len(a) != len(b):
            found.append(f"{name}: {len(a)} rows != {len(b)}")
            continue
        for column in a.columns:
            for row, (x, y) in enumerate(zip(a[column], b[column], strict=True)):
                if not same(x, y):
                    found.append(f"{name}.csv row {row} {column}: {x!r} != {y!r}")
    return found


def main() -> int:
    """Play both sides and compare; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the git revision to compare against")
    parser.add_argument("--head", help="the revision to compare (default: the working tree)")
    parser.add_argument("--start", default="2013-11-01")
    parser.add_argument("--days", type=int, default=49)
    parser.add_argument("--bootstrap-days", type=int, default=21)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--max-epochs", type=int, default=4)
    parser.add_argument("--members", type=int, default=1)
    parser.add_argument("--policy", default="flywheel", help="the retraining policy both play")
    parser.add_argument("--keep", action="store_true", help="keep the two states and logs")
    args = parser.parse_args()
    run_args = [
        *("--start", args.start, "--days", str(args.days)),
        *("--bootstrap-days", str(args.bootstrap_days), "--trials", str(args.trials)),
        *("--max-epochs", str(args.max_epochs), "--members", str(args.members), "--brief"),
        *("--policy", args.policy),
    ]
    scratch = Path(tempfile.mkdtemp(prefix="same-report-"))
    sides = {"base": scratch / "base", "head": scratch / "head" if args.head else REPO}
    for side, revision in (("base", args.base), ("head", args.head)):
        if revision:
            worktree = ["git", "worktree", "add", "-q", "--detach", str(sides[side]), revision]
            subprocess.run(worktree, cwd=REPO, check=True)
    try:
        reports = {}
        for side, code in sides.items():
            started = time.monotonic()
            home = scratch / f"{side}-state"
            reports[side] = play(code, home, run_args, scratch / f"{home.name}.log")
            print(f"{side}: played in {time.monotonic() - started:.0f} s", flush=True)
        found = differences(reports["base"], reports["head"])
        weekly = pd.read_csv(reports["base"] / "weekly.csv")
        runs = pd.read_csv(reports["base"] / "retrainings.csv")
        cells = sum(
            pd.read_csv(reports["base"] / f"{t}.csv")
            .drop(columns=MACHINE_COLUMNS.get(t, []), errors="ignore")
            .size
            for t in TABLES
        )
        print(
            f"{args.days} days from {args.start}: {len(weekly)} weeks, {len(runs)} retrainings, "
            f"{cells} cells compared, {len(found)} different; the largest relative gap "
            f"between two numbers {largest_gap(reports['base'], reports['head']):.1e}"
        )
        for line in found:
            print("  " + line)
        return 1 if found else 0
    finally:
        for code in sides.values():
            if code != REPO:
                subprocess.run(["git", "worktree", "remove", "--force", str(code)], cwd=REPO)
        if args.keep:
            print(f"states and logs kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
