"""A synthetic table with a learnable signal, nulls and optional unseen categories.

Used by tests and benchmarks; ``FEATURES`` describes the columns of ``make_table``,
``RATED_FEATURES`` those of ``make_rated_table``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ml.config import FeatureConfig

CATEGORICAL: tuple[str, ...] = (
    "carrier",
    "origin",
    "dest",
    "route",
    "plane_manufacturer",
    "plane_type",
    "plane_engine",
)
# The order of the columns' draws: changing it changes every table.
NUMERIC: tuple[str, ...] = (
    "scheduled_hour",
    "scheduled_weekday",
    "scheduled_month",
    "distance",
    "temp",
    "dewp",
    "humid",
    "wind_dir",
    "wind_speed",
    "wind_gust",
    "precip",
    "pressure",
    "visib",
    "plane_age_years",
    "plane_seats",
    "plane_engines",
    "route_late_rate",
    "route_labelled_count",
    "carrier_late_rate",
    "carrier_labelled_count",
    "origin_hour_late_rate",
    "origin_hour_labelled_count",
)
FEATURES = FeatureConfig(
    categorical=CATEGORICAL, numeric=NUMERIC, label="is_late", id_columns=("row_id", "row_date")
)

CARRIERS = np.array(["AA", "B6", "DL", "EV", "MQ", "UA", "US", "WN"])
CARRIER_EFFECT = np.array([-0.4, 0.3, -0.6, 0.8, 0.5, 0.0, -0.2, 0.2])
ORIGINS = np.array(["EWR", "JFK", "LGA"])
DESTS = np.array([f"D{i:02d}" for i in range(25)])
MAKERS = np.array(["BOEING", "AIRBUS", "EMBRAER", "BOMBARDIER"])


def make_table(n: int, seed: int, unseen: bool = False) -> pd.DataFrame:
    """Return ``n`` rows with a known signal in ``is_late``; ``unseen`` adds new categories."""
    rng = np.random.default_rng(seed)
    carrier_idx = rng.integers(0, len(CARRIERS), n)
    origin = ORIGINS[rng.integers(0, len(ORIGINS), n)]
    dest = DESTS[rng.integers(0, len(DESTS), n)]
    num = {col: rng.normal(size=n) for col in NUMERIC}
    num["scheduled_hour"] = rng.integers(5, 24, n).astype(float)
    num["scheduled_weekday"] = rng.integers(0, 7, n).astype(float)
    num["scheduled_month"] = rng.integers(1, 13, n).astype(float)
    num["distance"] = rng.uniform(100, 2500, n)
    num["precip"] = rng.exponential(0.05, n)
    num["route_late_rate"] = rng.beta(2, 8, n)
    logit = (
        -1.3
        + 0.12 * (num["scheduled_hour"] - 14)
        + CARRIER_EFFECT[carrier_idx]
        + 6.0 * num["precip"]
        + 4.0 * (num["route_late_rate"] - 0.2)
        + 0.5 * num["wind_speed"]
    )
    is_late = rng.random(n) < 1 / (1 + np.exp(-logit))
    for col in ("wind_gust", "temp", "plane_age_years", "route_late_rate"):
        num[col][rng.random(n) < (0.5 if col == "wind_gust" else 0.1)] = np.nan
    carrier = CARRIERS[carrier_idx].astype(object)
    if unseen:
        carrier[rng.random(n) < 0.05] = "ZZ"
        dest = np.where(rng.random(n) < 0.05, "NEW", dest)
    maker = MAKERS[rng.integers(0, len(MAKERS), n)].astype(object)
    maker[rng.random(n) < 0.08] = None
    frame = pd.DataFrame(
        {
            "row_id": np.char.add(f"r{seed}-", np.arange(n).astype(str)),
            "row_date": pd.Timestamp("2013-01-01").date(),
            "is_late": is_late,
            "carrier": carrier,
            "origin": origin,
            "dest": dest,
            "route": np.char.add(np.char.add(origin.astype(str), "-"), dest.astype(str)),
            "plane_manufacturer": maker,
            "plane_type": np.where(rng.random(n) < 0.9, "Fixed wing multi engine", None),
            "plane_engine": np.where(rng.random(n) < 0.5, "Turbo-fan", "Turbo-jet"),
        }
    )
    return frame.assign(**num)


# The label values of ``make_rated_table`` unless told otherwise: a 1-5 star rating.
RATINGS = (1.0, 2.0, 3.0, 4.0, 5.0)
# The columns of ``make_rated_table`` with its default classes; ``replace(RATED_FEATURES,
# classes=...)`` for others.
RATED_FEATURES = replace(FEATURES, label="rating", classes=RATINGS)


def make_rated_table(
    n: int, seed: int, classes: tuple = RATINGS, unseen: bool = False
) -> pd.DataFrame:
    """``make_table`` with an ordinal ``rating`` column holding one of ``classes`` (lowest
    first): a latent score of hour, carrier, precipitation and wind plus logistic noise, cut at
    fixed, evenly spaced points into ``len(classes)`` ordered classes."""
    if len(classes) < 2:
        raise ValueError(f"classes must hold at least two values, got {classes!r}")
    frame = make_table(n, seed, unseen)
    # Its own generator: the rows are make_table's own, draw for draw.
    rng = np.random.default_rng([seed, len(classes)])
    effect = dict(zip(CARRIERS, CARRIER_EFFECT, strict=True))
    latent = (
        0.15 * (frame["scheduled_hour"].to_numpy() - 14)
        + frame["carrier"].map(effect).fillna(0.0).to_numpy(dtype=np.float64)
        + 6.0 * frame["precip"].to_numpy()
        + 0.8 * frame["wind_speed"].to_numpy()
        + rng.logistic(size=n)
    )
    cuts = np.linspace(-2.5, 2.5, len(classes) - 1) + 0.3
    return frame.assign(rating=np.asarray(classes)[np.searchsorted(cuts, latent)])
