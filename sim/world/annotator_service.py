"""The simulated annotators as a long-running process (`flywheel-sim annotators`).

The world asks for a day's answers by writing the day to `sim/annotators/asked.json` under
FLYWHEEL_HOME; the service, polling, answers every task due by that day (into the inbox files,
or through the Label Studio API) and then writes the day to `sim/annotators/delivered.json`.
Both files are replaced atomically and a delivery is idempotent (files: the same bytes; Label
Studio: only tasks nobody answered), so a service killed at any moment and started again
answers the same.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from sim.world.annotators import Annotators
from sim.world.clock import read_day, write_json

POLL_S = 0.2


class AnnotatorServiceError(RuntimeError):
    """The annotator service died or did not answer in time; the message names its log."""


def folder(home: Path) -> Path:
    """Where the world and the service exchange the days asked for and delivered."""
    return home / "sim" / "annotators"


def _read_day(path: Path) -> date | None:
    return read_day(path, "day", "annotator state")


def serve(home: Path, service: Annotators, poll_s: float = POLL_S) -> None:
    """Answer each day asked for, until SIGTERM or SIGINT, or until the process that started
    it is gone (a simulation killed with SIGKILL leaves no service behind)."""
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    asked_path, delivered_path = folder(home) / "asked.json", folder(home) / "delivered.json"
    print(f"annotators: answering the days asked for in {asked_path}", flush=True)
    parent = os.getppid()
    while not stop and os.getppid() == parent:
        asked, delivered = _read_day(asked_path), _read_day(delivered_path)
        if asked is not None and asked != delivered:
            report = service.deliver(asked)
            write_json(delivered_path, {"day": asked.isoformat()})
            print(
                f"annotators: {asked}: {report.tasks_answered} tasks answered in "
                f"{len(report.files_written)} new files, {report.tasks_waiting} not due yet",
                flush=True,
            )
        time.sleep(poll_s)


class AnnotatorProcess:
    """The world's side: starts the service as its own process, asks it for days, stops it."""

    def __init__(self, home: Path, log: Path, timeout_s: float = 300.0):
        self.home, self.log, self.timeout_s = home, log, timeout_s
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> AnnotatorProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "sim", "annotators"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ),
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)

    def deliver(self, day: date) -> None:
        """Ask the service for `day`'s answers and wait until it has written them."""
        write_json(folder(self.home) / "asked.json", {"day": day.isoformat()})
        deadline = time.monotonic() + self.timeout_s
        while _read_day(folder(self.home) / "delivered.json") != day:
            if self.process is not None and self.process.poll() is not None:
                raise AnnotatorServiceError(
                    f"the annotator service exited with status {self.process.returncode} before "
                    f"delivering {day}; its log: {self.log}"
                )
            if time.monotonic() > deadline:
                raise AnnotatorServiceError(
                    f"the annotator service did not deliver {day} in {self.timeout_s:.0f} s; "
                    f"its log: {self.log}"
                )
            time.sleep(POLL_S / 2)
