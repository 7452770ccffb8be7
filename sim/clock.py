"""The simulated clock: the last day the replay landed, kept under the state directory."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import date
from pathlib import Path


def clock_path(home: Path) -> Path:
    """Where the clock of state directory `home` is kept."""
    return home / "sim" / "clock.json"


def read_clock(home: Path) -> date | None:
    """The last landed day, or None before the first advance."""
    path = clock_path(home)
    if not path.exists():
        return None
    try:
        return date.fromisoformat(json.loads(path.read_text())["last_landed_day"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"unreadable simulated clock {path}: {e}") from e


def write_clock(home: Path, day: date) -> None:
    """Set the clock to `day`, atomically so that an interrupted write keeps the old value."""
    path = clock_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"last_landed_day": day.isoformat()}, f)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
