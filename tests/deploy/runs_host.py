"""A host for the stack's runs that shares nothing with the rest of the stack but the network, as
a Kubernetes pod shares nothing with the daemon.

`namespace()` makes a network namespace joined to this machine by a pair of virtual Ethernet
devices: the services listen on the host's end (`host`), the code server on the namespace's
(`runs`), and the namespace has no other way out. `IsolatedStack` is the stack with its code
server (and so every run it starts, and every tuning worker a run starts) started in that
namespace and in a mount namespace of its own, where the stack's state folder is an empty file
system but for the instance's `dagster.yaml` and the certificate authority (what a pod would have
mounted; tests/deploy/pod.py). Root only (`ip netns`, `unshare`).

    FLYWHEEL_RUNS_NETNS=<name> python -m tests.deploy.runs_host up|down|status
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from deploy.stack import __main__ as stack_cli
from deploy.stack.stack import Stack
from deploy.stack.supervisor import Service

REPO = Path(__file__).resolve().parents[2]
POD = Path(__file__).with_name("pod.py")
NETNS = "FLYWHEEL_RUNS_NETNS"


def available() -> str | None:
    """Why runs cannot be given a host of their own here, or None."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "network and mount namespaces need root on Linux"
    missing = [tool for tool in ("ip", "unshare", "mount") if shutil.which(tool) is None]
    return f"missing {', '.join(missing)}" if missing else None


@dataclass(frozen=True)
class RunsNamespace:
    name: str
    host: str  # this machine's end of the link: where the services listen
    runs: str  # the namespace's end: where the code server listens

    def environment(self) -> dict[str, str]:
        """What `stack up` needs to make a stack on these addresses, with this namespace."""
        return {
            "FLYWHEEL_STACK_ADDRESS": self.host,
            "FLYWHEEL_STACK_CODE_SERVER_ADDRESS": self.runs,
            NETNS: self.name,
        }


def _ip(*args: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def namespace() -> Iterator[RunsNamespace]:
    """A new network namespace linked to this machine on a /30 of its own; removed on exit."""
    tag = secrets.token_hex(3)
    name, outside, inside = f"fw-runs-{tag}", f"fwh{tag}", f"fwr{tag}"
    octet = int(tag[:2], 16)
    host, runs = f"10.213.{octet}.1", f"10.213.{octet}.2"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", name)
        _ip("addr", "add", f"{host}/30", "dev", outside)
        _ip("link", "set", outside, "up")
        _ip("addr", "add", f"{runs}/30", "dev", inside, netns=name)
        _ip("link", "set", inside, "up", netns=name)
        _ip("link", "set", "lo", "up", netns=name)
        yield RunsNamespace(name, host, runs)
    finally:
        subprocess.run(["ip", "link", "del", outside], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


@dataclass(frozen=True)
class IsolatedStack(Stack):
    """The stack, its code server started in the network namespace `netns` and a mount
    namespace of its own."""

    netns: str = ""

    def services(self) -> dict[str, Service]:
        services = super().services()
        server = services["code_server"]
        # What a pod gets mounted: the instance's settings and the authorities to check TLS with.
        files = {Path(value) for value in self.certificates.client_environment().values()}
        authorities = {path for path in files if path.is_absolute()}
        keep = [self.dagster_home / "dagster.yaml", *sorted(authorities)]
        # The state of the stack (its databases' files, objects, logs, the dataset checkout)
        # and the working copy's own embedded state are out of sight.
        hide = [self.root.parent, REPO / ".flywheel"]
        pod = [sys.executable, str(POD), *(f"--hide={h}" for h in hide)]
        pod += [f"--keep={k}" for k in keep]
        enter = ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--propagation=private"]
        # A pod stages its compute logs in its own temporary folder (tests/deploy/pod.py's).
        env = {**(server.env or {}), "FLYWHEEL_COMPUTE_LOG_DIR": str(hide[0] / ".pod" / "tmp")}
        services["code_server"] = Service(
            server.name,
            [*enter, "--", *pod, "--", *server.command],
            server.ready,
            env,
            server.stop_signal,
            server.user,
            server.stop_wait_s,
        )
        return services


def main(argv: list[str] | None = None) -> int:
    """`python -m deploy.stack`, the code server in the namespace named by FLYWHEEL_RUNS_NETNS."""
    from pipelines.settings import flywheel_home

    return stack_cli.main(argv, IsolatedStack(flywheel_home() / "stack", os.environ[NETNS]))


if __name__ == "__main__":
    raise SystemExit(main())


class Sightings:
    """Every process seen, while this watches, in a network namespace other than this process's:
    pid -> (its network namespace, its mount namespace, its command line). Looked for every
    0.2 s: a run's process lives for seconds at least."""

    def __init__(self, every_s: float = 0.2):
        self.every_s = every_s
        self.seen: dict[int, tuple[str, str, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self.own = namespaces(os.getpid())

    def __enter__(self) -> Sightings:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit() or int(entry.name) in self.seen:
                    continue
                found = namespaces(int(entry.name))
                if found is None or found[0] == self.own[0]:
                    continue
                with contextlib.suppress(OSError):
                    command = Path(f"/proc/{entry.name}/cmdline").read_bytes()
                    self.seen[int(entry.name)] = (*found, command.replace(b"\0", b" ").decode())


def namespaces(pid: int) -> tuple[str, str] | None:
    """The network and mount namespaces of process `pid` (None if it is gone)."""
    try:
        return tuple(os.readlink(f"/proc/{pid}/ns/{kind}") for kind in ("net", "mnt"))
    except OSError:
        return None


def netns_id(name: str) -> str:
    """How /proc names the network namespace `ip netns` calls `name`."""
    return f"net:[{os.stat(f'/run/netns/{name}').st_ino}]"
