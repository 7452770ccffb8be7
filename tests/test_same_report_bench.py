"""The before-and-after report comparison (bench/same_report.py) finds what differs, and only
that: a retraining's wall seconds and the last bits of a float are not differences."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.same_report import differences, largest_gap


def report(folder: Path, auc: float, logloss: float, seconds: int, version: int) -> Path:
    folder.mkdir()
    pd.DataFrame({"week": ["2013-11-04"], "flywheel": [auc], "flywheel_logloss": [logloss]}).to_csv(
        folder / "weekly.csv", index=False
    )
    pd.DataFrame({"event_day": ["2013-11-22"], "seconds": [seconds], "version": [version]}).to_csv(
        folder / "retrainings.csv", index=False
    )
    pd.DataFrame({"reason": ["uniform"], "exported": [150], "labelled": [150]}).to_csv(
        folder / "labels.csv", index=False
    )
    return folder


def test_the_same_report_has_no_difference_whatever_its_timings(tmp_path: Path) -> None:
    before = report(tmp_path / "a", 0.691, 0.5882002890953009, 40, 2)
    after = report(tmp_path / "b", 0.691, 0.5882002890459668, 75, 2)
    assert differences(before, after) == []
    assert 0 < largest_gap(before, after) < 1e-9


def test_a_figure_or_a_version_that_moved_is_named(tmp_path: Path) -> None:
    before = report(tmp_path / "a", 0.691, 0.588, 40, 2)
    after = report(tmp_path / "b", 0.690, 0.588, 40, 3)
    assert differences(before, after) == [
        "weekly.csv row 0 flywheel: 0.691 != 0.69",
        "retrainings.csv row 0 version: 2 != 3",
    ]
