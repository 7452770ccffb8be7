"""Benchmark: does any label-free signal on a retraining's event day say whether it will pay?

    python -m bench.alarm_signals --home DIR [--shuffles 300]

Reads a finished simulation's state (its FLYWHEEL_HOME). Every retraining is judged as the report
judges it (sim.judge.alarms: its challenger's production AUC over the 14 days after its event day,
minus the champion's). Beside it, what the drift sensor saw that day (`monitoring_feature_drift`:
the PSI and KS of each feature, and the PSI of the champion's scores, against the champion's
training data): how many features drifted, the largest and the mean PSI, the largest KS, the
scores' PSI, each feature's PSI, and the champion's age. And the champion's AUC estimated from
its own scores, with no label (confidence-based performance estimation:
`ml.metrics.expected_auroc`), on the monitoring window up to the event day, and its fall from
the champion's first week of scores. For each signal it prints Spearman's rho with the gain, the
signal's AUC at telling the retrainings that gained `sim.judge.alarms.WORTH` or more, and the
precision of an alarm that fires on the signal's top third. With a few dozen retrainings some
signal always looks good by chance, so the best one is set against the best of the same signals
with the gains shuffled (a permutation test over all signals at once).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ml.metrics import auroc

SUMMARIES = [
    "drifted_features",
    "max_psi",
    "mean_psi",
    "max_ks",
    "prediction_psi",
    "age_days",
    "estimated_auc",
    "estimated_auc_fall",
]
MIN_SCORED = 1000  # fewer of the champion's scores in a window: no estimate


def played_state(home: Path) -> tuple[Any, tuple[Any, Any]]:
    """The code location on a finished simulation's state (its FLYWHEEL_HOME) and its production
    period."""
    os.environ.update(FLYWHEEL_HOME=str(home), DAGSTER_HOME=str(home / "dagster"))
    os.environ.pop("FLYWHEEL_WAREHOUSE_PATH", None)
    from pipelines.definitions import defs
    from sim.world.clock import read_progress

    played, production_start = read_progress(home)
    if played is None or production_start is None:
        raise SystemExit(f"{home} holds no played production period")
    return defs, (production_start, played)


def played_report(home: Path) -> tuple[Any, Any]:
    """The code location and the report of a finished simulation's state: its retrainings judged
    by the report's rules, no baselines fitted."""
    defs, production = played_state(home)
    import dagster as dg

    from pipelines.lib.registry import registered_name, versions
    from pipelines.task import load_task
    from sim.judge.report import resource, write_report

    task = load_task().name
    with dg.DagsterInstance.get() as instance, tempfile.TemporaryDirectory() as out:
        static = versions(resource(defs, "tracker"), registered_name(task))[0].version
        report = write_report(
            defs, instance, task, production, static, Path(out), [], baselines=False
        )
    return defs, report


