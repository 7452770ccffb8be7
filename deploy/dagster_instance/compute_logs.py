"""The embedded instance's compute logs: Dagster's local files, without a tail process per stream.

Dagster's `LocalComputeLogManager` captures a run's standard output and error into files the UI
shows, and mirrors each file back to the stream it captured while the run goes on: a `tail -F`
process and a watcher Python process per stream, four processes started and stopped for every
run, three or four runs a simulated day, each start costing wall time and CPU for nothing the
simulation needs. This subclass writes the same files in the same places and copies what each
captured to its stream once the capture ends, failed or not: the same bytes reach the
process's own output (the simulation's log file, a `dagster dev` terminal), after the run's steps
instead of while they run. The UI reads the files as it did, live.

It is the embedded default's (`deploy/dagster.yaml`); the stack and production keep Dagster's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any

from dagster import Field, StringSource
from dagster._core.execution.compute_logs import redirect_to_file
from dagster._core.storage.compute_log_manager import CapturedLogContext, ComputeIOType
from dagster._core.storage.local_compute_log_manager import (
    IO_TYPE_EXTENSION,
    LocalComputeLogManager,
)
from dagster._serdes import ConfigurableClassData
from dagster._utils import ensure_file, touch_file

CHUNK_BYTES = 1 << 20


class FileComputeLogManager(LocalComputeLogManager):
    """`LocalComputeLogManager` under `$DAGSTER_HOME/storage` (Dagster's default folder) whose
    capture copies each stream's file to the stream at its end rather than tailing it."""

    def __init__(self, dagster_home: str, inst_data: ConfigurableClassData | None = None):
        super().__init__(str(Path(dagster_home) / "storage"), inst_data=inst_data)

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {"dagster_home": Field(StringSource)}

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: dict[str, Any]
    ) -> FileComputeLogManager:
        return cls(inst_data=inst_data, **config_value)

    @contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Generator[CapturedLogContext, None, None]:
        """Redirect standard output and error into the run's files; copy them to the streams at
        the end (what a previous capture of the same key appended before is not copied again)."""
        captures = []
        streams = ((sys.stdout, ComputeIOType.STDOUT), (sys.stderr, ComputeIOType.STDERR))
        for stream, io_type in streams:
            path = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[io_type])
            ensure_file(path)
            captures.append((stream, path, os.path.getsize(path)))
        with ExitStack() as copies:
            # Callbacks run last first: standard output is copied before standard error.
            for stream, path, start in reversed(captures):
                copies.callback(copy_to_stream, path, start, stream)
            with (
                redirect_to_file(sys.stdout, captures[0][1]),
                redirect_to_file(sys.stderr, captures[1][1]),
            ):
                yield CapturedLogContext(log_key)
        # Left on the file system so that the capture is known to be complete (Dagster's own).
        touch_file(self.complete_artifact_path(log_key))


def copy_to_stream(path: str, start: int, stream: IO[str]) -> None:
    """Write the bytes of `path` from offset `start` to `stream`'s file descriptor, as a `tail`
    writing to it would (nothing where `stream` has no descriptor: a test runner's capture)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    stream.flush()
    with open(path, "rb") as captured:
        captured.seek(start)
        while chunk := captured.read(CHUNK_BYTES):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
