"""Alarms judged by what happened next: only the simulator knows every outcome.

Every retraining trained a challenger at the moment its trigger fired. Scored on every example
of the landing partitions after it (`HORIZONS`: those of the task's cadence), beside the champion
it would have replaced, it tells whether that retraining was worth running:
- an alarm (a drift or performance trigger) is right when its challenger beats the champion by
  at least `WORTH` in the task's production AUC (the macro one-vs-rest AUC for several classes)
  over the next partitions: alarm precision is the share right;
- a scheduled retraining runs when no alarm fired since the last retraining: one whose challenger
  gains `MISSED` or more is a time an alarm should have fired and did not. Recall is the alarms
  that gained that much over those and the missed ones together.

The challenger is the one model the flywheel trained then (one tuning draw), not the mean of the
models it could have trained: a judgement per alarm is noisy, the share over a year much less.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta

import numpy as np
import pandas as pd

from pipelines.task.cadence import Cadence, next_start
from pipelines.task.contracts import TaskSpec
from pipelines.task.thresholds import ALARMS, Trigger
from sim.judge.examples import Judged


@dataclass(frozen=True)
class Horizon:
    """How many landing partitions after a retraining judge it; one with fewer than `minimum`
    of them played is not judged."""

    partitions: int
    minimum: int
    unit: str  # what the partitions are called in the report: "days", "weeks", "months"


# Daily (flights): two weeks, judged once one has been played. Monthly (the ratings): a month
# holds a few hundred ratings (368 at the median from 1999 to 2004), too few for a gain in a
# macro AUC over ten classes, some of them rare, to say much on its own; three months are the
# task's 90-day cooldown, the least an alarm's challenger serves before another alarm may fire;
# judged once two have been played. Weekly: the daily horizon's two weeks.
HORIZONS: dict[Cadence, Horizon] = {
    "daily": Horizon(14, 7, "days"),
    "weekly": Horizon(2, 1, "weeks"),
    "monthly": Horizon(3, 2, "months"),
}
WORTH = 0.01
MISSED = 0.02
# The trigger tag of the simulation's fixed-cadence retrainings (sim.driver.in_process).
CADENCE_TRIGGER = "cadence"
JUDGEMENT = ["champion", "judged_examples", "champion_auc", "challenger_auc", "gain", "gain_se"]
# Resamples of a gain's days for its standard error (`gain_error`).
DRAWS = 200


@dataclass
class AlarmSummary:
    """Alarm precision and recall over the judged retrainings, and the weeks missed."""

    alarms: int  # drift and performance triggers that trained a challenger
    judged: int  # of those, with `horizon.minimum` production partitions after them
    right: int  # of those, whose challenger beat the champion by `WORTH`
    hits: int  # of those judged, whose challenger gained `MISSED`
    missed: pd.DataFrame  # scheduled retrainings that gained `MISSED`: no alarm fired
    horizon: Horizon = field(default_factory=lambda: HORIZONS["daily"])

    @classmethod
    def none(cls, horizon: Horizon | None = None) -> AlarmSummary:
        """No retraining ran: nothing to judge."""
        missed = pd.DataFrame(columns=["event_day", "version", "champion", "gain"])
        return cls(0, 0, 0, 0, missed, horizon or HORIZONS["daily"])

    @property
    def precision(self) -> float:
        return self.right / self.judged if self.judged else float("nan")

    @property
    def recall(self) -> float:
        found = self.hits + len(self.missed)
        return self.hits / found if found else float("nan")

    def describe(self) -> str:
        def share(value: float) -> str:
            return "n/a" if np.isnan(value) else f"{value:.0%}"

        return (
            f"Alarm precision {share(self.precision)}: {self.right} of {self.judged} drift and "
            f"performance triggers judged ({self.alarms} fired) trained a challenger that beat "
            f"the champion by {WORTH} AUC or more over the next {self.horizon.partitions} "
            f"{self.horizon.unit}. Recall "
            f"{share(self.recall)}: {self.hits} of them gained {MISSED} or more, and "
            f"{len(self.missed)} scheduled retrainings gained that much with no alarm fired."
        )


def landed_partition(event_day: date, trigger: str, task: TaskSpec) -> date:
    """The newest landing partition played when a retraining for `event_day` started: the one an
    alarm or the operator names (by its first day); for the schedule, whose event day is the day
    before its tick, the last one that ended by the tick. For a daily task, the event day."""
    if trigger == Trigger.SCHEDULE:
        ticked = date.fromisoformat(task.partition_of(event_day + timedelta(days=1)))
        return date.fromisoformat(task.partition_of(ticked - timedelta(days=1)))
    return date.fromisoformat(task.partition_of(event_day))


def champions(runs: pd.DataFrame, examples: pd.DataFrame, judged: Judged) -> pd.Series:
    """The champion each retraining would replace: the version that scored its newest landed
    partition (see `landed_partition`; the partition's scoring runs before the monitoring that
    fires). NaN before the first champion."""
    task = judged.task
    days = pd.to_datetime(examples[judged.spec.time_column]).dt.date
    starts = {day: date.fromisoformat(task.partition_of(day)) for day in days.unique()}
    scored = examples.model_version.groupby(days.map(starts)).agg(lambda v: v.mode().iloc[0])
    event_days = pd.to_datetime(runs.event_day, errors="coerce").dt.date
    landed = [
        None if pd.isna(day) else landed_partition(day, trigger, task)
        for day, trigger in zip(event_days, runs.trigger, strict=True)
    ]
    return pd.Series(landed, index=runs.index, dtype=object).map(scored).astype("Int64")


def judged_window(
    days: pd.Series,
    event_day: object,
    last_day: date,
    task: TaskSpec,
    horizon: Horizon | None = None,
    trigger: str = "",
) -> pd.Index | None:
    """The index of the examples (`days`: each one's date) a retraining of `event_day` (with
    `trigger`) is judged on: those of the `horizon.partitions` landing partitions after its
    newest landed one (`landed_partition`; default horizon: the task's cadence's); None for no
    event day, or fewer than `horizon.minimum` of those partitions played by `last_day`."""
    start = pd.to_datetime(event_day, errors="coerce")
    if pd.isna(start):
        return None
    horizon = horizon or HORIZONS[task.cadence]
    partition, starts = landed_partition(start.date(), trigger, task), []
    for _ in range(horizon.partitions):
        partition = next_start(partition, task.cadence)
        starts.append(partition)
    if sum(first <= last_day for first in starts) < horizon.minimum:
        return None
    end = next_start(starts[-1], task.cadence)
    return days.index[(days >= starts[0]) & (days < end)]


def judge(
    runs: pd.DataFrame,
    examples: pd.DataFrame,
    predict: Callable[[int, pd.DataFrame], np.ndarray],
    judged: Judged,
    last_day: date,
    horizon: Horizon | None = None,
) -> pd.DataFrame:
    """`runs` (event_day, trigger, version, champion) with the judgement of each retraining:
    `judged_examples`, `champion_auc`, `challenger_auc`, `gain` (in the task's production
    AUC) and its standard error `gain_se` (`gain_error`) over the examples (their day, outcome
    and the model's inputs) of the `horizon`'s partitions after it (see `judged_window`;
    default: the task's cadence's), up to `last_day`.
    `predict(version, frame)` scores a frame with a registered version; each version scores
    each example once."""
    days = pd.to_datetime(examples[judged.spec.time_column]).dt.date
    windows: list[pd.Index | None] = []
    wanted: dict[int, set[int]] = {}
    for row in runs.itertuples():
        versions = pd.to_numeric(pd.Series([row.version, row.champion]), errors="coerce")
        index = judged_window(days, row.event_day, last_day, judged.task, horizon, row.trigger)
        if index is None or versions.isna().any():
            windows.append(None)  # failed, nothing to replace (the first model), or too late
            continue
        windows.append(index)
        for version in versions.astype(int):
            wanted.setdefault(int(version), set()).update(index)
    scores = {}
    for version, rows in wanted.items():
        index = pd.Index(sorted(rows))
        scores[version] = pd.DataFrame(predict(version, examples.loc[index]), index=index)
    verdicts = runs.copy()
    columns: dict[str, list[float]] = {
        "judged_examples": [],
        "champion_auc": [],
        "challenger_auc": [],
        "gain_se": [],
    }
    label = judged.spec.label
    for row, index in zip(runs.itertuples(), windows, strict=True):
        y = examples[label].loc[index].to_numpy() if index is not None else np.array([])
        if index is None or not judged.judgeable(y):
            for values in columns.values():
                values.append(np.nan)
            continue
        columns["judged_examples"].append(len(index))
        both = []
        for name, version in (("champion_auc", row.champion), ("challenger_auc", row.version)):
            probs = scores[int(version)].loc[index].to_numpy()
            both.append(probs[:, 0] if probs.shape[1] == 1 else probs)
            columns[name].append(judged.auc(y, both[-1]))
        columns["gain_se"].append(gain_error(y, *both, days.loc[index].to_numpy(), judged))
    for name, values in columns.items():
        verdicts[name] = values
    verdicts["gain"] = verdicts.challenger_auc - verdicts.champion_auc
    return verdicts[[c for c in verdicts.columns if c != "gain_se"] + ["gain_se"]]


def gain_error(
    y: np.ndarray,
    champion: np.ndarray,
    challenger: np.ndarray,
    blocks: np.ndarray,
    judged: Judged,
    draws: int = DRAWS,
) -> float:
    """The standard error of the challenger's AUC minus the champion's on the same examples,
    by resampling whole `blocks` (each example's) with replacement: the judgement passes each
    example's day, since a day's examples share its weather and its delays, and resampling
    examples alone would understate the error. The error of judging one challenger on these
    days, not that of the training draw that made it."""
    rng = np.random.default_rng(0)
    _, codes = np.unique(blocks, return_inverse=True)
    order = np.argsort(codes, kind="stable")
    groups = np.split(order, np.cumsum(np.bincount(codes))[:-1])
    gains = []
    for _ in range(draws):
        pick = np.concatenate([groups[i] for i in rng.integers(0, len(groups), len(groups))])
        if judged.judgeable(y[pick]):
            gains.append(
                judged.auc(y[pick], challenger[pick]) - judged.auc(y[pick], champion[pick])
            )
    return float(np.std(gains, ddof=1)) if len(gains) > 1 else float("nan")


def summarize(judged: pd.DataFrame, horizon: Horizon | None = None) -> AlarmSummary:
    """Precision and recall of the alarms among `judged` retrainings (see the module)."""
    trained = pd.to_numeric(judged.version, errors="coerce").notna()
    alarms = judged[judged.trigger.isin(ALARMS) & trained]
    scored = alarms[alarms.gain.notna()]
    schedule = judged[(judged.trigger == Trigger.SCHEDULE) & (judged.gain >= MISSED)]
    return AlarmSummary(
        alarms=len(alarms),
        judged=len(scored),
        right=int((scored.gain >= WORTH).sum()),
        hits=int((scored.gain >= MISSED).sum()),
        missed=schedule[["event_day", "version", "champion", "gain"]].reset_index(drop=True),
        horizon=horizon or HORIZONS["daily"],
    )
