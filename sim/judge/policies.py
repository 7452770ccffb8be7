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

from sim.judge.alarm_lift import alarm_lift
from sim.judge.alarms import WORTH
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
    out: Path,
    intro: str,
    plays: list[Play],
    cadences: list[str],
    worth: dict[int, pd.DataFrame] | None = None,
    broken: tuple[str, pd.DataFrame] | None = None,
) -> tuple[Path, pd.DataFrame]:
    """Write `compare_report.md`, `weekly_auc.png` and the tables as CSV (`summary.csv`,
    `weekly.csv`, `scores.csv`, `paired.csv`, `labels_worth.csv` with the flywheel plays'
    `worth` tables by seed, `break.csv` with the planted break's table of `broken`, its text
    and table) under `out`/report; the report and the summary."""
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
        "with its 95% interval (`regret_low`, `regret_high`). `ece`, `worst_ece`: the live "
        "scores' expected calibration error, mean over weeks and the worst week; `corrected_`: "
        "the same scores with each day's prior moved to the late rate of the audit labels that "
        "came back in the 14 days before (sim.judge.calibration). `wall_s`: the plays' "
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
    lift = alarm_lift({(p.policy, p.seed): p.retrainings for p in plays}, "every-7d", 7)
    if len(lift):
        sections.append(
            "## Alarms against the calendar\n\nEach alarm policy's drift and performance "
            f"retrainings judged against every-7d's: `precision`, the share that gained {WORTH} "
            "AUC or more over the champion in the next 14 days; `base_rate`, the share of "
            "every-7d's retrainings that did; `lift`, their ratio; `recall`, of every-7d's "
            "retrainings that gained, the share the policy matched with an alarm in the week "
            "before, in the same seed; `_clear`: the same, a retraining counted as gaining "
            "only when its gain's 95% interval (its standard error by resampling the 14 days) "
            "lies above 0 (sim.judge.alarm_lift).\n\n" + _table(lift)
        )
        lift.to_csv(report / "alarm_lift.csv", index=False)
    if worth:
        said, worth_table = labels_worth(worth)
        sections.append(
            "## What the flywheel's labels are worth\n\nThe same-budget reference fitted on "
            "uniformly random labels at multiples of the flywheel's, leaving out the features "
            "computed from the flywheel's own labels (`model.label_features`), and the ceiling "
            "on the same features (sim.judge.labels_worth). `flywheel_minus`: the flywheel's "
            "mean weekly AUC minus the reference's, paired by week and seed, with its 95% "
            f"interval.\n\n{said}\n\n" + _table(worth_table)
        )
        worth_table.to_csv(report / "labels_worth.csv", index=False)
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
    optional = {
        name: pd.read_csv(folder / f"{name}.csv") if (folder / f"{name}.csv").exists() else None
        for name in ("trainings", "checks")
    }
    return Play(
        policy, seed, tables["weekly"], tables["retrainings"], tables["labels"], wall_s, **optional
    )


def labels_worth(tables: dict[int, pd.DataFrame]) -> tuple[str, pd.DataFrame]:
    """The flywheel's labels' worth over its seeds (sim.judge.labels_worth's tables, by seed):
    a row per multiple of its label budget, the reference's mean weekly AUC and the flywheel's
    paired difference from it (a week's difference averaged over the seeds, Student's t over
    the weeks); the text gives the worth in labels and the share of the reference-to-ceiling
    gap the flywheel closed."""
    from sim.judge.labels_worth import MULTIPLES, column, worth_in_labels
    from sim.judge.paired import paired_difference

    frames = []
    for seed, table in tables.items():
        both = table.dropna()
        for name in ["flywheel", "ceiling", *(column(m) for m in MULTIPLES)]:
            frames.append(
                pd.DataFrame(
                    {"policy": name, "seed": seed, "week": both.week, "auc": both[name]}
                ).assign(logloss=float("nan"))
            )
    long = pd.concat(frames, ignore_index=True)
    mean = long.groupby("policy")["auc"].mean()
    rows = []
    for m in MULTIPLES:
        diff = paired_difference(long, "flywheel", column(m), "auc").interval
        rows.append(
            {
                "labels": f"{m:g}x the flywheel's",
                "reference_auc": mean[column(m)],
                "flywheel_minus": diff.estimate,
                "low": diff.low,
                "high": diff.high,
            }
        )
    worth = worth_in_labels(mean["flywheel"], {m: mean[column(m)] for m in MULTIPLES})
    gap = mean["ceiling"] - mean[column(1.0)]
    closed = (mean["flywheel"] - mean[column(1.0)]) / gap if gap > 0 else float("nan")
    text = (
        f"Over {len(tables)} seeds: flywheel {mean['flywheel']:.4f}, all-labels ceiling "
        f"{mean['ceiling']:.4f}; the flywheel is worth {worth:.2f} times its labels (a "
        f"uniformly random sample of that many does as well), and closes {closed:.0%} of the "
        "gap from the same-budget reference to the ceiling."
    )
    return text, pd.DataFrame(rows)
