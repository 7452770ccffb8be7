"""The stack's process manager: supervisord (from PyPI) runs every service of the stack.

supervisord starts each service in its own process group, restarts one that dies (a service that
keeps failing while starting is retried with a growing delay, then marked FATAL), and answers on
a Unix socket only its owner may open. The stack writes its configuration (`supervisord.conf`,
readable by its owner only: the per-service settings may hold a database URL with its password)
and drives it over that socket: a service is started once the one before it is ready.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import xmlrpc.client
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from deploy.stack.processes import StackError, tail, write_atomically

# How long a service must stay up to count as started; how many starts supervisord tries
# (waiting 1 s, 2 s, 3 s... between them) before it gives up on a service and marks it FATAL.
START_SECONDS = 3
START_RETRIES = 5
# States in which supervisord is not (re)starting the process and will not without being asked.
STOPPED_STATES = {"STOPPED", "EXITED", "FATAL"}
# What supervisord keeps of the environment it is started from, which every service inherits:
# the machine's basics, none of the caller's settings (a service's own are in its `env`).
BASE = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")


@dataclass(frozen=True)
class Service:
    """One process of the stack: its command, its variables beside supervisord's `BASE`, and its
    readiness check.

    `stop_signal`: how the service is asked to stop (PostgreSQL stops fast on SIGINT); `user`:
    the user it runs as, when supervisord runs as root (PostgreSQL refuses to run as root);
    `stop_wait_s`: how long it may take to stop before it is killed.
    """

    name: str
    command: Sequence[str]
    ready: Callable[[], bool]
    env: Mapping[str, str] | None = None
    stop_signal: str = "TERM"
    user: str | None = None
    # Seconds between the stop signal and SIGKILL.
    stop_wait_s: int = 30


# Services whose processes write their title over their environment (nginx does), so that
# /proc shows none of supervisord's names: found by their configuration file, relative to the
# stack's folder, on the command line of their main process, with that process's children.
TITLED = {"proxy": "proxy/nginx.conf"}


def supervised(url: str, service: str | None = None) -> list[psutil.Process]:
    """Every live process, but this one, that the supervisord of `url` started (as `service`, if
    named) or that one of those started: supervisord names itself and the service in each
    service's environment, which their children inherit (`TITLED` services aside). Another
    user's are not readable."""
    root = Path(url.removeprefix("unix://")).parent.parent
    titled = {f"-c {root / path}": name for name, path in TITLED.items() if service in (None, name)}
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            environment = process.environ()
            command = " ".join(process.cmdline())
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        ours = environment.get("SUPERVISOR_SERVER_URL") == url
        if ours and service in (None, environment.get("SUPERVISOR_PROCESS_NAME")):
            found.append(process)
        elif any(marker in command for marker in titled):
            with contextlib.suppress(psutil.NoSuchProcess):
                found += [process, *process.children(recursive=True)]
    return list({process.pid: process for process in found}.values())


