"""`flywheel-sim compare`: replay the same days under several retraining policies, one report.

Each policy plays the simulation from nothing in a state folder of its own (its warehouse,
registry, Dagster instance and landing zone under `<out>/<policy>`), in a process of its own, with
only its retraining triggers on (`POLICIES`). The same days land, the annotators answer
the same way and the first model trains on the same bootstrap days; what differs is when each
retrains. The comparison then reads each policy's report tables and writes one report: production
AUC per week for each policy (one plot), labels spent, retrainings, promotions and seconds.

A policy whose simulation was killed resumes where it stopped when the same comparison is asked
for again; a folder holding a comparison of other days is refused, never mixed in.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import pandas as pd

from pipelines.settings import REPO_ROOT
from sim.driver.console import say
from sim.driver.in_process import POLICIES
from sim.driver.simulation import STATE_PATHS, RunOptions, UsageError, own_state

STATE = "compare.json"


class PolicyFailedError(Exception):
    """A policy's simulation failed, or left no report to compare."""


@dataclass(frozen=True)
class Comparison:
    """What every policy plays: the same days, first model and retraining budget."""

    start: str
    days: int
    bootstrap_days: int
    trials: int
    max_epochs: int
    members: int
    validation_days: int
    test_days: int
    drift: str | None


@dataclass
class PolicyResult:
    """One policy's report tables and the wall seconds its simulation took."""

    policy: str
    weekly: pd.DataFrame
    retrainings: pd.DataFrame
    labels: pd.DataFrame
    wall_s: float


def _triggers(policy: str) -> str:
    return ", ".join(POLICIES[policy]) or "no retraining"


def comparison_of(start: date, days: int, options: RunOptions) -> Comparison:
    return Comparison(
        start.isoformat(),
        days,
        options.bootstrap_days,
        options.trials,
        options.max_epochs,
        options.members,
        options.validation_days,
        options.test_days,
        str(options.drift) if options.drift else None,
    )


def _state(out: Path, comparison: Comparison) -> dict:
    """The folder's comparison record: created, or checked to be this comparison's."""
    path = out / STATE
    if path.exists():
        state = json.loads(path.read_text())
        if state["comparison"] != asdict(comparison):
            raise UsageError(
                f"{out} holds a comparison of other settings ({state['comparison']}); "
                "remove it or pass another --out"
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        state = {"comparison": asdict(comparison), "wall_s": {}}
        path.write_text(json.dumps(state, indent=1))
    return state


def _arguments(comparison: Comparison, policy: str, report: Path, baselines: bool) -> list[str]:
    args = ["run", "--policy", policy, "--start", comparison.start, "--days", str(comparison.days)]
    args += ["--bootstrap-days", str(comparison.bootstrap_days)]
    args += ["--trials", str(comparison.trials), "--max-epochs", str(comparison.max_epochs)]
    args += ["--members", str(comparison.members)]
    args += ["--validation-days", str(comparison.validation_days)]
    args += ["--test-days", str(comparison.test_days), "--report-dir", str(report), "--brief"]
    if comparison.drift:
        args += ["--drift", comparison.drift]
    return args if baselines else [*args, "--no-baselines"]


def environment(home: Path) -> dict[str, str]:
    """The environment of a policy's simulation: this one, with a state of its own under `home`."""
    inherited = {k: v for k, v in os.environ.items() if k not in STATE_PATHS}
    return {**inherited, **own_state(home)}


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent: int) -> Callable[[], None]:
    """In the child, before it runs the simulation: ask Linux to kill it when its parent dies. A
    compare killed with SIGKILL would otherwise leave its policy's simulation running, and the
    same command run again would start a second one on the same state."""

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before the request was in place
            os._exit(1)

    return arm


