"""Start a command as in a pod of its own: run by `unshare --mount` (in the network namespace
`ip netns exec` put it in), it hides the stack's state folder under an empty file system, puts
back only the files a pod would have mounted (the instance's `dagster.yaml`, the certificate
authority), and starts the command in an empty working directory with an empty home and
temporary folder.

    python tests/deploy/pod.py --hide <folder> [--hide <folder>...] [--keep <file>...] -- <command>

A script of its own, importing nothing of the project: it runs before the command, in the new
mount namespace, and replaces itself with the command (same pid: supervisord's).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hide", action="append", default=[], type=Path)
    parser.add_argument("--keep", action="append", default=[], type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or not args.hide:
        parser.error("a folder to hide and a command are needed")
    kept = {path: path.read_bytes() for path in args.keep}
    for folder in args.hide:
        if folder.is_dir():
            mount = ["mount", "-t", "tmpfs", "-o", "mode=0755", "pod", str(folder)]
            subprocess.run(mount, check=True)
    for path, content in kept.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    own = args.hide[0] / ".pod"
    for name in ("work", "home", "tmp"):
        (own / name).mkdir(parents=True, exist_ok=True)
    os.chdir(own / "work")
    os.environ.update({"HOME": str(own / "home"), "TMPDIR": str(own / "tmp")})
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
