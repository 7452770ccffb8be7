"""The sections of the comparison's report that compare policies, each with its table as CSV.

Paired differences against the flywheel and against the best fixed cadence, the regret against
the best fixed cadence chosen cross-fitted, alarms against the calendar and the flywheel's
labels' worth. Each table of differences carries the three readings of sim.judge.statistics and
its Holm-adjusted p-values (a table is one family), and states its minimal detectable effect.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.judge.alarm_lift import alarm_lift
from sim.judge.alarms import WORTH
from sim.judge.cross_fit import cross_fitted_regret
from sim.judge.paired import differences, judge, reading_columns, with_holm
from sim.judge.tables import READINGS, compact, mde_note


def table_text(frame: pd.DataFrame, unit: str = "AUC") -> str:
    """A table for the Markdown report (`compact`), its minimal detectable effect under it."""
    if not len(frame):
        return "(none)"
    text = compact(frame).to_markdown(index=False, floatfmt=".3f")
    note = mde_note(frame, unit)
    return f"{text}\n\n{note}" if note else text


def paired_tables(long: pd.DataFrame, summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The paired differences (of the weekly `long` scores) of every policy against the
    flywheel and against the best fixed cadence in hindsight, those of the two played."""
    tables = {}
    if (long.policy == "flywheel").any():
        tables["flywheel"] = differences(long, "flywheel")
    if "regret" in summary:
        best = summary.loc[summary.regret == 0, "policy"]
        if len(best):
            tables[str(best.iloc[0])] = differences(long, str(best.iloc[0]))
    return tables


def paired_sections(long: pd.DataFrame, summary: pd.DataFrame, report: Path) -> list[str]:
    """The paired differences' sections; `paired.csv` with their rows."""
    paired = paired_tables(long, summary)
    sections = [
        f"## Paired differences against {against}\n\nEach policy minus {against}: mean weekly "
        "AUC and log loss over the weeks and seeds both played. "
        f"{READINGS} `seeds_ahead`: in how many seeds the policy's mean AUC was the higher. "
        "An interval across 0 finds no difference.\n\n" + table_text(frame)
        for against, frame in paired.items()
    ]
    if paired:
        pd.concat(paired.values(), ignore_index=True).to_csv(report / "paired.csv", index=False)
    return sections


def regret_section(long: pd.DataFrame, cadences: list[str], report: Path) -> list[str]:
    """The cross-fitted regret's section (sim.judge.cross_fit); `regret.csv` with its rows.
    None without a cadence or below two seeds."""
    table = cross_fitted_regret(long, cadences) if cadences else pd.DataFrame()
    if table.empty:
        return []
    table.to_csv(report / "regret.csv", index=False)
    return [
        "## Regret against the best fixed cadence, cross-fitted\n\nThe summary's `regret` "
        "chooses the best cadence on the same plays it judges, which flatters it. Here each "
        "seed is judged against the cadence of highest mean weekly AUC on the other seeds "
        "(`best`: which cadence, for how many seeds): `regret`, that cadence's mean weekly AUC "
        f"minus the policy's on the held-out seeds. {READINGS}\n\n" + table_text(table)
    ]


def lift_section(runs: dict[tuple[str, int], pd.DataFrame], report: Path) -> list[str]:
    """Alarms against every-7d (sim.judge.alarm_lift); `alarm_lift.csv` with its rows."""
    lift = alarm_lift(runs, "every-7d", 7)
    if not len(lift):
        return []
    lift.to_csv(report / "alarm_lift.csv", index=False)
    return [
        "## Alarms against the calendar\n\nEach alarm policy's drift and performance "
        f"retrainings judged against every-7d's: `precision`, the share that gained {WORTH} "
        "AUC or more over the champion in the next 14 days; `base_rate`, the share of "
        "every-7d's retrainings that did; `lift`, their ratio; `recall`, of every-7d's "
        "retrainings that gained, the share the policy matched with an alarm in the week "
        "before, in the same seed; `_clear`: the same, a retraining counted as gaining "
        "only when its gain's 95% interval (its standard error by resampling the 14 days) "
        "lies above 0 (sim.judge.alarm_lift). `precision_minus_base`: precision minus the "
        "base rate with its 95% block interval (seeds drawn with replacement, then blocks of "
        "weeks of retrainings), `p`, `p_holm` over the table.\n\n" + table_text(lift, "precision")
    ]


