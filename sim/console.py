"""The main job's terminal: its own lines on the terminal, every library's output in a log file."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path


def log_path(home: Path) -> Path:
    """A new log file's path under `home`/logs, named by the local time it starts."""
    return home / "logs" / f"main_job-{datetime.now():%Y%m%d-%H%M%S}.log"


@contextmanager
def output_to_log(path: Path) -> Iterator[Path]:
    """Send whatever is written to file descriptors 1 and 2 to `path` (Dagster's events, dbt's
    output, warnings, progress bars of libraries, a crashing library's own messages), while
    `sys.stdout` (the caller's `print`) keeps writing to the terminal the process started on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved[0]), "w", buffering=1, encoding="utf-8")
    original_stdout = sys.stdout
    with path.open("a", encoding="utf-8") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = terminal
        try:
            yield path
        finally:
            sys.stdout = original_stdout
            terminal.close()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
