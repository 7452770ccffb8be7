"""Planted drift: a change the outside world makes from a given day on, written on the command
line as `KIND[:OPTION]@YYYY-MM-DD`. Three kinds, each with values the landing contracts accept:

- `celsius` (a feed's units): temperatures and dew points of the weather feed arrive in degrees
  Celsius instead of Fahrenheit, the relative humidity as before. Every value still passes the
  landing contract, so no column's own bounds catch it. The weather feed's humidity check does
  (pipelines/task/feed_checks.py, `checks: humidity:` in pipelines/tasks/flights.yaml):
  the humidity the two readings imply no longer matches the reported one, and with
  `quarantine: true` each such day's rows go to the quarantine.
- `concept[:CARRIER]` (the outcome): the carrier's flights are late with a probability raised by
  0.2, their features unchanged (sim.world.flight_breaks says exactly how). It changes what the
  world holds back, so annotators and judge see it alike (`sim.world.sources.outcome_of`).
- `reschedule[:CARRIER[+HOURS]]` (a covariate): the carrier's departures leave HOURS later
  (default 6), wrapping within the day, every time column consistent; outcomes as they were.

CARRIER defaults to `B6`. A simulation records the break it plays in its state directory
(`record`), so every process of that world (the annotator service, the judge's subprocesses)
finds it (`planted`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd

from sim.world import flight_breaks, nycflights
from sim.world.clock import write_json

# What a replay applies to each day of each feed: (feed, day, rows) -> rows.
Transform = Callable[[str, date, pd.DataFrame], pd.DataFrame]

KINDS = ("celsius", "concept", "reschedule")
CARRIER_KINDS = ("concept", "reschedule")
DEFAULT_CARRIER = "B6"  # JetBlue: the second largest carrier at New York in 2013
DEFAULT_HOURS = 6
SYNTAX = "KIND[:OPTION]@YYYY-MM-DD (celsius, concept[:CARRIER], reschedule[:CARRIER[+HOURS]])"


def _celsius(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    for column in ("temp", "dewp"):
        # The source holds text; a missing reading stays as it is.
        fahrenheit = pd.to_numeric(frame[column], errors="coerce")
        celsius = ((fahrenheit - 32.0) * 5.0 / 9.0).round(2).map("{:g}".format)
        frame[column] = celsius.where(fahrenheit.notna(), frame[column])
    return frame


@dataclass(frozen=True)
class PlantedDrift:
    """Apply drift `kind` to every feed and outcome it concerns from day `start` on; `carrier`
    and `hours` are the options of `concept` and `reschedule` (defaults filled in)."""

    start: date
    kind: str = "celsius"
    carrier: str | None = None
    hours: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown drift {self.kind!r}; known: {list(KINDS)}")
        if self.kind not in CARRIER_KINDS and self.carrier is not None:
            raise ValueError(f"drift {self.kind!r} takes no carrier, got {self.carrier!r}")
        if self.kind != "reschedule" and self.hours is not None:
            raise ValueError(f"drift {self.kind!r} takes no hours, got {self.hours}")
        if self.kind in CARRIER_KINDS:
            carrier = self.carrier or DEFAULT_CARRIER
            if carrier not in nycflights.carriers():
                raise ValueError(
                    f"drift {self.kind!r}: unknown carrier {carrier!r}; known: "
                    f"{sorted(nycflights.carriers())}"
                )
            object.__setattr__(self, "carrier", carrier)
        if self.kind == "reschedule":
            hours = DEFAULT_HOURS if self.hours is None else self.hours
            if not 1 <= hours <= 23:
                raise ValueError(f"drift 'reschedule': hours must be within 1..23, got {hours}")
            object.__setattr__(self, "hours", hours)

    def __str__(self) -> str:
        """As the command line writes it (`parse_drift`'s input)."""
        option = f":{self.carrier}" if self.carrier else ""
        option += f"+{self.hours}" if self.hours else ""
        return f"{self.kind}{option}@{self.start.isoformat()}"

    def __call__(self, feed: str, day: date, frame: pd.DataFrame) -> pd.DataFrame:
        """The feed's rows for `day`, drifted if `day` is on or after the start."""
        if day < self.start:
            return frame
        if self.kind == "celsius" and feed == "weather":
            return _celsius(frame)
        if self.kind == "reschedule" and feed == "flights":
            return flight_breaks.reschedule(frame, str(self.carrier), int(self.hours or 0))
        return frame

    def outcome(self, task_name: str, example_id: str, held_back: object) -> object:
        """The outcome of example `example_id` of task `task_name` in the drifted world, given
        the one the source holds back."""
        if self.kind != "concept" or task_name != "flights" or held_back:
            return held_back
        if date.fromisoformat(example_id[:10]) < self.start:
            return held_back
        if nycflights.carrier_of(example_id) != self.carrier:
            return held_back
        return flight_breaks.flips(example_id)


def parse_drift(text: str) -> PlantedDrift:
    """`KIND[:OPTION]@YYYY-MM-DD` (e.g. `celsius@2013-11-01`, `concept:UA@2013-10-01`,
    `reschedule:EV+3@2013-10-01`) as a PlantedDrift."""
    spec, _, day = text.partition("@")
    kind, _, option = spec.partition(":")
    try:
        start = date.fromisoformat(day)
        if kind not in KINDS:
            raise ValueError(f"unknown drift {kind!r}; known: {list(KINDS)}")
        carrier = hours = None
        if option:
            match = re.fullmatch(r"([A-Z0-9]{2})?(?:\+([0-9]{1,2}))?", option)
            if kind not in CARRIER_KINDS:
                raise ValueError(f"drift {kind!r} takes no option, got {option!r}")
            if match is None:
                raise ValueError(f"drift {kind!r}: expected CARRIER[+HOURS], got {option!r}")
            carrier, hours = match.group(1), match.group(2)
        return PlantedDrift(start, kind, carrier, None if hours is None else int(hours))
    except ValueError as e:
        raise ValueError(f"expected {SYNTAX}, got {text!r}: {e}") from None


def drift_path(home: Path) -> Path:
    """Where the break the world of state directory `home` plays is recorded."""
    return home / "sim" / "drift.json"


def record(home: Path, drift: PlantedDrift) -> None:
    """Record `drift` as the break of the world of `home`, atomically."""
    write_json(drift_path(home), {"drift": str(drift)})


_read: dict[Path, tuple[int, PlantedDrift]] = {}


def planted(home: Path) -> PlantedDrift | None:
    """The break recorded for the world of `home`, None if it has none (read again only when
    the file changes: outcomes ask for it once per example)."""
    path = drift_path(home)
    try:
        modified = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None
    known = _read.get(path)
    if known is None or known[0] != modified:
        try:
            known = (modified, parse_drift(json.loads(path.read_text())["drift"]))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"unreadable planted drift {path}: {e}") from e
        _read[path] = known
    return known[1]
