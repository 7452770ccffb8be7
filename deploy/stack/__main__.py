"""`python -m deploy.stack up|down|status`: the production-shaped stack on this machine."""

from __future__ import annotations

import argparse
import sys

from deploy.stack.processes import StackError
from deploy.stack.stack import Stack


def main(argv: list[str] | None = None, stack: Stack | None = None) -> int:
    """Start, stop or show `stack` (default: the one under $FLYWHEEL_HOME/stack)."""
    from pipelines.settings import flywheel_home

    parser = argparse.ArgumentParser(prog="python -m deploy.stack", description=__doc__)
    parser.add_argument("verb", choices=("up", "down", "status"))
    args = parser.parse_args(argv)
    stack = stack or Stack.of_home(flywheel_home())
    try:
        if args.verb == "up":
            stack.up()
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