def play(comparison: Comparison, policy: str, out: Path, baselines: bool) -> float:
    """Play `policy`'s simulation in its own process and state folder; its day lines are shown
    prefixed by the policy. Returns its wall seconds; raises naming the policy if it fails."""
    home = out / policy
    args = _arguments(comparison, policy, home / "report", baselines)
    command = [sys.executable, "-m", "sim", *args]
    began = time.monotonic()
    with subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=environment(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        preexec_fn=_die_with_parent(os.getpid()) if sys.platform == "linux" else None,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            say(f"{policy}: {line.rstrip()}")
    if process.returncode != 0:
        raise PolicyFailedError(
            f"policy {policy!r}: the simulation exited with {process.returncode} (its lines above; "
            f"its state is in {home}: run the same compare command again to resume it)"
        )
    return time.monotonic() - began


def read_result(out: Path, policy: str, wall_s: float) -> PolicyResult:
    report = out / policy / "report"
    tables = {}
    for name in ("weekly", "retrainings", "labels"):
        path = report / f"{name}.csv"
        if not path.exists():
            raise PolicyFailedError(
                f"policy {policy!r} wrote no {path.name} in {report}: its simulation reported no "
                "production period (more --days, or fewer --bootstrap-days)"
            )
        tables[name] = pd.read_csv(path) if path.stat().st_size > 1 else pd.DataFrame()
    return PolicyResult(policy, tables["weekly"], tables["retrainings"], tables["labels"], wall_s)


def summary(results: list[PolicyResult]) -> pd.DataFrame:
    """A row per policy: mean weekly production AUC and log loss, the gain over the static
    model, labels spent, retrainings by trigger, promotions, and seconds."""
    rows = []
    for r in results:
        runs = r.retrainings
        after = runs[runs.trigger != "bootstrap"] if len(runs) else runs
        by_trigger = after.trigger.value_counts().to_dict() if len(after) else {}
        rows.append(
            {
                "policy": r.policy,
                "mean_auc": r.weekly.flywheel.mean(),
                "vs_static": r.weekly.flywheel.mean() - r.weekly.static.mean(),
                "mean_logloss": r.weekly.flywheel_logloss.mean(),
                "labels": int(r.labels.labelled.sum()) if len(r.labels) else 0,
                "retrainings": len(after),
                "by_trigger": ", ".join(f"{k} {v}" for k, v in sorted(by_trigger.items())) or "-",
                "promoted": int((after.decision == "promoted").sum()) if len(after) else 0,
                "retraining_s": int(runs.seconds.sum()) if len(runs) else 0,
                "wall_s": round(r.wall_s),
            }
        )
    return pd.DataFrame(rows)


def weekly_table(results: list[PolicyResult]) -> pd.DataFrame:
    """Production AUC per week: a column per policy, then the baselines of the first policy
    that trained them (the same-budget reference and the all-labels ceiling)."""
    first = results[0].weekly
    table = first[["week", "examples", "label_mean"]].copy()
    for r in results:
        table = table.merge(
            r.weekly[["week", "flywheel"]].rename(columns={"flywheel": r.policy}),
            on="week",
            how="outer",
        )
    trained = [r.weekly for r in results if r.weekly.get("reference", pd.Series()).notna().any()]
    if trained:
        table = table.merge(trained[0][["week", "reference", "ceiling"]], on="week", how="left")
    return table.sort_values("week").reset_index(drop=True)


def write(
    out: Path, comparison: Comparison, results: list[PolicyResult], table: pd.DataFrame
) -> Path:
    """Write `compare_report.md` (with the `summary` `table`), `weekly_auc.png` and `weekly.csv`
    under `out`/report."""
    from ml.plots import weekly_auc_figure

    report = out / "report"
    report.mkdir(parents=True, exist_ok=True)
    weekly = weekly_table(results)
    lines = [c for c in weekly.columns if c not in ("week", "examples", "label_mean")]
    long = weekly.melt(id_vars="week", value_vars=lines, var_name="model", value_name="auroc")
    plot = report / "weekly_auc.png"
    plot.write_bytes(weekly_auc_figure(long.dropna()))
    weekly.to_csv(report / "weekly.csv", index=False)
    baselines = ""
    if "reference" in weekly:
        baselines = (
            f" Same-budget reference {weekly.reference.mean():.3f}, all-labels ceiling "
            f"{weekly.ceiling.mean():.3f} (HistGradientBoosting retrained each Monday)."
        )
    triggers = "; ".join(f"{r.policy}: {_triggers(r.policy)}" for r in results)
    text = "\n\n".join(
        [
            "# Retraining policies compared",
            f"The same {comparison.days} days from {comparison.start}, each policy from nothing "
            f"in its own state folder under {out}: the first model after "
            f"{comparison.bootstrap_days} days, then only the policy's retraining triggers "
            f"({triggers}). "
            f"Tuning budget {comparison.trials} trials x {comparison.max_epochs} epochs, "
            f"challengers of {comparison.members} networks; planted "
            f"drift: {comparison.drift or 'none'}.",
            "## Summary\n\nMean weekly production AUC and log loss over the production weeks "
            "(every scored flight), the gain over the policy's own static model (its first), "
            "labels that came back, retrainings after the first model and how many the gate "
            "promoted, seconds in retraining runs (the first model's included) and in the "
            "policy's whole simulation (wall, summed over resumed attempts)."
            + baselines
            + "\n\n"
            + table.to_markdown(index=False, floatfmt=".3f"),
            f"## Production AUC by week\n\n![weekly AUC]({plot.name})\n\n"
            + weekly.to_markdown(index=False, floatfmt=".3f"),
            "Each policy's own report: "
            + ", ".join(f"`{r.policy}/report/flywheel_report.md`" for r in results)
            + f"; its runs and assets in the Dagster UI: `make dev FLYWHEEL_HOME={out}/<policy>`.",
        ]
    )
    markdown = report / "compare_report.md"
    markdown.write_text(text + "\n")
    return markdown


def compare(
    days: int, start: date, options: RunOptions, policies: list[str], out: Path
) -> tuple[Path, pd.DataFrame]:
    """Play every policy (each resumed where a killed run stopped), then write the report.
    The baselines are trained once, in the flywheel policy's report (else the first's)."""
    comparison = comparison_of(start, days, options)
    state = _state(out, comparison)
    trains_baselines = "flywheel" if "flywheel" in policies else policies[0]
    results = []
    for i, policy in enumerate(policies):
        say(f"policy {i + 1}/{len(policies)}: {policy} ({_triggers(policy)})")
        seconds = play(comparison, policy, out, policy == trains_baselines)
        state["wall_s"][policy] = state["wall_s"].get(policy, 0.0) + seconds
        (out / STATE).write_text(json.dumps(state, indent=1))
        results.append(read_result(out, policy, state["wall_s"][policy]))
    table = summary(results)
    return write(out, comparison, results, table), table
