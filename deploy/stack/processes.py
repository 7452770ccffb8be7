"""Long-running processes of the stack: started detached, found again by pid file, stopped."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil


class StackError(RuntimeError):
    """The stack could not be started or stopped; the message says which part and why."""


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `path` whole or not at all (a process killed mid-write leaves the old file)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w") as out:
        out.write(text)
    os.replace(partial, path)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` different TCP ports on 127.0.0.1 that nothing listens on now. The probes stay
    bound until all are chosen: one closed before the next is bound may be handed out again
    (two services of one stack were once given the same port)."""
    with contextlib.ExitStack() as probes:
        sockets = [probes.enter_context(socket.socket()) for _ in range(count)]
        for probe in sockets:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in sockets]


def http_ok(url: str) -> bool:
    """Whether `url` answers 2xx."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError):
        return False


@dataclass(frozen=True)
class Service:
    """One process of the stack: its command, environment additions and readiness check."""

    name: str
    command: Sequence[str]
    ready: Callable[[], bool]
    env: Mapping[str, str] | None = None


class ProcessTable:
    """The stack's processes by name: pid files (pid and start time) and log files under `root`."""

    def __init__(self, root: Path):
        self.pids, self.logs = root / "pids", root / "logs"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def running(self, name: str) -> psutil.Process | None:
        """The live process recorded for `name`; None if none (a recycled pid is not it)."""
        path = self.pids / f"{name}.json"
        if not path.exists():
            return None
        record = json.loads(path.read_text())
        try:
            process = psutil.Process(record["pid"])
            if abs(process.create_time() - record["started"]) < 1 and process.is_running():
                return process if process.status() != psutil.STATUS_ZOMBIE else None
        except psutil.NoSuchProcess:
            pass
        return None

    def start(self, service: Service, env: Mapping[str, str], timeout_s: float) -> bool:
        """Start `service` unless it runs; either way wait until it is ready. Whether it was
        started."""
        running = self.running(service.name)
        if running is not None:
            self.wait(service, lambda: None if running.is_running() else "gone", timeout_s)
            return False
        self.pids.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        with self.log(service.name).open("ab") as log:
            process = subprocess.Popen(
                list(service.command),
                env={**env, **(service.env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the terminal that started it stops nothing
            )
        started = psutil.Process(process.pid).create_time()
        record = {"pid": process.pid, "started": started, "command": list(service.command)}
        write_atomically(self.pids / f"{service.name}.json", json.dumps(record))
        self.wait(service, process.poll, timeout_s)
        return True

    def wait(
        self, service: Service, exit_status: Callable[[], int | str | None], timeout_s: float
    ) -> None:
        """Until `service` is ready; StackError naming its log if it exits (`exit_status()` is
        no longer None) or is not ready in `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not service.ready():
            if (status := exit_status()) is not None:
                raise StackError(
                    f"{service.name} exited with status {status} while starting; "
                    f"its log: {self.log(service.name)}\n{tail(self.log(service.name))}"
                )
            if time.monotonic() > deadline:
                raise StackError(
                    f"{service.name} was not ready after {timeout_s:.0f} s; "
                    f"its log: {self.log(service.name)}\n{tail(self.log(service.name))}"
                )
            time.sleep(0.2)

    def stop(self, names: Sequence[str], timeout_s: float = 20.0) -> list[str]:
        """SIGTERM the process groups of `names` at once, SIGKILL what is left after `timeout_s`.

        The names that were running.
        """
        group, stopped = [], []
        for name in names:
            process = self.running(name)
            (self.pids / f"{name}.json").unlink(missing_ok=True)
            if process is None:
                continue
            try:
                # Its group: the daemon and the code server start processes of their own.
                group += [process, *process.children(recursive=True)]
                os.killpg(process.pid, signal.SIGTERM)
            except (psutil.NoSuchProcess, ProcessLookupError):  # it ended meanwhile
                continue
            stopped.append(name)
        _, alive = psutil.wait_procs(group, timeout=timeout_s)
        for leftover in alive:
            leftover.kill()
        psutil.wait_procs(alive, timeout=5)
        return stopped


def tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a log file, indented."""
    if not path.exists():
        return "  (no log written)"
    return "\n".join(f"  {line}" for line in path.read_text(errors="replace").splitlines()[-lines:])