def with_examples(table: pd.DataFrame, weekly: pd.DataFrame | None) -> pd.DataFrame:
    """A labels'-worth table with each week's `examples` from the play's weekly report table
    (where it has them), so that its weeks are weighted like every other difference's."""
    if weekly is None or "examples" not in weekly or "examples" in table:
        return table
    flights = weekly[["week", "examples"]].assign(week=lambda t: pd.to_datetime(t.week))
    return table.assign(week=pd.to_datetime(table.week)).merge(flights, on="week", how="left")


def worth_section(
    worth: dict[int, pd.DataFrame], report: Path, weekly: dict[int, pd.DataFrame]
) -> list[str]:
    """The flywheel's labels' worth (`labels_worth`, weeks weighted by the flights of the
    flywheel plays' `weekly` tables, by seed); `labels_worth.csv` with its rows."""
    said, table = labels_worth({s: with_examples(t, weekly.get(s)) for s, t in worth.items()})
    table.to_csv(report / "labels_worth.csv", index=False)
    return [
        "## What the flywheel's labels are worth\n\nThe same-budget reference fitted on "
        "uniformly random labels at multiples of the flywheel's, leaving out the features "
        "computed from the flywheel's own labels (`model.label_features`), and the ceiling "
        "on the same features (sim.judge.labels_worth). `flywheel_minus`: the flywheel's "
        f"mean weekly AUC minus the reference's, paired by week and seed. {READINGS}"
        f"\n\n{said}\n\n" + table_text(table)
    ]


def worth_scores(tables: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """The long weekly scores of the flywheel, the ceiling and each reference of
    sim.judge.labels_worth's tables (by seed), on the weeks all of them scored."""
    from sim.judge.labels_worth import MULTIPLES, column

    frames = []
    for seed, table in tables.items():
        both = table.dropna(subset=["flywheel", "ceiling", *(column(m) for m in MULTIPLES)])
        examples = both.get("examples", pd.Series(1.0, index=both.index)).fillna(1.0)
        for name in ["flywheel", "ceiling", *(column(m) for m in MULTIPLES)]:
            frames.append(
                pd.DataFrame(
                    {"policy": name, "seed": seed, "week": both.week, "auc": both[name]}
                ).assign(logloss=float("nan"), examples=examples.to_numpy())
            )
    return pd.concat(frames, ignore_index=True)


def labels_worth(tables: dict[int, pd.DataFrame]) -> tuple[str, pd.DataFrame]:
    """The flywheel's labels' worth over its seeds (sim.judge.labels_worth's tables, by seed):
    a row per multiple of its label budget, the reference's mean weekly AUC and the flywheel's
    paired difference from it, read three ways (sim.judge.statistics); the text gives the
    worth in labels and the share of the reference-to-ceiling gap the flywheel closed."""
    from sim.judge.labels_worth import MULTIPLES, column, worth_in_labels

    long = worth_scores(tables)
    mean = long.groupby("policy")["auc"].mean()
    rows = []
    for m in MULTIPLES:
        reading = reading_columns("x", judge(long, "flywheel", column(m), "auc"))
        rows.append(
            {
                "labels": f"{m:g}x the flywheel's",
                "reference_auc": mean[column(m)],
                **{
                    k.removeprefix("x_").replace("diff", "flywheel_minus"): v
                    for k, v in reading.items()
                },
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
    return text, with_holm(pd.DataFrame(rows))