class Supervisor:
    """supervisord for the services of the stack whose state is under `root`."""

    def __init__(self, root: Path):
        self.root = root
        self.folder = root / "supervisor"
        self.logs = root / "logs"
        self.config = self.folder / "supervisord.conf"
        self.socket = self.folder / "supervisord.sock"

    @property
    def url(self) -> str:
        """How supervisord names itself to the processes it starts (SUPERVISOR_SERVER_URL)."""
        return f"unix://{self.socket}"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def _proxy(self):
        from supervisor.xmlrpc import SupervisorTransport

        transport = SupervisorTransport(serverurl=f"unix://{self.socket}")
        # The host is ignored: the transport talks to the socket.
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor

    def alive(self) -> bool:
        """Whether supervisord answers on its socket."""
        if not self.socket.exists():
            return False
        try:
            return self._proxy().getState()["statename"] == "RUNNING"
        except (OSError, xmlrpc.client.Fault):
            return False

    def write(self, services: Sequence[Service]) -> None:
        """supervisord's configuration for `services` (none started on its own: `start` starts
        each in order)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)
        sections = [
            f"[unix_http_server]\nfile = {self.socket}\nchmod = 0700\n",
            "[supervisord]\n"
            f"logfile = {self.logs / 'supervisord.log'}\n"
            f"pidfile = {self.folder / 'supervisord.pid'}\n"
            f"childlogdir = {self.logs}\n" + ("user = root\n" if os.geteuid() == 0 else ""),
            # supervisord refuses to guess whether root is meant; services that must not run as
            # root say so (`Service.user`).
            "[rpcinterface:supervisor]\n"
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n",
            f"[supervisorctl]\nserverurl = unix://{self.socket}\n",
            *(self._program(service) for service in services),
        ]
        write_atomically(self.config, "\n".join(sections), mode=0o600)

    def _program(self, service: Service) -> str:
        log = self.log(service.name)
        lines = [
            f"[program:{service.name}]",
            f"command = {' '.join(_quoted(part) for part in service.command)}",
            "autostart = false",
            "autorestart = true",
            f"startsecs = {START_SECONDS}",
            f"startretries = {START_RETRIES}",
            f"stopsignal = {service.stop_signal}",
            f"stopwaitsecs = {service.stop_wait_s}",
            # The daemon and the code server start processes of their own: stop them together.
            "stopasgroup = true",
            "killasgroup = true",
            "redirect_stderr = true",
            f"stdout_logfile = {log}",
            "stdout_logfile_maxbytes = 20MB",
            "stdout_logfile_backups = 2",
        ]
        if service.user and os.geteuid() == 0:
            lines.append(f"user = {service.user}")
        if service.env:
            pairs = ",".join(f'{key}="{_escaped(value)}"' for key, value in service.env.items())
            lines.append(f"environment = {pairs}")
        return "\n".join(lines) + "\n"

    def launch(self, services: Sequence[Service], timeout_s: float) -> bool:
        """Start supervisord unless it runs, or make it read a changed configuration; whether it
        was started. It gets this process's `BASE` variables only: each service gets them and
        its own `env`, nothing else of the shell that started it."""
        self.write(services)
        if self.alive():
            self._update()
            return False
        self.socket.unlink(missing_ok=True)  # left by a supervisord that was killed
        started = subprocess.run(
            [str(Path(sys.executable).parent / "supervisord"), "-c", str(self.config)],
            env={name: value for name, value in os.environ.items() if name in BASE},
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode != 0:
            raise StackError(f"supervisord did not start:\n{started.stdout}{started.stderr}")
        deadline = time.monotonic() + timeout_s
        while not self.alive():
            if time.monotonic() > deadline:
                raise StackError(
                    f"supervisord did not answer on {self.socket} within {timeout_s:.0f} s; its "
                    f"log: {self.logs / 'supervisord.log'}\n{tail(self.logs / 'supervisord.log')}"
                )
            time.sleep(0.2)
        return True

    def _update(self) -> None:
        """What `supervisorctl update` does: services added, changed or removed in the
        configuration are added, restarted with their new settings, or removed."""
        proxy = self._proxy()
        added, changed, removed = proxy.reloadConfig()[0]
        for name in changed + removed:
            proxy.stopProcessGroup(name)
            proxy.removeProcessGroup(name)
        for name in added + changed:
            proxy.addProcessGroup(name)

    def processes(self) -> list[psutil.Process]:
        """Every live process this supervisord started or one of those started: supervisord
        names itself in each service's environment, which their children inherit."""
        return supervised(self.url)

    def leftovers(self) -> list[int]:
        """Stop the services a supervisord that died left running (they hold the ports and the
        data folders a new one would start them on); their pids. A service is a process of
        `processes` whose parent is not one (a run the daemon started is the daemon's)."""
        if self.alive():
            return []
        ours = self.processes()
        pids = {process.pid for process in ours}
        found = [process for process in ours if process.ppid() not in pids]
        for process in found:
            # Its group: a service's own children (a server's workers) go with it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(process.pid), signal.SIGKILL)
        psutil.wait_procs(found, timeout=30)
        return [process.pid for process in found]

    def info(self, name: str) -> dict:
        """supervisord's record of `name` (state, pid, start time, exit status)."""
        return self._proxy().getProcessInfo(name)

    def pid(self, name: str) -> int | None:
        """The pid of `name` while its process lives (starting, running or stopping)."""
        if not self.alive():
            return None
        return self.info(name)["pid"] or None  # supervisord's 0: no process

    def signal(self, name: str, signal_name: str) -> bool:
        """Send `name`'s process `signal_name` (HUP: reload) if it runs; whether it did."""
        if not self.alive() or not self.info(name)["statename"].startswith("RUNNING"):
            return False
        self._proxy().signalProcess(name, signal_name)
        return True

    def start(self, service: Service, timeout_s: float) -> bool:
        """Start `service` unless supervisord runs it already; either way wait until it is ready.
        Whether it was started."""
        proxy = self._proxy()
        state = self.info(service.name)["statename"]
        if state in STOPPED_STATES:
            proxy.startProcess(service.name, False)  # not waiting: `wait` follows it
        self.wait(service, timeout_s)
        return state in STOPPED_STATES

    def wait(self, service: Service, timeout_s: float) -> None:
        """Until `service` is ready; StackError naming its log if supervisord gives up on it
        (FATAL) or it is not ready in `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not service.ready():
            record = self.info(service.name)
            if record["statename"] in STOPPED_STATES:
                raise StackError(
                    f"{service.name} is {record['statename']} ({record['description']}) while "
                    f"starting; its log: {self.log(service.name)}\n{tail(self.log(service.name))}"
                )
            if time.monotonic() > deadline:
                raise StackError(
                    f"{service.name} was not ready after {timeout_s:.0f} s; "
                    f"its log: {self.log(service.name)}\n{tail(self.log(service.name))}"
                )
            time.sleep(0.2)

    def stop(self, names: Sequence[str]) -> list[str]:
        """Stop `names`, in that order; those that were running."""
        if not self.alive():
            return []
        proxy, stopped = self._proxy(), []
        for name in names:
            if self.info(name)["statename"] not in STOPPED_STATES:
                proxy.stopProcess(name, True)
                stopped.append(name)
        return stopped

    def shutdown(self) -> bool:
        """Stop supervisord (after its services); whether it was running."""
        if not self.alive():
            return False
        pid = int((self.folder / "supervisord.pid").read_text())
        self._proxy().shutdown()
        deadline = time.monotonic() + 60
        while psutil.pid_exists(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        return True

    def states(self, names: Sequence[str]) -> dict[str, str]:
        """Each service's state as supervisord sees it (RUNNING, STARTING, BACKOFF, FATAL...),
        with how long it has run and how often it was restarted; `STOPPED` for all when
        supervisord is not running."""
        if not self.alive():
            return dict.fromkeys(names, "STOPPED (supervisord not running)")
        found = {record["name"]: record for record in self._proxy().getAllProcessInfo()}
        return {
            name: f"{found[name]['statename']:<8} {found[name]['description']}"
            if name in found
            else "UNKNOWN"
            for name in names
        }


def _quoted(part: str) -> str:
    """A command's argument as supervisord's `command` reads it (shell-like splitting; `%` is
    its expansion character)."""
    escaped = part.replace("%", "%%")
    if escaped and not any(c in escaped for c in " \t\"'\\"):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _escaped(value: str) -> str:
    """An environment value inside supervisord's `KEY="value"` pairs."""
    return value.replace("%", "%%").replace('"', '\\"')
