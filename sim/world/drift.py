"""Planted drift: a change the outside world makes to its feeds from a given day on.

`celsius` is an upstream unit change a real weather provider could make: temperatures and dew
points arrive in degrees Celsius instead of Fahrenheit, the relative humidity as before. Every
value still passes the landing contract (it is a plausible number), so no column's own bounds
catch it. The weather feed's humidity check does (pipelines/defs/ingestion/feed_checks.py,
`checks: humidity:` in pipelines/tasks/flights.yaml): the humidity the two readings imply no
longer matches the reported one, and with `quarantine: true` each such day's rows go to the
quarantine: the day is used as one the feed missed, never with Celsius read as Fahrenheit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

import pandas as pd

Transform = Callable[[str, date, pd.DataFrame], pd.DataFrame]


def _celsius(feed: str, frame: pd.DataFrame) -> pd.DataFrame:
    if feed != "weather":
        return frame
    frame = frame.copy()
    for column in ("temp", "dewp"):
        # The source holds text; a missing reading stays as it is.
        fahrenheit = pd.to_numeric(frame[column], errors="coerce")
        celsius = ((fahrenheit - 32.0) * 5.0 / 9.0).round(2).map("{:g}".format)
        frame[column] = celsius.where(fahrenheit.notna(), frame[column])
    return frame


KINDS: dict[str, Callable[[str, pd.DataFrame], pd.DataFrame]] = {"celsius": _celsius}


@dataclass(frozen=True)
class PlantedDrift:
    """Apply drift `kind` to every feed it concerns on days from `start` on."""

    start: date
    kind: str = "celsius"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown drift {self.kind!r}; known: {sorted(KINDS)}")

    def __str__(self) -> str:
        """As the command line writes it (`parse_drift`'s input)."""
        return f"{self.kind}@{self.start.isoformat()}"

    def __call__(self, feed: str, day: date, frame: pd.DataFrame) -> pd.DataFrame:
        """The feed's rows for `day`, drifted if `day` is on or after the start."""
        return KINDS[self.kind](feed, frame) if day >= self.start else frame


def parse_drift(text: str) -> PlantedDrift:
    """`KIND@YYYY-MM-DD` (e.g. `celsius@2013-11-01`) as a PlantedDrift."""
    kind, _, day = text.partition("@")
    try:
        return PlantedDrift(date.fromisoformat(day), kind)
    except ValueError as e:
        raise ValueError(f"expected KIND@YYYY-MM-DD with KIND in {sorted(KINDS)}: {e}") from None
