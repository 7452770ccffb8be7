"""`python -m deploy.stack up|down|status`: the production-shaped stack on this machine.

`python -m deploy.stack add-user NAME --role viewer|operator` adds an identity to the Dagster
UI's login and prints its password once: a viewer sees everything and launches nothing, an
operator launches runs, re-executes and turns sensors and schedules on and off.

`python -m deploy.stack backup DIR` takes the running stack's state at one point into DIR (the
PostgreSQL cluster, then the bucket, then the dataset repository and the settings);
`python -m deploy.stack restore DIR` puts it back into a FLYWHEEL_HOME with no stack in it, and
`up` starts it (deploy/stack/backup.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deploy.stack import backup, proxy
from deploy.stack.processes import StackError
from deploy.stack.stack import Stack


def main(argv: list[str] | None = None, stack: Stack | None = None) -> int:
    """Start, stop or show `stack` (default: the one under $FLYWHEEL_HOME/stack)."""
    from pipelines.settings import flywheel_home

    parser = argparse.ArgumentParser(
        prog="python -m deploy.stack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = ("up", "down", "status", "add-user", "backup", "restore")
    parser.add_argument("verb", choices=verbs)
    parser.add_argument(
        "name",
        nargs="?",
        metavar="NAME|DIR",
        help="add-user: the identity's name; backup and restore: the backup's folder",
    )
    parser.add_argument("--role", choices=proxy.ROLES, default="viewer", help="add-user's role")
    args = parser.parse_args(argv)
    if args.verb in ("add-user", "backup", "restore") and not args.name:
        parser.error(f"{args.verb} needs a {'NAME' if args.verb == 'add-user' else 'DIR'}")
    stack = stack or Stack.of_home(flywheel_home())
    try:
        if args.verb == "up":
            stack.up()
        elif args.verb == "add-user":
            password = stack.add_user(args.name, args.role)
            print(f"{args.name} ({args.role}) may log in to the Dagster UI with: {password}")
        elif args.verb == "backup":
            backup.backup(stack, Path(args.name).resolve())
        elif args.verb == "restore":
            backup.restore(stack.root, Path(args.name).resolve())
        elif args.verb == "down":
            stack.down()
        else:
            for name, state in stack.status().items():
                print(f"{name:<13} {state}")
    except StackError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
