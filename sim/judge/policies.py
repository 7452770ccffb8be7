"""The report of a policy comparison: each policy over its seeds, and its paired differences.

Every (policy, seed) play leaves its report tables (`weekly.csv`, `retrainings.csv`,
`labels.csv`); this module reads them as `Play`s and writes `compare_report.md` with a row per
policy (means over its plays), its regret against the best fixed cadence in hindsight and
cross-fitted, the paired differences against the flywheel and against that cadence
(sim.judge.comparisons; sim.judge.statistics says how intervals are read), the weekly AUC plot,
and the tables as CSV.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sim.judge.comparisons import (
    lift_section,
    paired_sections,
    regret_section,
    table_text,
    worth_section,
)
from sim.judge.cross_fit import cross_fitted_regret
from sim.judge.paired import regret, weekly_scores

REPORTED = ("weekly", "retrainings", "labels")


@dataclass
class Play:
    """One (policy, seed) play's report tables and the wall seconds it took."""

    policy: str
    seed: int
    weekly: pd.DataFrame
    retrainings: pd.DataFrame
    labels: pd.DataFrame
    wall_s: float
    # The challengers' training seconds and cache use (sim.judge.history.trainings), if known.
    trainings: pd.DataFrame | None = None
    # The days an asset check failed on (sim.judge.history.failed_checks), if known.
    checks: pd.DataFrame | None = None

    def counts(self) -> dict[str, float]:
        """Labels that came back, retrainings after the first model by trigger, promotions,
        seconds in retraining runs and in training their models, each model counted once at what
        its training cost (the first model's included), and the models reused from the shared
        cache."""
        runs = self.retrainings
        after = runs[runs.trigger != "bootstrap"] if len(runs) else runs
        by_trigger = after.trigger.value_counts().to_dict() if len(after) else {}
        return {
            "labels": int(self.labels.labelled.sum()) if len(self.labels) else 0,
            "retrainings": len(after),
            "promoted": int((after.decision == "promoted").sum()) if len(after) else 0,
            "retraining_s": float(runs.seconds.sum()) if len(runs) else 0.0,
            **self._training(),
            **{f"trigger/{k}": v for k, v in by_trigger.items()},
        }

    def _training(self) -> dict[str, float]:
        if self.trainings is None:
            return {"training_s": float("nan"), "reused": float("nan")}
        return {
            "training_s": float(self.trainings.training_s.sum()),
            "reused": int((self.trainings.model_cache == "hit").sum()),
        }


