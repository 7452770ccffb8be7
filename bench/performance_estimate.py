"""Benchmark: how well does the label-free performance estimate follow production, before and after
the scores are moved to the recent prior?

    python -m bench.performance_estimate --home DIR [--home DIR ...]

Reads finished simulations' states (each a FLYWHEEL_HOME; a comparison's plays are
`<out>/<policy>/seed-<seed>`). For every production day: the AUC the served scores really
scored (every flight, outcomes from the simulator), and the AUC they expect with no label
(confidence-based performance estimation, `ml.metrics.expected_auroc`) from the model's own
`probability` and from the `calibrated_probability` scoring serves
(pipelines/monitoring/recalibration.py, the estimate the scoring runs record as `expected_auroc`).
Prints, per estimate over all days of all homes: the mean error against the real AUC, its mean
absolute error, and the correlation of the two over days (does the estimate move when
production does).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd

from ml.metrics import auroc, expected_auroc


def daily(home: Path) -> pd.DataFrame:
    """A row per production day of the state under `home`: its real AUC and both estimates."""
    from bench.alarm_signals import played_state
    from sim.judge.examples import Judged
    from sim.judge.report import production_examples

    defs, (first, last) = played_state(home.resolve())
    judged = Judged.of(_task())
    examples = production_examples(defs, judged, first, last)
    if "calibrated" not in examples:
        raise SystemExit(f"{home}: its predictions have no calibrated_probability to estimate from")
    rows = []
    for day, group in examples.groupby(judged.spec.time_column):
        y = group[judged.spec.label].to_numpy(bool)
        if not 0 < y.sum() < len(y):
            continue
        rows.append(
            {
                "day": day,
                "real": auroc(y, group.flywheel.to_numpy()),
                "raw": expected_auroc(group.flywheel.to_numpy()),
                "calibrated": expected_auroc(group.calibrated.to_numpy()),
            }
        )
    return pd.DataFrame(rows).assign(home=str(home))


def _task() -> str:
    from pipelines.task import load_task

    return load_task().name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, action="append", required=True)
    args = parser.parse_args()
    frames = []
    for home in args.home:
        # Each state is read in a process of its own: the code location reads its settings once.
        code = f"from bench.performance_estimate import _csv; _csv({str(home)!r})"
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        frames.append(pd.read_csv(StringIO(done.stdout)))
    days = pd.concat(frames, ignore_index=True)
    rows = []
    for name in ("raw", "calibrated"):
        error = days[name] - days.real
        rows.append(
            {
                "estimate from": f"the {name} scores",
                "mean error": error.mean(),
                "mean absolute error": error.abs().mean(),
                "correlation with the real AUC over days": np.corrcoef(days[name], days.real)[0, 1],
            }
        )
    print(
        f"{len(days)} production days of {len(args.home)} plays; real AUC {days.real.mean():.3f} "
        f"on average"
    )
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f"))


def _csv(home: str) -> None:
    print(daily(Path(home)).to_csv(index=False), end="")


if __name__ == "__main__":
    main()
