"""How far the served prior-shift correction is from its floor, and what else could be served.

Each production day the loop serves the champion's scores moved by one log-odds shift, fitted to
the uniformly drawn labels that came back in the 14 days before the day (pipelines/
recalibration.py). The late rate swings from week to week faster than that window follows. This
module corrects every production day's scores, from the labels known before the day only, by:

- `oracle`: the one shift after which the day's scores average the day's true outcomes, the
  floor of a correction by one shift a day (not servable: it reads the day's outcomes);
- `window_shift`: the served correction, recomputed as scoring does (and, when a play stored
  it, `served`);
- `platt`: a slope and an intercept on the log-odds, fitted to the window's labels;
- `recent_shift`: the window's shift with each label weighed by its flight's recency (a weight
  halving per `half_life_days`);
- `offset_model`: a day's shift predicted from the day before its labels (its weekday, its
  weather, the champion's mean log-odds on it), a ridge regression on the shifts of the past
  days whose labels came back (ml.calibration.OffsetModel);
- `offset_glm`: the same prediction fitted to those days' labels themselves, a penalised
  logistic regression with the champion's log-odds as offset (no day's noisy shift between).

The figures (`floor_table`): each method's mean weekly ECE over all flights and over the uniform
labels, its log loss, the share of the gap from the window shift to the oracle it closes, and
its mean weekly difference to the window shift with that mean's standard error over weeks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np
import pandas as pd

from ml.calibration import OffsetModel, logit, platt, prior_shift, rescale, shift
from ml.metrics import logloss
from sim.judge.calibration import weekly_calibration

DAY, DELIVERED, OUTCOME, VERSION = "day", "delivered", "outcome", "model_version"
# Day-level weather of the features table (means over the day's flights), known when scheduled.
WEATHER = ("precip", "visib", "wind_speed", "humid")
BASELINE = "window_shift"
OFFSET_MODELS = ("offset_model", "offset_glm")


@dataclass(frozen=True)
class FloorSettings:
    """The served correction's settings (monitoring.recalibration_*) and the alternatives'."""

    window_days: int = 14
    min_labels: int = 100
    half_life_days: float = 3.0  # recent_shift: a label's weight halves per this many days
    history_days: int = 28  # offset_model: the past days it is fitted on...
    min_day_labels: int = 10  # ...those with at least this many labels known
    min_history_days: int = 7  # fewer such days: the window shift
    alpha: float = 4.0  # the offset models' penalty on their slopes, in days of labels


def day_features(flights: pd.DataFrame) -> pd.DataFrame:
    """A row per day of `flights` (all of each day's, with the weather columns): its weekday,
    whether it is a weekend day, and its mean weather."""
    days = pd.to_datetime(flights[DAY])
    parts = {
        DAY: flights[DAY].to_numpy(),
        "weekday_sin": np.sin(2 * np.pi * days.dt.day_of_week / 7).to_numpy(),
        "weekday_cos": np.cos(2 * np.pi * days.dt.day_of_week / 7).to_numpy(),
        "weekend": (days.dt.day_of_week >= 5).astype(np.float64).to_numpy(),
        **{w: flights[w].astype(np.float64).fillna(0.0).to_numpy() for w in WEATHER},
    }
    return pd.DataFrame(parts).groupby(DAY).mean()


def history(
    day: date,
    scores: np.ndarray,
    labelled: pd.DataFrame,
    past: pd.DataFrame,
    settings: FloorSettings,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The past days the offset models learn from for `day`: for each of the `history_days`
    before it with `min_day_labels` of the `labelled` rows delivered before `day`, those rows'
    positions and the day's features (`past`'s row, then the mean log-odds of `scores` over
    the rows)."""
    first = day - timedelta(days=settings.history_days)
    known = (labelled[DELIVERED] < day).to_numpy() & (labelled[DAY] >= first).to_numpy()
    days = []
    for past_day, at in labelled[known].groupby(DAY).indices.items():
        if len(at) < settings.min_day_labels or past_day not in past.index:
            continue
        index = np.flatnonzero(known)[at]
        mean_logit = float(logit(scores[index]).mean())
        days.append((index, np.append(past.loc[past_day].to_numpy(dtype=np.float64), mean_logit)))
    return days


def offset_shift(
    day: date,
    scores: np.ndarray,
    labelled: pd.DataFrame,
    today: np.ndarray,
    past: pd.DataFrame,
    settings: FloorSettings,
) -> tuple[float | None, float | None]:
    """The offset models' shifts for `day` (None with fewer than `min_history_days` days of
    `history`), its features `today` (`past`'s row, then the day's mean log-odds): the ridge
    regression of the past days' shifts (of the champion's `scores` of their `labelled` rows),
    and the penalised logistic regression on those labels themselves."""
    days = history(day, scores, labelled, past, settings)
    if len(days) < settings.min_history_days:
        return None, None
    outcomes = labelled[OUTCOME].to_numpy(dtype=np.float64)
    rows = np.array([features for _, features in days])
    shifts = [prior_shift(scores[index], outcomes[index]) for index, _ in days]
    weights = np.array([len(index) for index, _ in days], dtype=np.float64)
    model = OffsetModel.fit(rows, np.array(shifts), weights, settings.alpha)
    index = np.concatenate([index for index, _ in days])
    per_label = np.repeat(rows, weights.astype(np.int64), axis=0)
    # The same penalty in days: a mean day's information on the shift, its labels' p(1 - p).
    information = weights.mean() * float(np.mean(scores[index] * (1 - scores[index])))
    glm = OffsetModel.fit_to_labels(
        per_label, logit(scores[index]), outcomes[index], settings.alpha * information
    )
    return float(model.predict(today)[0]), float(glm.predict(today)[0])


def corrections(
    production: pd.DataFrame,
    labelled: pd.DataFrame,
    score: Callable[[int], np.ndarray],
    past: pd.DataFrame,
    settings: FloorSettings = FloorSettings(),
) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    """Each method's probabilities of the `production` rows (day, probability, model_version,
    outcome) and a row per day and champion of the shifts, from the `labelled` uniform examples
    (day, delivered, outcome) that `score(version)` scores, and the days' `day_features`."""
    probs = production["probability"].to_numpy(dtype=np.float64)
    methods = ("oracle", BASELINE, "platt", "recent_shift", *OFFSET_MODELS)
    out = {name: probs.copy() for name in methods}
    delivered, flown = labelled[DELIVERED].to_numpy(), labelled[DAY].to_numpy()
    outcomes = labelled[OUTCOME].to_numpy(dtype=np.float64)
    days = []
    for (day, version), at in production.groupby([DAY, VERSION]).indices.items():
        window = (delivered < day) & (delivered >= day - timedelta(days=settings.window_days))
        y = production[OUTCOME].to_numpy(dtype=np.float64)[at]
        row = {DAY: day, VERSION: version, "labels": int(window.sum())}
        row["oracle"] = prior_shift(probs[at], y)
        out["oracle"][at] = shift(probs[at], row["oracle"])
        if window.sum() >= settings.min_labels:
            scores = score(version)
            s, o = scores[window], outcomes[window]
            row[BASELINE] = prior_shift(s, o)
            age = np.array([(day - d).days for d in flown[window]], dtype=np.float64)
            row["recent_shift"] = prior_shift(s, o, weights=0.5 ** (age / settings.half_life_days))
            row["platt_slope"], row["platt"] = platt(s, o)
            today = np.append(past.loc[day].to_numpy(dtype=np.float64), logit(probs[at]).mean())
            predicted = offset_shift(day, scores, labelled, today, past, settings)
            for name, shifted in zip(OFFSET_MODELS, predicted, strict=True):
                row[name] = row[BASELINE] if shifted is None else shifted
            for name in (BASELINE, "recent_shift", *OFFSET_MODELS):
                out[name][at] = shift(probs[at], row[name])
            out["platt"][at] = rescale(probs[at], row["platt_slope"], row["platt"])
        days.append(row)
    return out, pd.DataFrame(days)


def floor_table(
    y: np.ndarray, week: pd.Series, columns: dict[str, np.ndarray], uniform: np.ndarray
) -> pd.DataFrame:
    """A row per method of `columns` (probabilities of the rows whose outcomes are `y`): its
    mean weekly ECE over all rows and over the `uniform` ones (the uniformly drawn labels: what
    production itself can measure, noisier), its log loss, the share of the
    gap from the window shift to the oracle it closes, and its mean weekly ECE difference to the
    window shift with that mean's standard error over weeks."""
    weekly = weekly_calibration(y, week, columns)
    at = {name: probs[uniform] for name, probs in columns.items()}
    labelled = weekly_calibration(y[uniform], week[uniform].reset_index(drop=True), at)
    base, floor = weekly[f"{BASELINE}_ece"], weekly["oracle_ece"].mean()
    rows = []
    for name, probs in columns.items():
        ece = weekly[f"{name}_ece"]
        difference = ece - base
        rows.append(
            {
                "method": name,
                "weekly_ece": ece.mean(),
                "uniform_weekly_ece": labelled[f"{name}_ece"].mean(),
                "logloss": logloss(y, probs),
                "gap_closed": (base.mean() - ece.mean()) / (base.mean() - floor),
                "minus_window": difference.mean(),
                "minus_window_se": difference.std(ddof=1) / np.sqrt(len(difference)),
            }
        )
    return pd.DataFrame(rows)
