"""``python -m ml.tuning work SPEC WORKER``: the worker process ``ProcessLauncher`` starts."""

from __future__ import annotations

import argparse
from pathlib import Path

from ml.tuning.workers import worker_main


def main(argv: list[str] | None = None) -> None:
    """``python -m ml.tuning work SPEC WORKER``: the worker process ``ProcessLauncher`` starts."""
    parser = argparse.ArgumentParser(prog="python -m ml.tuning")
    commands = parser.add_subparsers(dest="command", required=True)
    work_parser = commands.add_parser("work", help="run queued trials of a study")
    work_parser.add_argument("spec", type=Path)
    work_parser.add_argument("worker", type=int)
    args = parser.parse_args(argv)
    worker_main(args.spec, args.worker)


if __name__ == "__main__":
    main()
