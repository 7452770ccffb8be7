"""The features the warehouse computes from labels, computed from any set of labels.

`int_flight_labels_rolled_to_segment_days` and `fct_flight_features` give each flight of day D,
per segment (route, carrier, origin and scheduled hour), the labels known in the
`late_rate_window_days` (28) days before D: a label counts for D when the date of its `known_at`
lies in [D - 28, D - 1]. `<segment>_labelled_count` is how many (0 without any) and
`<segment>_late_rate` the share of them late (missing without any). A learner that reads these
columns learns them from the labels it was given: here from the labels of a reference or a
replay, as the warehouse does from the flywheel's, so that no label known on or after D counts.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

WINDOW_DAYS = 28  # dbt_project.yml's late_rate_window_days
# Segment type -> the columns whose values, joined by "-", name the segment (late_rate_segments).
SEGMENTS: Mapping[str, tuple[str, ...]] = {
    "route": ("route",),
    "carrier": ("carrier",),
    "origin_hour": ("origin", "scheduled_hour"),
}
COLUMNS = tuple(
    f"{segment}_{what}" for segment in SEGMENTS for what in ("late_rate", "labelled_count")
)


def segment_codes(examples: pd.DataFrame) -> np.ndarray:
    """Each row's segment of each type as an integer code (-1: no segment), one column per
    type of `SEGMENTS`."""
    codes = []
    for columns in SEGMENTS.values():
        parts = [examples[c].astype("string") for c in columns]
        value = parts[0].str.cat(parts[1:], sep="-") if len(parts) > 1 else parts[0]
        codes.append(pd.factorize(value)[0])
    return np.column_stack(codes)


def day_numbers(days: pd.Series | np.ndarray) -> np.ndarray:
    """Dates as whole days since the epoch."""
    return pd.to_datetime(pd.Series(days)).to_numpy("datetime64[D]").astype(np.int64)


def window_features(
    codes: np.ndarray,
    rows: np.ndarray,
    day: int,
    labelled: np.ndarray,
    late: np.ndarray,
    known: np.ndarray,
    window: int = WINDOW_DAYS,
) -> np.ndarray:
    """The `COLUMNS` of the rows at positions `rows`, all of day number `day`, from the labels
    of the rows at positions `labelled` (`late`: 0/1 each, `known`: the day number it became
    known): those known in [day - window, day - 1]."""
    counted = (known >= day - window) & (known < day)
    out = np.empty((len(rows), 2 * codes.shape[1]))
    for j in range(codes.shape[1]):
        labelled_codes = codes[labelled[counted], j]
        has = labelled_codes >= 0
        size = codes[:, j].max(initial=-1) + 1
        count = np.bincount(labelled_codes[has], minlength=size)
        late_count = np.bincount(labelled_codes[has], weights=late[counted][has], minlength=size)
        mine = codes[rows, j]
        n = np.where(mine >= 0, count[np.maximum(mine, 0)], 0)
        k = np.where(mine >= 0, late_count[np.maximum(mine, 0)], 0.0)
        out[:, 2 * j] = np.where(n > 0, k / np.maximum(n, 1), np.nan)
        out[:, 2 * j + 1] = n
    return out


def late_rate_features(
    examples: pd.DataFrame,
    labelled: np.ndarray,
    late: np.ndarray,
    known: pd.Series | np.ndarray,
    time_column: str,
    window: int = WINDOW_DAYS,
) -> pd.DataFrame:
    """`examples` with its `COLUMNS` computed from the labels of the rows at positions
    `labelled` (`late`: each one's outcome, `known`: the date it became known), as the warehouse
    computes them from the flywheel's: each row's from the labels known in the `window` days
    before its day (its `time_column`)."""
    labelled = np.asarray(labelled, dtype=np.int64)
    if not len(labelled) == len(late) == len(known):
        raise ValueError(f"{len(labelled)} labelled rows, {len(late)} outcomes, {len(known)} dates")
    codes = segment_codes(examples)
    days = day_numbers(examples[time_column])
    known_days = day_numbers(known) if len(known) else np.zeros(0, dtype=np.int64)
    late = np.asarray(late, dtype=np.float64)
    values = np.empty((len(examples), len(COLUMNS)))
    for day in np.unique(days):
        rows = np.flatnonzero(days == day)
        values[rows] = window_features(codes, rows, day, labelled, late, known_days, window)
    frame = pd.DataFrame(values, columns=list(COLUMNS), index=examples.index)
    counts = [c for c in COLUMNS if c.endswith("_count")]
    return examples.assign(**frame.astype({c: np.int64 for c in counts}))
