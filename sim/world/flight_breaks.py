"""The planted breaks of one carrier's flights (sim.world.drift's `concept` and `reschedule`).

- `concept`: from its day on, the carrier's flights are late more often, their features as they
  were. "+0.2" is on the carrier's late rate over the replayed year, `p`: each of its flights the
  source has on time is late instead with probability `q = 0.2 / (1 - p)`, so its expected late
  rate becomes `p + (1 - p) q = p + 0.2`. A stretch of days whose own rate `r` differs from `p`
  rises by `0.2 (1 - r) / (1 - p)` (a little more where it was more punctual than the year).
  Which flights flip is a hash of the flight id with a fixed salt, not a random state: every
  process that asks (the annotators, the judge, a replay) gets the same outcome.
- `reschedule`: from its day on, the carrier's departures leave `hours` later, wrapping within
  the local day: `sched_dep_time`, `hour`, `sched_arr_time` and `time_hour` move together
  (`minute` stays), so every value is one the flights contract accepts and the feed checks see
  the same rows. The outcome stays the flight's own.
"""

from __future__ import annotations

import hashlib

import pandas as pd

from sim.world import nycflights

RISE = 0.2  # what `concept` adds to the carrier's late rate
SALT = "concept-break-2013"  # which flights flip: a hash of this and the flight id


def flip_probability(carrier: str) -> float:
    """The chance that one of `carrier`'s on-time flights is late under `concept` (the module)."""
    rates = nycflights.carrier_late_rates()
    if carrier not in rates:
        raise KeyError(f"the source has no flights of carrier {carrier!r}; known: {sorted(rates)}")
    on_time = 1.0 - rates[carrier]
    if on_time <= RISE:
        raise ValueError(
            f"carrier {carrier!r} is late on {rates[carrier]:.0%} of its flights: its late "
            f"rate cannot rise by {RISE}"
        )
    return RISE / on_time


def flips(flight_id: str) -> bool:
    """Whether `concept` makes on-time flight `flight_id` late: its hash against its carrier's
    flip probability."""
    digest = hashlib.sha256(f"{SALT}:{flight_id}".encode()).digest()[:6]
    unit = int.from_bytes(digest, "big") / 2**48
    return unit < flip_probability(nycflights.carrier_of(flight_id))


def reschedule(frame: pd.DataFrame, carrier: str, hours: int) -> pd.DataFrame:
    """A day of the flights feed (the source's text) with `carrier`'s departures `hours` later,
    wrapping within the local day, in the day's scheduling order again."""
    rows = frame["carrier"] == carrier
    if not rows.any():
        return frame
    frame = frame.copy()
    departure = pd.to_numeric(frame.loc[rows, "sched_dep_time"], errors="raise")
    arrival = pd.to_numeric(frame.loc[rows, "sched_arr_time"], errors="raise")
    old_hour = departure // 100
    new_hour = (old_hour + hours) % 24
    frame.loc[rows, "sched_dep_time"] = (new_hour * 100 + departure % 100).astype(str)
    frame.loc[rows, "sched_arr_time"] = (
        (arrival // 100 + hours) % 24 * 100 + arrival % 100
    ).astype(str)
    frame.loc[rows, "hour"] = new_hour.astype(str)
    # time_hour is UTC: moved by the same hours the local hour moved, at the row's own offset.
    moved = pd.to_datetime(frame.loc[rows, "time_hour"], utc=True) + pd.to_timedelta(
        new_hour - old_hour, unit="h"
    )
    frame.loc[rows, "time_hour"] = moved.dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    # The source orders a day by scheduled departure: so does a rescheduled day.
    keys = {
        f"_sort_{c}": pd.to_numeric(frame[c]) if c in nycflights.NUMERIC_SORT_KEYS else frame[c]
        for c in nycflights.DAY_ORDER["flights"]
    }
    ordered = frame.assign(**keys).sort_values(list(keys), kind="stable")
    return ordered[frame.columns].reset_index(drop=True)
