"""Start a service of the stack once what an earlier start of it left behind is stopped.

A server killed on its own (SIGKILL, the OOM killer) can leave its workers running: MLflow's
server starts uvicorn as a child, which keeps the port, so every restart of the server failed
with "address already in use". supervisord names the service in the environment of each process
it starts, which their children inherit: a process so named, under the same supervisord, that is
still alive when the service starts again is a leftover, and is killed first.

    python -m deploy.stack.reap --service <name> --supervisor <url> -- <command>...
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import psutil

from deploy.stack.supervisor import supervised


def stop_leftovers(service: str, supervisor: str) -> list[int]:
    """Kill the leftovers of `service`; their pids."""
    found = supervised(supervisor, service)
    for process in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(found, timeout=10)
    return [process.pid for process in found]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m deploy.stack.reap", description=__doc__)
    parser.add_argument("--service", required=True)
    parser.add_argument("--supervisor", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command is needed")
    if stopped := stop_leftovers(args.service, args.supervisor):
        print(f"stopped {len(stopped)} leftover processes of {args.service}: {stopped}", flush=True)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
