"""`flywheel-sim compare --report-only`: judge a finished comparison again, replaying nothing.

A comparison's folder holds its record (`compare.json`: the settings every play shared and the
wall seconds of each finished play) and each play's report tables under
`<policy>/seed-<seed>/report`. Those are all the judge reads (sim.judge.policies), so a change
to how differences are read reaches a comparison that took hours to play in seconds. A finished
play whose report is missing is an error naming it: a report judged without one of its plays
would not be the comparison that was played.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from pipelines.settings import flywheel_home
from sim.driver.compare import (
    STATE,
    Comparison,
    PolicyFailedError,
    _intro,
    compare_command,
    home_of,
    planted_break,
)
from sim.driver.console import say
from sim.driver.policies import CADENCES, POLICIES
from sim.driver.simulation import UsageError
from sim.judge.policies import Play, read_play, write


def finished(out: Path) -> tuple[Comparison, dict[tuple[str, int], float]]:
    """The comparison in `out` and the wall seconds of each of its finished (policy, seed)
    plays; UsageError if `out` holds none."""
    path = out / STATE
    if not path.exists():
        raise UsageError(f"{out} holds no comparison (no {STATE}): play one with --start, --days")
    state = json.loads(path.read_text())
    plays = {}
    for key, seconds in state["wall_s"].items():
        policy, _, seed = key.rpartition("/")
        plays[(policy, int(seed))] = float(seconds)
    if not plays:
        raise UsageError(f"{path} records no finished play: nothing to judge")
    return Comparison(**state["comparison"]), plays


def _worth(out: Path, seeds: list[int]) -> dict[int, pd.DataFrame] | None:
    """The flywheel plays' labels'-worth tables (sim.judge.labels_worth) that are in their
    reports; None, said on the terminal, if any is missing (fitting one replays its days)."""
    from sim.judge.labels_worth import FILE

    paths = {seed: home_of(out, "flywheel", seed) / "report" / FILE for seed in seeds}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        say(f"no labels' worth section: {', '.join(missing)} missing (the full compare fits it)")
        return None
    return {seed: pd.read_csv(path, parse_dates=["week"]) for seed, path in paths.items()}


def rejudge(out: Path) -> tuple[Path, pd.DataFrame]:
    """Write the report of the finished comparison in `out` from its plays' report tables;
    the report and its summary. PolicyFailedError naming every finished play whose report is
    missing."""
    comparison, walls = finished(out)
    policies = [p for p in POLICIES if any(p == q for q, _ in walls)]
    seeds = sorted({seed for _, seed in walls})
    plays: list[Play] = []
    missing = []
    for seed in seeds:
        for policy in [p for p in policies if (p, seed) in walls]:
            found = read_play(
                home_of(out, policy, seed) / "report", policy, seed, walls[(policy, seed)]
            )
            if isinstance(found, str):
                missing.append(f"policy {policy!r}, seed {seed}: {found}")
            else:
                plays.append(found)
    if missing:
        raise PolicyFailedError(
            f"cannot judge {out} again, finished plays lack their report: " + "; ".join(missing)
        )
    say(f"judging {len(plays)} finished plays in {out} again; none is replayed")
    cadences = [p for p in policies if p in CADENCES]
    flywheel = sorted(s for p, s in walls if p == "flywheel")
    worth = _worth(out, flywheel) if flywheel else None
    broken = planted_break(out, comparison, plays) if comparison.drift else None
    intro = _intro(out, comparison, policies, seeds) + " Judged again from the plays' reports."
    return write(out, intro, plays, cadences, worth, broken)


def compare_or_rejudge(args: argparse.Namespace) -> int:
    """`flywheel-sim compare`: with `--report-only`, the finished comparison in `--out` judged
    again; otherwise played (sim.driver.compare)."""
    if not args.report_only:
        return compare_command(args)
    out = (args.out or flywheel_home() / "compare").resolve()
    try:
        markdown, summary = rejudge(out)
    except PolicyFailedError as e:
        say(f"error: {e}", error=True)
        return 1
    say(summary.to_markdown(index=False, floatfmt=".3f"))
    say(f"report: {markdown}")
    return 0
