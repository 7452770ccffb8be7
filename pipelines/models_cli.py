"""`flywheel-models`: list the registered model versions and roll the champion back.

    flywheel-models list                 every version, its decision and reason; * = champion
    flywheel-models rollback             the champion before the current one takes over again
    flywheel-models rollback --to 3      version 3 becomes the champion

The next scoring run uses the champion the alias names; monitoring compares with its
training profile.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pipelines.lib.errors import ConfigurationError
from pipelines.lib.registry import NoChampionError, champion, registered_name, rollback, versions
from pipelines.lib.tracking import MlflowTracker, tracker_resource
from pipelines.settings import current_env, flywheel_home
from pipelines.task import task_name


def build_parser() -> argparse.ArgumentParser:
    """The command line: `list` and `rollback`."""
    parser = argparse.ArgumentParser(
        prog="flywheel-models", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--task", default=None)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="every registered version and its decision")
    back = commands.add_parser("rollback", help="point the champion alias to an earlier version")
    back.add_argument("--to", type=int, help="the version (default: the previous champion)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; 1 with a message on stderr when the registry or a setting says no."""
    args = build_parser().parse_args(argv)
    resource = tracker_resource(current_env(), flywheel_home())
    try:
        # Initialized, not just built: in prod the tracking URI is an EnvVar until then.
        with resource.process_config_and_initialize_cm() as tracker:
            return run(args, tracker)
    except (NoChampionError, ValueError, ConfigurationError) as e:
        print(f"flywheel-models: {e}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace, tracker: MlflowTracker) -> int:
    """List the versions of the task's model, or roll its champion back."""
    name = registered_name(args.task or task_name())
    if args.command == "rollback":
        restored = rollback(tracker, name, args.to)
        print(f"{name}: champion is now version {restored.version} ({restored.uri})")
        return 0
    current = champion(tracker, name)
    for v in versions(tracker, name):
        mark = "*" if current and v.version == current.version else " "
        decision = v.tags.get("flywheel.decision", "undecided")
        print(f"{mark} {v.version:>4}  {decision:<9} {v.tags.get('flywheel.reason', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
