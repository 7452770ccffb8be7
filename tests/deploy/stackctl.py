"""Start, stop and read the settings of a stack in a test's FLYWHEEL_HOME."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def passable(folder: Path) -> None:
    """Let other users (PostgreSQL's server user) pass through the folders above `folder`."""
    for parent in [folder, *folder.parents]:
        if str(parent) in ("/", "/tmp"):
            break
        if parent.stat().st_uid == os.geteuid():
            parent.chmod(parent.stat().st_mode | 0o001)


def stack_env(home: Path) -> dict[str, str]:
    """This process's environment with the stack's settings (`stack.env`) over it."""
    env = {**os.environ, "FLYWHEEL_HOME": str(home)}
    for line in (home / "stack" / "stack.env").read_text().splitlines():
        key, _, value = line.partition("=")
        env[key] = value
    return env


def stack(
    verb: str, home: Path, module: str = "deploy.stack", args: list[str] | None = None
) -> str:
    """Run `python -m deploy.stack <verb> [args]` (or the same verb of another `module`: the
    stack with its runs on a host of their own, tests/deploy/runs_host.py); its output (the test
    fails on a non-zero exit)."""
    env = {**os.environ, "FLYWHEEL_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", module, verb, *(args or [])],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"stack {verb} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def crash(home: Path) -> int:
    """SIGKILL every process of the stack under `home` at once, as a power cut would end them:
    supervisord, its services and whatever they started. How many."""
    import psutil

    from deploy.stack.stack import Stack

    supervisor = Stack.of_home(home).supervisor
    supervisord = int((supervisor.folder / "supervisord.pid").read_text())
    found = [psutil.Process(supervisord), *supervisor.processes()]
    for process in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(found, timeout=30)
    return len(found)