def scores(plays: list[Play]) -> pd.DataFrame:
    """The long table of weekly production AUC and log loss of every play."""
    return weekly_scores({(p.policy, p.seed): p.weekly for p in plays})


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def summary(plays: list[Play], cadences: list[str]) -> pd.DataFrame:
    """A row per policy: its seeds, mean weekly production AUC and log loss over its plays'
    weeks, the gain over its plays' static model, labels, retrainings by trigger, promotions and
    retraining seconds per play, its regret against the best fixed cadence among `cadences`
    (with its interval; NaN if none was played), the same chosen cross-fitted (`regret_cf`,
    sim.judge.cross_fit, with its block interval and minimal detectable effect; with two seeds
    or more) and the wall seconds of all its plays."""
    long = scores(plays)
    played = [c for c in cadences if (long.policy == c).any()]
    regrets = regret(long, played).set_index("policy") if played else pd.DataFrame()
    fitted = cross_fitted_regret(long, played) if played else pd.DataFrame()
    fitted = fitted.set_index("policy") if len(fitted) else fitted
    rows = []
    for policy in dict.fromkeys(p.policy for p in plays):
        own = [p for p in plays if p.policy == policy]
        weekly = pd.concat([p.weekly for p in own], ignore_index=True)
        counts = pd.DataFrame([p.counts() for p in own])
        # A trigger a play never fired counted 0 times; seconds unknown stay unknown.
        counts = counts.fillna({c: 0 for c in counts if c.startswith("trigger/")}).mean()
        triggers = {k.removeprefix("trigger/"): v for k, v in counts.items() if "/" in k}
        row = {
            "policy": policy,
            "seeds": len(own),
            "mean_auc": weekly.flywheel.mean(),
            "mean_logloss": weekly.flywheel_logloss.mean(),
            "vs_static": weekly.flywheel.mean() - weekly.static.mean(),
            **_calibration(weekly),
            "labels": round(counts["labels"]),
            "retrainings": counts["retrainings"],
            "by_trigger": ", ".join(f"{k} {_number(v)}" for k, v in sorted(triggers.items()))
            or "-",
            "promoted": counts["promoted"],
            "retraining_s": round(counts["retraining_s"]),
            "training_s": counts["training_s"],
            "reused": counts["reused"],
            "wall_s": round(sum(p.wall_s for p in own)),
        }
        if policy in regrets.index:
            mine = regrets.loc[policy]
            row |= {"regret": mine.regret, "regret_low": mine.low, "regret_high": mine.high}
        if policy in fitted.index:
            mine = fitted.loc[policy]
            row |= {
                "regret_cf": mine.regret,
                "regret_cf_block_low": mine.block_low,
                "regret_cf_block_high": mine.block_high,
                "regret_cf_mde": mine.mde,
            }
        rows.append(row)
    return pd.DataFrame(rows)


def _calibration(weekly: pd.DataFrame) -> dict[str, float]:
    """The live scores' mean weekly ECE and the worst week's over the plays' weeks; those of
    the scores corrected for the prior's shift (sim.judge.calibration), with their log loss.
    Empty for reports without them (a task of several classes)."""
    if "flywheel_ece" not in weekly:
        return {}
    return {
        "ece": weekly.flywheel_ece.mean(),
        "worst_ece": weekly.flywheel_ece.max(),
        "corrected_ece": weekly.corrected_ece.mean(),
        "corrected_worst_ece": weekly.corrected_ece.max(),
        "corrected_logloss": weekly.corrected_logloss.mean(),
    }


def weekly_table(plays: list[Play]) -> pd.DataFrame:
    """Production AUC per week: a column per policy (the mean over its seeds), then the
    baselines of the first play that trained them (the same-budget reference and the
    all-labels ceiling)."""
    table = plays[0].weekly[["week", "examples", "label_mean"]].copy()
    long = scores(plays)
    means = long.groupby(["week", "policy"], sort=False)["auc"].mean().unstack("policy")
    policies = list(dict.fromkeys(p.policy for p in plays))
    table = table.merge(means[policies].reset_index(), on="week", how="outer")
    trained = [p.weekly for p in plays if p.weekly.get("reference", pd.Series()).notna().any()]
    if trained:
        table = table.merge(trained[0][["week", "reference", "ceiling"]], on="week", how="left")
    return table.sort_values("week").reset_index(drop=True)


def _table(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False, floatfmt=".3f") if len(frame) else "(none)"


