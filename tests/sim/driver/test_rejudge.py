"""`flywheel-sim compare --report-only`: a finished comparison judged again from its folder,
here one built from planted report files (playing a real one takes minutes)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.driver.cli import main
from sim.driver.compare import STATE, Comparison, home_of

WEEKS = pd.date_range("2013-09-02", periods=8, freq="7D").date.astype(str)
LEVELS = {"static": 0.60, "every-7d": 0.65, "every-14d": 0.645, "flywheel": 0.66}
SEEDS = (0, 1, 2)


def planted_folder(out: Path) -> None:
    """A comparison's record and each play's report tables, as `compare` leaves them."""
    comparison = Comparison("2013-09-01", 60, 7, 1, 2, 1, 2, 2, None)
    walls = {f"{policy}/{seed}": 60.0 for seed in SEEDS for policy in LEVELS}
    out.mkdir(parents=True)
    (out / STATE).write_text(json.dumps({"comparison": asdict(comparison), "wall_s": walls}))
    rng = np.random.default_rng(0)
    for seed in SEEDS:
        for policy, level in LEVELS.items():
            report = home_of(out, policy, seed) / "report"
            report.mkdir(parents=True)
            auc = level + rng.normal(0, 0.01, len(WEEKS))
            pd.DataFrame(
                {
                    "week": WEEKS,
                    "examples": 1000 + 100 * np.arange(len(WEEKS)),
                    "label_mean": 0.2,
                    "flywheel": auc,
                    "static": 0.60,
                    "flywheel_logloss": 1 - auc,
                }
            ).to_csv(report / "weekly.csv", index=False)
            pd.DataFrame(
                {"event_day": ["2013-09-01"], "trigger": ["bootstrap"], "decision": ["promoted"]}
            ).assign(seconds=10.0).to_csv(report / "retrainings.csv", index=False)
            pd.DataFrame({"reason": ["audit"], "exported": [100], "labelled": [90]}).to_csv(
                report / "labels.csv", index=False
            )


def test_report_only_judges_a_finished_comparison_again_without_playing(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))
    out = tmp_path / "compare"
    planted_folder(out)
    assert main(["compare", "--report-only", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "judging 12 finished plays" in printed.out and "none is replayed" in printed.out
    # The flywheel plays' labels' worth needs a fit of their days: said, not silently left out.
    assert "no labels' worth section" in printed.out
    report = out / "report"
    summary = pd.read_csv(report / "summary.csv").set_index("policy")
    assert list(summary.index) == ["static", "every-7d", "every-14d", "flywheel"]
    assert {"regret", "regret_cf", "regret_cf_block_low", "regret_cf_block_high"} <= set(summary)
    paired = pd.read_csv(report / "paired.csv")
    for column in ("auc_block_low", "auc_seed_high", "auc_p_holm", "logloss_p_holm", "auc_mde"):
        assert paired[column].notna().all(), column
    static = paired[(paired.policy == "static") & (paired.against == "flywheel")].iloc[0]
    assert static.auc_block_high < 0 and static.auc_p_holm < 0.05
    regret = pd.read_csv(report / "regret.csv").set_index("policy")
    # Every held-out seed chose every-7d: its regret is against itself, 0, no interval, and its
    # p-value does not count in the table's Holm family; the others' are read.
    assert set(regret.best) == {"every-7d 3/3"} and regret.loc["every-7d", "regret"] == 0
    assert regret.loc["every-7d", ["block_low", "block_high", "p", "p_holm"]].isna().all()
    others = regret.drop(index="every-7d")
    assert (others.block_low < others.regret).all() and (others.regret < others.block_high).all()
    text = (report / "compare_report.md").read_text()
    assert "Judged again from the plays' reports." in text
    assert "## Regret against the best fixed cadence, cross-fitted" in text
    assert text.count("Minimal detectable effect") >= 4  # summary, two paired tables, regret
    # Nothing was played: no play's state beyond its report.
    assert sorted(p.name for p in home_of(out, "static", 0).iterdir()) == ["report"]


def test_report_only_names_a_finished_play_whose_report_is_missing(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))
    out = tmp_path / "compare"
    planted_folder(out)
    (home_of(out, "every-7d", 1) / "report" / "weekly.csv").unlink()
    assert main(["compare", "--report-only", "--out", str(out)]) == 1
    said = capsys.readouterr().err
    assert "policy 'every-7d', seed 1: no weekly.csv in" in said
    assert not (out / "report").exists()


def test_report_only_needs_a_comparison_and_playing_needs_its_days(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as refused:
        main(["compare", "--report-only", "--out", str(tmp_path / "nothing")])
    assert refused.value.code == 2
    assert f"holds no comparison (no {STATE})" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main(["compare", "--out", str(tmp_path / "nothing")])
    assert refused.value.code == 2
    assert "compare plays --start and --days" in capsys.readouterr().err
