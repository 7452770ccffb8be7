"""What the judge reads of a task: where its production examples and their scores are, the
outcome the world held back for each, the period the report groups them by, and the production
metrics of a model's probabilities, binary or of several ordered classes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from ml.labels import class_indices
from ml.metrics import auroc, logloss, multiclass_logloss
from pipelines.task import Task, load_task
from pipelines.task.model_spec import ModelSpec
from sim.judge.per_class import class_report, macro_auc
from sim.world.sources import outcomes_of


@dataclass(frozen=True)
class Judged:
    """A task as the judge sees it."""

    task: Task

    @classmethod
    def of(cls, task_name: str) -> Judged:
        return cls(load_task(task_name))

    @property
    def spec(self) -> ModelSpec:
        return self.task.model

    @property
    def classes(self) -> tuple | None:
        return self.spec.features.classes

    @cached_property
    def scored_columns(self) -> list[str]:
        """The predictions table's columns the report reads beside the score."""
        return self.spec.class_columns

    def outcomes(self, example_ids: pd.Series) -> list:
        """The held-back outcome (the label's value) of each example, with the world's planted
        break."""
        return outcomes_of(self.task.name, example_ids)

    def period(self, days: pd.Series) -> pd.Series:
        """The period the report groups an example's day into: its week (the Monday) for a daily
        task, else its partition (the day it starts on)."""
        dates = pd.to_datetime(days)
        if self.task.cadence == "daily":
            return (dates - pd.to_timedelta(dates.dt.weekday, unit="D")).dt.date
        return dates.dt.date.map(self.task.partition_of).map(pd.Timestamp).dt.date

    @property
    def period_name(self) -> str:
        """What the report's rows are: weeks for a daily task, else its partitions."""
        return {"daily": "week", "weekly": "week", "monthly": "month"}[self.task.cadence]

    def flywheel_probabilities(self, frame: pd.DataFrame) -> np.ndarray:
        """The flywheel's stored probabilities of `frame`'s rows: P(true), or one per class."""
        if self.classes is None:
            return frame["flywheel"].to_numpy(dtype=np.float64)
        return frame[self.scored_columns].to_numpy(dtype=np.float64)

    def judgeable(self, y: np.ndarray) -> bool:
        """Whether outcomes `y` hold two values or more (an AUC needs both sides)."""
        return len(y) > 0 and len(pd.unique(y)) > 1

    def metrics(self, y: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
        """Production AUC (for several classes the macro one-vs-rest AUC of
        sim.judge.per_class) and log loss of `probs` on outcomes `y` (the label's values); the
        AUC is NaN with one outcome only."""
        if self.classes is None:
            labels = np.asarray(y, dtype=np.float64)
            return self.auc(y, probs), logloss(labels, probs)
        return self.auc(y, probs), multiclass_logloss(self.class_indices(y), probs)

    def auc(self, y: np.ndarray, probs: np.ndarray) -> float:
        """The production AUC alone (what the alarms are judged by)."""
        if not self.judgeable(np.asarray(y)):
            return math.nan
        if self.classes is None:
            return auroc(np.asarray(y, dtype=np.float64), probs)
        return macro_auc(self.class_indices(y), probs)

    def class_indices(self, y: np.ndarray) -> np.ndarray:
        """The index in `classes` of each outcome in `y`."""
        return class_indices(pd.Series(y), self.classes, "label")

    def class_report(
        self, examples: pd.DataFrame, static: np.ndarray
    ) -> tuple[str, pd.DataFrame] | None:
        """For several classes, the report's section on them and each period's figures of the
        flywheel and the `static` model on the production `examples` (sim.judge.per_class);
        None for a binary label or no example."""
        if self.classes is None or examples.empty:
            return None
        scores = {"flywheel": self.flywheel_probabilities(examples), "static": static}
        y = self.class_indices(examples[self.spec.label])
        periods = self.period(examples[self.spec.time_column])
        return class_report(y, scores, periods, self.classes, self.period_name)
