"""The production lock's SBOM, and how its vulnerability scan is judged (deploy/supply_chain.py)."""

from __future__ import annotations

import json
import re
from datetime import date

import pytest

from deploy.supply_chain import LOCK, TORCH, WAIVERS, Waiver, judge, read_waivers, sbom

TODAY = date(2026, 11, 29)


def _report(*packages: dict) -> dict:
    return {"dependencies": list(packages), "fixes": []}


def _vuln(id_: str, *aliases: str) -> dict:
    return {"id": id_, "aliases": list(aliases), "fix_versions": ["9.9"], "description": ""}


def test_a_finding_fails_the_audit_unless_waived_in_writing() -> None:
    found = _report(
        {"name": "jinja2", "version": "3.0", "vulns": [_vuln("GHSA-a", "CVE-1")]},
        {"name": "yarl", "version": "1.0", "vulns": []},
    )
    status, lines = judge(found, {}, TODAY)
    assert status == 1 and lines == ["FINDING: jinja2 3.0: GHSA-a (fixed in 9.9)"]
    # Waived by an alias, with its reason: a pass that prints the waiver.
    waived = {"CVE-1": Waiver("CVE-1", "not reachable from the loop", None)}
    status, lines = judge(found, waived, TODAY)
    assert status == 0 and lines[0] == "waived: jinja2 3.0: GHSA-a (not reachable from the loop)"
    # A waiver past its date is a finding again.
    expired = {"GHSA-a": Waiver("GHSA-a", "until the upgrade", date(2026, 11, 1))}
    status, lines = judge(found, expired, TODAY)
    assert status == 1 and "its waiver expired on 2026-11-01" in lines[0]


def test_a_package_the_service_did_not_answer_for_is_not_a_pass() -> None:
    unanswered = _report(
        {"name": "agate", "version": "1.9.1", "skip_reason": "Dependency not found on PyPI"},
        {"name": "yarl", "version": "1.0", "vulns": []},
    )
    status, lines = judge(unanswered, {"GHSA-z": Waiver("GHSA-z", "old", None)}, TODAY)
    assert status == 2
    assert lines[0].startswith("not audited: the vulnerability service answered for 1 of 2")
    assert lines[1] == "unused waiver: GHSA-z (no such finding now)"


def test_a_waiver_needs_a_reason(tmp_path) -> None:
    path = tmp_path / "waivers.toml"
    path.write_text('[[waiver]]\nid = "GHSA-a"\nreason = "   "\n')
    with pytest.raises(ValueError, match="waiver 1 needs both an id and a reason"):
        read_waivers(path)
    path.write_text('[[waiver]]\nid = "GHSA-a"\nreason = "why"\nuntil = 2027-01-31\n')
    assert read_waivers(path) == {"GHSA-a": Waiver("GHSA-a", "why", date(2027, 1, 31))}
    path.write_text('[[waiver]]\nid = "GHSA-a"\nreason = "why"\nuntil = "2027-01-31"\n')
    with pytest.raises(ValueError, match="until must be a date"):
        read_waivers(path)
    assert read_waivers(WAIVERS) == {}  # the project's own: none


def test_the_sbom_lists_every_locked_package_with_its_hashes_and_torch(tmp_path) -> None:
    out = tmp_path / "sbom.cdx.json"
    sbom(LOCK, out)
    document = json.loads(out.read_text())
    assert document["bomFormat"] == "CycloneDX"
    components = {c["name"].lower(): c for c in document["components"]}
    locked = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\", LOCK.read_text(), re.M))
    assert len(locked) > 200
    for name, version in locked.items():
        component = components[name.lower()]
        assert component["purl"] == f"pkg:pypi/{name.lower()}@{version}"
        hashes = [h for ref in component["externalReferences"] for h in ref.get("hashes", [])]
        assert hashes and all(h["alg"] == "SHA-256" for h in hashes), name
    assert components["torch"]["version"] == TORCH.split("==")[1]
