"""The training step warns of a feature that tracks time over the partitions the challenger is
fit on, and goes on: a flag, not a refusal; the evaluation's metadata lists it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from ml.evaluation import evaluate_models
from ml.time_tracking import TimeTrend
from pipelines.defs.evaluation.challenger_evaluation import ChallengerEvaluation
from pipelines.defs.evaluation.publishing import evaluation_metadata
from pipelines.defs.training.assets import TrainingDataset, time_tracking, warn_time_tracking
from pipelines.task import load_task

FEATURES = FeatureConfig(
    categorical=(),
    numeric=("temp", "labelled_so_far"),
    label="is_late",
    id_columns=("row_id", "row_date"),
)


def dataset(folder: Path, days: int = 100) -> TrainingDataset:
    """Splits of 20 rows a day: the first third of the days train, the next validate but the
    last week, which tests; a running count of the rows before each day planted beside a noisy
    feature."""
    rng = np.random.default_rng(0)
    day = np.repeat(pd.date_range("2013-01-01", periods=days, freq="D").date, 20)
    frame = pd.DataFrame(
        {
            "row_id": np.arange(day.size),
            "row_date": day,
            "is_late": rng.random(day.size) < 0.2,
            "temp": rng.normal(50, 10, day.size),
            "labelled_so_far": np.repeat(np.arange(days) * 20.0, 20),
        }
    )
    index = np.repeat(np.arange(days), 20)
    cuts = {"train": index < days // 3, "validation": (index >= days // 3) & (index < days - 7)}
    cuts["test"] = index >= days - 7
    folder.mkdir()
    for split, rows in cuts.items():
        frame[rows].to_parquet(folder / f"{split}.parquet")
    return TrainingDataset(folder, "hash")


class Log:
    """Records the warnings it is given."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)


def test_a_running_count_in_the_training_partitions_is_warned_of(tmp_path: Path) -> None:
    flagged = time_tracking(dataset(tmp_path / "dataset"), FEATURES, "row_date")

    assert [t.feature for t in flagged] == ["labelled_so_far"]
    # Train and validation: every day before the test week.
    assert flagged[0].partitions == 93
    log = Log()
    warn_time_tracking(log, flagged)
    [warning] = log.warnings
    assert warning.startswith("labelled_so_far rises with time over 93 partitions")


def test_a_few_partitions_flag_nothing(tmp_path: Path) -> None:
    assert time_tracking(dataset(tmp_path / "dataset", days=30), FEATURES, "row_date") == []
    log = Log()
    warn_time_tracking(log, [])
    assert log.warnings == []


def test_the_evaluation_metadata_lists_the_features_flagged() -> None:
    test = pd.DataFrame({"carrier": ["AA", "UA"] * 50, "is_late": [0, 1] * 50})
    scores = np.linspace(0.1, 0.9, 100)
    evaluation = evaluate_models(
        test, "is_late", {"challenger": scores}, {"carrier": "carrier"}, "challenger", None
    )
    flagged = [TimeTrend("labelled_so_far", 93, 93, 1.0, 1.0)]
    result = ChallengerEvaluation(
        evaluation, test.is_late.to_numpy(), {"challenger": scores}, ("a", "b"), {}, "all", {}
    )

    plain = evaluation_metadata(result, load_task("flights").promotion)
    flagged_metadata = evaluation_metadata(
        replace(result, time_tracking=flagged), load_task("flights").promotion
    )

    assert plain["time_tracking_features"].value == []
    assert flagged_metadata["time_tracking_features"].value == [flagged[0].as_dict()]
