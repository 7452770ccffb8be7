"""`python -m deploy.stack up|down|status`: the production-shaped stack on this machine.

`python -m deploy.stack add-user NAME --role viewer|operator` adds an identity to the Dagster
UI's login and prints its password once: a viewer sees everything and launches nothing, an
operator launches runs, re-executes and turns sensors and schedules on and off."""

from __future__ import annotations

import argparse
import sys

from deploy.stack import proxy
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
    parser.add_argument("verb", choices=("up", "down", "status", "add-user"))
    parser.add_argument("name", nargs="?", help="add-user: the identity's name")
    parser.add_argument("--role", choices=proxy.ROLES, default="viewer", help="add-user's role")
    args = parser.parse_args(argv)
    if args.verb == "add-user" and not args.name:
        parser.error("add-user needs a NAME")
    stack = stack or Stack.of_home(flywheel_home())
    try:
        if args.verb == "up":
            stack.up()
        elif args.verb == "add-user":
            password = stack.add_user(args.name, args.role)
            print(f"{args.name} ({args.role}) may log in to the Dagster UI with: {password}")
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