def judged_retrainings(home: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The run's retrainings judged by the report's rules, its daily drift table and its
    production scores (flight date, probability, model version)."""
    defs, report = played_report(home)
    from pipelines.task import load_task
    from sim.judge.report import resource

    spec = load_task().model
    warehouse = resource(defs, "warehouse")
    drift = warehouse.query(
        "select monitored_on, feature, kind, psi, ks, is_drifted from monitoring_feature_drift"
    )
    scores = warehouse.query(
        f"select {spec.time_column} as scored_day, probability, model_version "
        f"from {spec.predictions_table}"
    )
    return report.retrainings, drift, scores


def estimated_auc(scores: pd.DataFrame, version: int, first: str, last: str) -> float:
    """`version`'s label-free AUC estimate on its scores of the days `first`..`last`."""
    from ml.metrics import expected_auroc

    days = scores.scored_day.astype(str)
    window = scores[(scores.model_version == version) & days.between(first, last)]
    return expected_auroc(window.probability) if len(window) >= MIN_SCORED else np.nan


def shifted(day: str, days: int) -> str:
    return str((pd.Timestamp(day) + pd.Timedelta(days=days)).date())


def signals(
    runs: pd.DataFrame, drift: pd.DataFrame, scores: pd.DataFrame, window_days: int = 7
) -> pd.DataFrame:
    """A row per judged retraining: its gain, what the drift sensor saw on its event day and
    the champion's estimated AUC on the `window_days` before it."""
    drift = drift.assign(monitored_on=pd.to_datetime(drift.monitored_on).dt.date.astype(str))
    scores = scores.assign(scored_day=pd.to_datetime(scores.scored_day).dt.date.astype(str))
    first_scored = scores.groupby("model_version").scored_day.min().to_dict()
    judged = runs[runs.gain.notna() & (runs.trigger != "bootstrap")].copy()
    trained_on = runs.set_index("version").event_day.to_dict()
    rows = []
    for run in judged.itertuples():
        day = drift[drift.monitored_on == run.event_day]
        features, prediction = day[day.kind != "prediction"], day[day.kind == "prediction"]
        row = {
            "event_day": run.event_day,
            "trigger": run.trigger,
            "gain": run.gain,
            "drifted_features": int(features.is_drifted.sum()),
            "max_psi": features.psi.max(),
            "mean_psi": features.psi.mean(),
            "max_ks": features.ks.max(),
            "prediction_psi": prediction.psi.iloc[0] if len(prediction) else np.nan,
            "age_days": (
                pd.Timestamp(run.event_day) - pd.Timestamp(trained_on[int(run.champion)])
            ).days
            if pd.notna(run.champion) and int(run.champion) in trained_on
            else np.nan,
        }
        if pd.notna(run.champion) and int(run.champion) in first_scored:
            champion = int(run.champion)
            start = first_scored[champion]
            now = estimated_auc(
                scores, champion, shifted(run.event_day, 1 - window_days), run.event_day
            )
            then = estimated_auc(scores, champion, start, shifted(start, window_days - 1))
            row.update(estimated_auc=now, estimated_auc_fall=then - now)
        row.update({f"psi_{f.feature}": f.psi for f in features.itertuples()})
        rows.append(row)
    return pd.DataFrame(rows)


def separation(x: pd.Series, worth: pd.Series) -> float:
    """The signal's AUC at telling the retrainings that paid (NaN rows left out)."""
    known = x.notna()
    y = worth[known]
    return auroc(y.to_numpy(), x[known].to_numpy()) if 0 < y.sum() < len(y) else np.nan


def signal_table(table: pd.DataFrame, worth: pd.Series) -> pd.DataFrame:
    """Per signal: rho with the gain, AUC, and the precision of firing on its top third."""
    from scipy.stats import spearmanr

    rows = []
    for name in [c for c in table.columns if c not in ("event_day", "trigger", "gain")]:
        x = table[name].astype(float)
        if x.notna().sum() < 10 or x.nunique() < 2:
            continue
        rho, p = spearmanr(x, table.gain, nan_policy="omit")
        fires = x >= x.quantile(2 / 3)
        rows.append(
            {
                "signal": name,
                "rho": rho,
                "p": p,
                "auc": separation(x, worth),
                "fires": int(fires.sum()),
                "precision": worth[fires].mean(),
            }
        )
    return pd.DataFrame(rows)


def best_separation(table: pd.DataFrame, names: list[str], worth: pd.Series) -> float:
    return max(abs(separation(table[n].astype(float), worth) - 0.5) for n in names)


def main() -> None:
    from sim.judge.alarms import WORTH

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="a finished simulation's state")
    parser.add_argument("--shuffles", type=int, default=300, help="permutations of the gains")
    args = parser.parse_args()
    runs, drift, scores = judged_retrainings(args.home.resolve())
    table = signals(runs, drift, scores)
    if len(table) < 10:
        raise SystemExit(f"{len(table)} judged retrainings: too few to compare signals")
    worth = (table.gain >= WORTH).astype(float)
    print(
        f"{len(table)} judged retrainings after the first model "
        f"({table.trigger.value_counts().to_dict()}); {int(worth.sum())} gained {WORTH} AUC or "
        f"more ({worth.mean():.0%}: the precision of an alarm that fires at random)"
    )
    stats = signal_table(table, worth)
    stats["separation"] = (stats.auc - 0.5).abs()
    shown = stats.sort_values("separation", ascending=False)
    shown = pd.concat([shown[shown.signal.isin(SUMMARIES)], shown.head(10)]).drop_duplicates()
    print(shown.drop(columns="separation").to_markdown(index=False, floatfmt=".3f"))
    names = list(stats.signal)
    observed = best_separation(table, names, worth)
    rng = np.random.default_rng(0)
    null = [
        best_separation(table, names, pd.Series(rng.permutation(worth.to_numpy())))
        for _ in range(args.shuffles)
    ]
    print(
        f"best signal |AUC - 0.5| = {observed:.3f} over {len(names)} signals; with the gains "
        f"shuffled {args.shuffles} times the best reaches that or more in "
        f"{np.mean(np.array(null) >= observed):.0%} (family-wise p), 95th percentile "
        f"{np.quantile(null, 0.95):.3f}"
    )


if __name__ == "__main__":
    main()
