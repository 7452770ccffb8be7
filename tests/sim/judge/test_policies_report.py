"""The comparison's report from its plays' tables: per policy over seeds, regret, differences."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.judge.policies import Play, read_play, summary, weekly_table, write

WEEKS = ["2013-09-02", "2013-09-09", "2013-09-16", "2013-09-23"]


def play(policy: str, seed: int, auc: list[float], triggers: list[str]) -> Play:
    weekly = pd.DataFrame(
        {
            "week": WEEKS,
            "examples": 1000,
            "label_mean": 0.2,
            "flywheel": auc,
            "static": [0.6] * len(WEEKS),
            "reference": [0.65] * len(WEEKS) if policy == "flywheel" and seed == 0 else None,
            "ceiling": [0.7] * len(WEEKS) if policy == "flywheel" and seed == 0 else None,
            "flywheel_logloss": [1 - a for a in auc],
        }
    )
    runs = pd.DataFrame(
        {
            "trigger": ["bootstrap", *triggers],
            "decision": ["promoted"]
            + ["promoted", "kept"] * (len(triggers) // 2)
            + ["promoted"] * (len(triggers) % 2),
            "seconds": 10,
        }
    )
    labels = pd.DataFrame({"reason": ["audit"], "exported": [100], "labelled": [90 + seed]})
    # The first model of seed 1 was trained by the first policy that asked (static), then reused.
    reused = seed == 1 and policy != "static"
    trainings = pd.DataFrame(
        {
            "event_day": "2013-09-01",
            "version": range(1, len(runs) + 1),
            "model_cache": ["hit" if reused else "stored"] + ["stored"] * len(triggers),
            "training_s": 8.0,
        }
    )
    return Play(policy, seed, weekly, runs, labels, wall_s=60.0, trainings=trainings)


def plays() -> list[Play]:
    jitter = [0.0, 0.01, -0.01, 0.005]
    found = []
    for seed in (0, 1):
        for policy, level, triggers in (
            ("static", 0.60, []),
            ("every-3d", 0.64, ["cadence"] * (6 + seed)),
            ("every-7d", 0.66, ["cadence"] * 3),
            ("flywheel", 0.67, ["drift", "schedule"]),
        ):
            auc = [level + j + 0.002 * seed for j in jitter]
            found.append(play(policy, seed, auc, triggers))
    return found


def test_a_row_per_policy_over_its_seeds_with_regret() -> None:
    table = summary(plays(), ["every-3d", "every-7d", "every-14d"]).set_index("policy")
    assert list(table.index) == ["static", "every-3d", "every-7d", "flywheel"]
    assert (table.seeds == 2).all()
    assert table.loc["every-7d", "regret"] == 0.0  # the best fixed cadence in hindsight
    assert table.loc["every-3d", "regret"] == pytest.approx(0.02)
    assert table.loc["flywheel", "regret"] == pytest.approx(-0.01)  # ahead of the best cadence
    assert table.loc["static", "mean_auc"] == pytest.approx(0.60 + 0.00125 + 0.001)
    assert table.loc["every-3d", "retrainings"] == 6.5  # a mean over its two plays
    assert table.loc["every-3d", "by_trigger"] == "cadence 6.5"
    assert table.loc["flywheel", "by_trigger"] == "drift 1, schedule 1"
    assert table.loc["static", "labels"] == 90  # 90.5 rounded to even
    assert table.loc["flywheel", "wall_s"] == 120
    # Each model at what its training cost once, a reused one included; half the plays reused.
    assert table.loc["every-3d", "training_s"] == 8.0 * 7.5
    assert table.loc["every-3d", "reused"] == 0.5 and table.loc["static", "reused"] == 0


def test_the_weekly_table_averages_the_seeds_beside_the_baselines() -> None:
    weekly = weekly_table(plays())
    assert list(weekly.columns) == [
        "week",
        "examples",
        "label_mean",
        "static",
        "every-3d",
        "every-7d",
        "flywheel",
        "reference",
        "ceiling",
    ]
    assert weekly.static.iloc[0] == pytest.approx(0.601)


def test_the_report_holds_the_paired_tables(tmp_path) -> None:
    markdown, _ = write(tmp_path, "Planted plays.", plays(), ["every-3d", "every-7d"])
    text = markdown.read_text()
    assert "## Paired differences against flywheel" in text
    assert "## Paired differences against every-7d" in text
    paired = pd.read_csv(tmp_path / "report" / "paired.csv")
    static = paired[(paired.policy == "static") & (paired.against == "flywheel")].iloc[0]
    assert static.auc_diff == pytest.approx(-0.07) and static.auc_high < 0
    assert static.seeds_ahead == 0 and static.weeks == 4 and static.seeds == 2
    for name in ("summary", "weekly", "scores"):
        assert (tmp_path / "report" / f"{name}.csv").exists()
    assert (tmp_path / "report" / "weekly_auc.png").read_bytes()[:4] == b"\x89PNG"


def test_without_a_cadence_there_is_no_regret_and_unknown_seconds_stay_unknown() -> None:
    some = [p for p in plays() if p.policy in ("static", "flywheel")]
    for p in some:
        p.trainings = None  # a play reported before the seconds of its models were
    table = summary(some, ["every-3d"])
    assert "regret" not in table
    assert table.training_s.isna().all() and (table.retrainings.notna()).all()


def test_a_play_without_its_tables_says_what_is_missing(tmp_path) -> None:
    assert "no weekly.csv" in read_play(tmp_path, "static", 0, 1.0)
