"""What the stack's parts share: its error, atomic files, free ports, HTTP checks, log tails."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path


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


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different TCP ports on `host` that nothing listens on now. The probes stay
    bound until all are chosen: one closed before the next is bound may be handed out again
    (two services of one stack were once given the same port)."""
    with contextlib.ExitStack() as probes:
        sockets = [probes.enter_context(socket.socket()) for _ in range(count)]
        for probe in sockets:
            probe.bind((host, 0))
        return [probe.getsockname()[1] for probe in sockets]


def http_ok(url: str, authority: Path | None = None, auth: tuple[str, str] | None = None) -> bool:
    """Whether `url` answers 2xx (over TLS, its certificate checked against `authority`'s, or
    the system's; as user and password `auth`, by HTTP basic authentication, if given)."""
    context = ssl.create_default_context(cafile=authority) if authority else None
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(":".join(auth).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError):
        return False


def tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a log file, indented."""
    if not path.exists():
        return "  (no log written)"
    return "\n".join(f"  {line}" for line in path.read_text(errors="replace").splitlines()[-lines:])
