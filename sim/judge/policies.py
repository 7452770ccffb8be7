"""The report of a policy comparison: each policy over its seeds, and its paired differences.

Every (policy, seed) play leaves its report tables (`weekly.csv`, `retrainings.csv`,
`labels.csv`); this module reads them as `Play`s and writes `compare_report.md` with a row per
policy (means over its plays), its regret against the best fixed cadence in hindsight and the
paired differences against the flywheel and against that cadence (sim.judge.paired says how the
intervals are made), the weekly AUC plot, and the tables as CSV.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sim.judge.paired import differences, regret, weekly_scores

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
    (with its interval; NaN if none was played) and the wall seconds of all its plays."""
    long = scores(plays)
    played = [c for c in cadences if (long.policy == c).any()]
    regrets = regret(long, played).set_index("policy") if played else pd.DataFrame()
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
        rows.append(row)
    return pd.DataFrame(rows)


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


def paired_tables(plays: list[Play], summary_table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The paired differences of every policy against the flywheel and against the best fixed
    cadence in hindsight, those of the two that were played."""
    long = scores(plays)
    tables = {}
    if (long.policy == "flywheel").any():
        tables["flywheel"] = differences(long, "flywheel")
    if "regret" in summary_table:
        best = summary_table.loc[summary_table.regret == 0, "policy"]
        if len(best):
            tables[str(best.iloc[0])] = differences(long, str(best.iloc[0]))
    return tables


def _table(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False, floatfmt=".3f") if len(frame) else "(none)"


def write(
    out: Path, intro: str, plays: list[Play], cadences: list[str]
) -> tuple[Path, pd.DataFrame]:
    """Write `compare_report.md`, `weekly_auc.png` and the tables as CSV (`summary.csv`,
    `weekly.csv`, `scores.csv`, `paired.csv`) under `out`/report; the report and the summary."""
    from ml.plots import weekly_auc_figure

    report = out / "report"
    report.mkdir(parents=True, exist_ok=True)
    table = summary(plays, cadences)
    weekly = weekly_table(plays)
    lines = [c for c in weekly.columns if c not in ("week", "examples", "label_mean")]
    long = weekly.melt(id_vars="week", value_vars=lines, var_name="model", value_name="auroc")
    plot = report / "weekly_auc.png"
    plot.write_bytes(weekly_auc_figure(long.dropna()))
    paired = paired_tables(plays, table)
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
        "with its 95% interval (`regret_low`, `regret_high`). `wall_s`: the plays' "
        "simulations, summed over resumed attempts." + _baselines(weekly) + "\n\n" + _table(table),
    ]
    for against, frame in paired.items():
        sections.append(
            f"## Paired differences against {against}\n\nEach policy minus {against}: mean "
            "weekly AUC and log loss over the weeks and seeds both played, a week's difference "
            "averaged over the seeds, Student's t 95% interval over the weeks; `seeds_ahead`: "
            "in how many seeds the policy's mean AUC was the higher. An interval across 0 "
            "finds no difference.\n\n" + _table(frame)
        )
    sections.append(
        f"## Production AUC by week\n\nEach policy's mean over its seeds.\n\n"
        f"![weekly AUC]({plot.name})\n\n" + _table(weekly)
    )
    markdown = report / "compare_report.md"
    markdown.write_text("\n\n".join(sections) + "\n")
    table.to_csv(report / "summary.csv", index=False)
    weekly.to_csv(report / "weekly.csv", index=False)
    scores(plays).to_csv(report / "scores.csv", index=False)
    if paired:
        pd.concat(paired.values(), ignore_index=True).to_csv(report / "paired.csv", index=False)
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
    trainings = folder / "trainings.csv"
    return Play(
        policy,
        seed,
        tables["weekly"],
        tables["retrainings"],
        tables["labels"],
        wall_s,
        pd.read_csv(trainings) if trainings.exists() else None,
    )
