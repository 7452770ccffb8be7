"""Alarms judged by what happened next: only the simulator knows every outcome.

Every retraining trained a challenger at the moment its trigger fired. Scored on every flight of
the days after its event day, beside the champion it would have replaced, it tells whether that
retraining was worth running:
- an alarm (a drift or performance trigger) is right when its challenger beats the champion by
  at least `WORTH` AUC over the next `HORIZON_DAYS` days: alarm precision is the share right;
- a scheduled retraining runs when no alarm fired since the last retraining: one whose challenger
  gains `MISSED` or more is a week an alarm should have fired and did not. Recall is the alarms
  that gained that much over those and the missed weeks together.

The challenger is the one model the flywheel trained then (one tuning draw), not the mean of the
models it could have trained: a judgement per alarm is noisy, the share over a year much less.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np
import pandas as pd

from pipelines.defs.monitoring.triggers import ALARM_TRIGGERS, SCHEDULE_TRIGGER
from sim.judge.examples import Judged

HORIZON_DAYS = 14
MIN_DAYS = 7  # a retraining with fewer production days after it is not judged
WORTH = 0.01
MISSED = 0.02
JUDGEMENT = ["champion", "judged_examples", "champion_auc", "challenger_auc", "gain"]


@dataclass
class AlarmSummary:
    """Alarm precision and recall over the judged retrainings, and the weeks missed."""

    alarms: int  # drift and performance triggers that trained a challenger
    judged: int  # of those, with `MIN_DAYS` production days after them
    right: int  # of those, whose challenger beat the champion by `WORTH`
    hits: int  # of those judged, whose challenger gained `MISSED`
    missed: pd.DataFrame  # scheduled retrainings that gained `MISSED`: no alarm fired
    horizon_days: int = HORIZON_DAYS

    @classmethod
    def none(cls) -> AlarmSummary:
        """No retraining ran: nothing to judge."""
        return cls(0, 0, 0, 0, pd.DataFrame(columns=["event_day", "version", "champion", "gain"]))

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
            f"the champion by {WORTH} AUC or more over the next {self.horizon_days} days. Recall "
            f"{share(self.recall)}: {self.hits} of them gained {MISSED} or more, and "
            f"{len(self.missed)} scheduled retrainings gained that much with no alarm fired."
        )


def champions(runs: pd.DataFrame, examples: pd.DataFrame, judged: Judged) -> pd.Series:
    """The champion each retraining would replace: the version that scored its event day (the
    day's scoring runs before the monitoring that fires). NaN before the first champion."""
    days = pd.to_datetime(examples[judged.spec.time_column]).dt.date
    scored = examples.model_version.groupby(days).agg(lambda v: v.mode().iloc[0])
    days = pd.to_datetime(runs.event_day, errors="coerce").dt.date
    return days.map(scored).astype("Int64")


def judged_window(
    days: pd.Series,
    event_day: object,
    last_day: date,
    horizon_days: int = HORIZON_DAYS,
    min_days: int = MIN_DAYS,
) -> pd.Index | None:
    """The index of the examples (`days`: each one's date) a retraining of `event_day` is judged
    on: those of the `horizon_days` days after it; None for no event day, or fewer than
    `min_days` of those days played by `last_day`."""
    start = pd.to_datetime(event_day, errors="coerce")
    if pd.isna(start):
        return None
    first, end = start.date() + timedelta(days=1), start.date() + timedelta(days=horizon_days)
    if (min(end, last_day) - first).days + 1 < min_days:
        return None
    return days.index[(days >= first) & (days <= end)]


def judge(
    runs: pd.DataFrame,
    examples: pd.DataFrame,
    predict: Callable[[int, pd.DataFrame], np.ndarray],
    judged: Judged,
    last_day: date,
    horizon_days: int = HORIZON_DAYS,
    min_days: int = MIN_DAYS,
) -> pd.DataFrame:
    """`runs` (event_day, trigger, version, champion) with the judgement of each retraining:
    `judged_examples`, `champion_auc`, `challenger_auc` and `gain` over the examples (their
    day, outcome and the model's inputs) of the `horizon_days` days after its event day, up to
    `last_day`; a retraining with fewer than `min_days` of them is not judged.
    `predict(version, frame)` scores a frame with a registered version; each version scores
    each example once."""
    days = pd.to_datetime(examples[judged.spec.time_column]).dt.date
    windows: list[pd.Index | None] = []
    wanted: dict[int, set[int]] = {}
    for row in runs.itertuples():
        versions = pd.to_numeric(pd.Series([row.version, row.champion]), errors="coerce")
        index = judged_window(days, row.event_day, last_day, horizon_days, min_days)
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
    }
    label = judged.spec.label
    for row, index in zip(runs.itertuples(), windows, strict=True):
        y = examples[label].loc[index].to_numpy() if index is not None else np.array([])
        if index is None or not judged.judgeable(y):
            for values in columns.values():
                values.append(np.nan)
            continue
        columns["judged_examples"].append(len(index))
        for name, version in (("champion_auc", row.champion), ("challenger_auc", row.version)):
            probs = scores[int(version)].loc[index].to_numpy()
            columns[name].append(judged.auc(y, probs[:, 0] if probs.shape[1] == 1 else probs))
    for name, values in columns.items():
        verdicts[name] = values
    verdicts["gain"] = verdicts.challenger_auc - verdicts.champion_auc
    return verdicts


def summarize(judged: pd.DataFrame, horizon_days: int = HORIZON_DAYS) -> AlarmSummary:
    """Precision and recall of the alarms among `judged` retrainings (see the module)."""
    trained = pd.to_numeric(judged.version, errors="coerce").notna()
    alarms = judged[judged.trigger.isin(ALARM_TRIGGERS) & trained]
    scored = alarms[alarms.gain.notna()]
    schedule = judged[(judged.trigger == SCHEDULE_TRIGGER) & (judged.gain >= MISSED)]
    return AlarmSummary(
        alarms=len(alarms),
        judged=len(scored),
        right=int((scored.gain >= WORTH).sum()),
        hits=int((scored.gain >= MISSED).sum()),
        missed=schedule[["event_day", "version", "champion", "gain"]].reset_index(drop=True),
        horizon_days=horizon_days,
    )
