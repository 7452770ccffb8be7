"""The production lock, checkable: its SBOM, and its vulnerability scan with written waivers.

    python -m deploy.supply_chain sbom    # build/sbom.cdx.json (CycloneDX 1.6, JSON), offline
    python -m deploy.supply_chain audit   # pip-audit over the lock; waivers in deploy/waivers.toml

The SBOM lists every package of `deploy/requirements.lock` with its version, purl and hashes,
and torch (the lock leaves it out: the image installs it from its own index). The audit asks a
vulnerability service (pip-audit's default, PyPI's) about every package of the lock and fails on
any finding not waived in writing: the services give no severity to rank by, so every finding
counts. A package the service could not look up fails the audit too: no answer is not a pass.
Exit status: 0 clean, 1 findings not waived (or a waiver without a reason), 2 not audited.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "deploy" / "requirements.lock"
WAIVERS = REPO / "deploy" / "waivers.toml"
SBOM = REPO / "build" / "sbom.cdx.json"
# The torch the lock leaves out; the Makefile and the Dockerfile pin the same.
TORCH = "torch==2.13.0"


@dataclass(frozen=True)
class Waiver:
    """A finding accepted in writing: its id (or an alias), why, and until when."""

    id: str
    reason: str
    until: date | None


def read_waivers(path: Path) -> dict[str, Waiver]:
    """The waivers of `path` (`[[waiver]]` tables: id, reason, optional until), by id. A waiver
    without a reason is an error: a finding is accepted in writing or not at all."""
    if not path.exists():
        return {}
    waivers = {}
    for k, entry in enumerate(tomllib.loads(path.read_text()).get("waiver", []), start=1):
        reason = str(entry.get("reason", "")).strip()
        if not entry.get("id") or not reason:
            raise ValueError(f"{path}: waiver {k} needs both an id and a reason: {entry}")
        until = entry.get("until")
        if until is not None and type(until) is not date:
            raise ValueError(f"{path}: waiver {k}'s until must be a date (2027-03-01): {until!r}")
        waivers[entry["id"]] = Waiver(entry["id"], reason, until)
    return waivers


def judge(report: dict, waivers: dict[str, Waiver], today: date) -> tuple[int, list[str]]:
    """The exit status and the lines to print for a pip-audit JSON `report`."""
    lines, unwaived = [], 0
    packages = report.get("dependencies", [])
    skipped = [p for p in packages if p.get("skip_reason")]
    if skipped:
        lines.append(
            f"not audited: the vulnerability service answered for {len(packages) - len(skipped)} "
            f"of {len(packages)} packages; first unanswered: {skipped[0]['skip_reason']}"
        )
    used = set()
    for package in packages:
        for vuln in package.get("vulns", []):
            ids = [vuln["id"], *vuln.get("aliases", [])]
            waiver = next((waivers[i] for i in ids if i in waivers), None)
            finding = f"{package['name']} {package['version']}: {vuln['id']}"
            fixed = ", ".join(vuln.get("fix_versions", [])) or "no fixed version"
            if waiver is not None and (waiver.until is None or today <= waiver.until):
                used.add(waiver.id)
                lines.append(f"waived: {finding} ({waiver.reason})")
            else:
                unwaived += 1
                expired = f", its waiver expired on {waiver.until}" if waiver else ""
                lines.append(f"FINDING: {finding} (fixed in {fixed}{expired})")
    lines += [f"unused waiver: {w} (no such finding now)" for w in sorted(set(waivers) - used)]
    status = 1 if unwaived else 2 if skipped else 0
    if status == 0:
        lines.append(f"audited {len(packages)} packages: no finding but those waived")
    return status, lines


def sbom(lock: Path, out: Path) -> None:
    """Write the CycloneDX SBOM of `lock` and torch to `out`."""
    with tempfile.TemporaryDirectory() as folder:
        requirements = Path(folder) / "requirements.txt"
        requirements.write_text(lock.read_text() + f"{TORCH}\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                *(_tool("cyclonedx-py"), "requirements", str(requirements)),
                *("--output-reproducible", "--of", "JSON", "-o", str(out)),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},  # the root's dependency graph
        )
    if done.returncode != 0:
        raise SystemExit(f"cyclonedx-py failed:\n{done.stdout}{done.stderr}")
    components = json.loads(out.read_text())["components"]
    print(f"{out}: {len(components)} packages")


def audit(lock: Path, waivers: Path) -> int:
    """Run pip-audit over `lock` and judge its findings against `waivers`."""
    accepted = read_waivers(waivers)
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "audit.json"
        done = subprocess.run(
            [
                *(_tool("pip-audit"), "-r", str(lock), "--disable-pip", "--require-hashes"),
                *("--progress-spinner", "off", "-f", "json", "-o", str(report)),
            ],
            capture_output=True,
            text=True,
        )
        if not report.exists():
            print(f"pip-audit failed:\n{done.stdout}{done.stderr}", file=sys.stderr)
            return 2
        status, lines = judge(json.loads(report.read_text()), accepted, date.today())
    print("\n".join(lines), file=sys.stderr if status else sys.stdout)
    return status


def _tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def main(argv: list[str] | None = None) -> int:
    """The command line: `sbom` and `audit`."""
    parser = argparse.ArgumentParser(prog="python -m deploy.supply_chain", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("sbom", help="write the CycloneDX SBOM of the lock")
    made.add_argument("--lock", type=Path, default=LOCK)
    made.add_argument("--out", type=Path, default=SBOM)
    scan = commands.add_parser("audit", help="scan the lock for known vulnerabilities")
    scan.add_argument("--lock", type=Path, default=LOCK)
    scan.add_argument("--waivers", type=Path, default=WAIVERS)
    args = parser.parse_args(argv)
    if args.command == "sbom":
        sbom(args.lock, args.out)
        return 0
    try:
        return audit(args.lock, args.waivers)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
