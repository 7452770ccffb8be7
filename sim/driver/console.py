"""The simulation's terminal: its own lines on the terminal, every library's output in a log."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TextIO

# The terminal the process started on while `output_to_log` sends file descriptors 1 and 2 to a
# log file (stdout, stderr); None otherwise.
_terminal: tuple[TextIO, TextIO] | None = None


def say(message: str = "", *, error: bool = False) -> None:
    """Print one of the simulation's own lines on the terminal (standard error if `error`), also
    while every other output goes to the log file."""
    if _terminal is None:
        stream = sys.stderr if error else sys.stdout
    else:
        stream = _terminal[1] if error else _terminal[0]
    print(message, file=stream, flush=True)


def log_path(home: Path) -> Path:
    """A new log file's path under `home`/logs, named by the local time it starts."""
    return home / "logs" / f"simulation-{datetime.now():%Y%m%d-%H%M%S}.log"


@contextmanager
def output_to_log(path: Path, restore: bool = True) -> Iterator[Path]:
    """Send whatever is written to file descriptors 1 and 2 to `path` (Dagster's events, dbt's
    output, warnings, progress bars of libraries, a crashing library's own messages, whether
    through `sys.stdout`, `sys.stderr` or the descriptors), while `say` writes to the terminal.

    With `restore` false the descriptors stay on the log when the block ends, for a command that
    ends its process: what libraries print while the interpreter shuts down lands there too.
    """
    global _terminal
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    terminal = tuple(
        os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace") for fd in saved
    )
    previous = _terminal
    with path.open("a", encoding="utf-8") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        _terminal = terminal
        try:
            yield path
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            if restore:
                _terminal = previous
                for stream in terminal:
                    stream.close()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
