"""The simulated clock: the last day the replay landed, kept under the state directory; and
how far the simulation played (the day it last finished, when production began), so a killed
simulation started again resumes where it stopped."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import date
from pathlib import Path


def clock_path(home: Path) -> Path:
    """Where the clock of state directory `home` is kept."""
    return home / "sim" / "clock.json"


def read_day(path: Path, key: str, what: str) -> date | None:
    """The day under `key` of JSON file `path`, None if there is no file; an error naming
    `what` and the file if it cannot be read."""
    if not path.exists():
        return None
    try:
        return date.fromisoformat(json.loads(path.read_text())[key])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"unreadable {what} {path}: {e}") from e


def read_clock(home: Path) -> date | None:
    """The last landed day, or None before the first advance."""
    return read_day(clock_path(home), "last_landed_day", "simulated clock")


def write_clock(home: Path, day: date) -> None:
    """Set the clock to `day`, atomically so that an interrupted write keeps the old value."""
    write_json(clock_path(home), {"last_landed_day": day.isoformat()})


def progress_path(home: Path) -> Path:
    """Where the simulation's progress of state directory `home` is kept."""
    return home / "sim" / "played.json"


def read_progress(home: Path) -> tuple[date | None, date | None]:
    """The last day the simulation finished playing and the first production day (None, None
    before it finished a day)."""
    path = progress_path(home)
    if not path.exists():
        return None, None
    try:
        raw = json.loads(path.read_text())
        played, production = raw["last_played_day"], raw["production_start"]
        return date.fromisoformat(played), date.fromisoformat(production) if production else None
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"unreadable simulation progress {path}: {e}") from e


def write_progress(home: Path, played: date, production_start: date | None) -> None:
    """Record that the simulation finished `played`, atomically."""
    production = production_start.isoformat() if production_start else None
    write_json(
        progress_path(home), {"last_played_day": played.isoformat(), "production_start": production}
    )


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