def write(
    out: Path,
    intro: str,
    plays: list[Play],
    cadences: list[str],
    worth: dict[int, pd.DataFrame] | None = None,
    broken: tuple[str, pd.DataFrame] | None = None,
) -> tuple[Path, pd.DataFrame]:
    """Write `compare_report.md`, `weekly_auc.png` and the tables as CSV (`summary.csv`,
    `weekly.csv`, `scores.csv`, `paired.csv`, `regret.csv` (cross-fitted), `alarm_lift.csv`,
    `labels_worth.csv` with the flywheel plays' `worth` tables by seed, `break.csv` with the
    planted break's table of `broken`, its text and table) under `out`/report; the report and
    the summary."""
    from ml.plots import weekly_auc_figure

    report = out / "report"
    report.mkdir(parents=True, exist_ok=True)
    table = summary(plays, cadences)
    weekly = weekly_table(plays)
    lines = [c for c in weekly.columns if c not in ("week", "examples", "label_mean")]
    curves = weekly.melt(id_vars="week", value_vars=lines, var_name="model", value_name="auroc")
    plot = report / "weekly_auc.png"
    plot.write_bytes(weekly_auc_figure(curves.dropna()))
    long = scores(plays)
    sections = [
        "# Retraining policies compared",
        intro,
        "## Summary\n\nPer policy, over its plays (one per seed): mean weekly production AUC "
        "and log loss (every scored flight), the gain over the plays' static model (their "
        "first), then per play on average: labels that came back, retrainings after the first "
        "model by trigger, how many the gate promoted, seconds in retraining runs (the first "
        "model's included; a run that reused a model from the comparison's shared folder of "
        "models counts its own seconds, not the training's), `training_s`: seconds training "
        "the policy's models, each at what its training cost in the play that trained it, "
        "`reused`: models the play took from the shared folder. `regret`: the best fixed "
        "cadence's mean weekly AUC in hindsight minus the policy's, paired by seed and week, "
        "with its 95% interval over the weeks (`regret_week`); chosen on these very plays, it "
        "flatters the best: `regret_cf` is the same with the best chosen cross-fitted (each "
        "seed against the cadence best on the other seeds), with its block interval "
        "(`regret_cf_block`; see the section below). `ece`, `worst_ece`: the live "
        "scores' expected calibration error, mean over weeks and the worst week; `corrected_`: "
        "the same scores with each day's prior moved to the late rate of the audit labels that "
        "came back in the 14 days before (sim.judge.calibration). `wall_s`: the plays' "
        "simulations, summed over resumed attempts."
        + _baselines(weekly)
        + "\n\n"
        + table_text(table),
    ]
    sections += paired_sections(long, table, report)
    sections += regret_section(long, [c for c in cadences if (long.policy == c).any()], report)
    sections += lift_section({(p.policy, p.seed): p.retrainings for p in plays}, report)
    if worth:
        flywheel = {p.seed: p.weekly for p in plays if p.policy == "flywheel"}
        sections += worth_section(worth, report, flywheel)
    if broken:
        said, break_table = broken
        sections.append(f"## The planted break\n\n{said}\n\n" + _table(break_table))
        break_table.to_csv(report / "break.csv", index=False)
    sections.append(
        f"## Production AUC by week\n\nEach policy's mean over its seeds.\n\n"
        f"![weekly AUC]({plot.name})\n\n" + _table(weekly)
    )
    markdown = report / "compare_report.md"
    markdown.write_text("\n\n".join(sections) + "\n")
    table.to_csv(report / "summary.csv", index=False)
    weekly.to_csv(report / "weekly.csv", index=False)
    long.to_csv(report / "scores.csv", index=False)
    return markdown, table


def _baselines(weekly: pd.DataFrame) -> str:
    if "reference" not in weekly:
        return ""
    return (
        f" Same-budget reference {weekly.reference.mean():.3f}, all-labels ceiling "
        f"{weekly.ceiling.mean():.3f} (HistGradientBoosting retrained each Monday, trained in "
        "the seed 0 play of the flywheel, or of the first policy)."
    )


def read_play(folder: Path, policy: str, seed: int, wall_s: float) -> Play | str:
    """The play's report tables in `folder`, or what is missing."""
    tables = {}
    for name in REPORTED:
        path = folder / f"{name}.csv"
        if not path.exists():
            return f"no {path.name} in {folder}"
        tables[name] = pd.read_csv(path) if path.stat().st_size > 1 else pd.DataFrame()
    optional = {
        name: pd.read_csv(folder / f"{name}.csv") if (folder / f"{name}.csv").exists() else None
        for name in ("trainings", "checks")
    }
    return Play(
        policy, seed, tables["weekly"], tables["retrainings"], tables["labels"], wall_s, **optional
    )
