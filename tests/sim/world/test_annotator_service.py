"""The simulated annotators as their own process: the days asked for are answered, a dead service
is reported with its log, and one started again answers the same, byte for byte."""

from __future__ import annotations

import json
import os
import signal
from datetime import date
from pathlib import Path

import pytest

from pipelines.lib.landing_zone import LocalLandingZone
from sim.world.annotator_service import AnnotatorProcess, AnnotatorServiceError, folder

# Two flights of 2013-01-01 from the source (carrier and number, origin).
FLIGHTS = ["2013-01-01_UA1545_EWR", "2013-01-01_AA1141_JFK"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLYWHEEL_ENV", "local")
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path))
    store = LocalLandingZone(root=str(tmp_path / "labeling" / "flights"))
    tasks = [{"data": {"task_id": f"T-{f}", "flight_id": f}, "meta": {}} for f in FLIGHTS]
    store.write_bytes("outbox/batch-1.json", json.dumps(tasks).encode())
    return tmp_path


def inbox(home: Path) -> dict[str, bytes]:
    root = home / "labeling" / "flights" / "inbox"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.json"))}


def test_the_service_answers_each_day_asked_for_once_its_tasks_are_due(home: Path) -> None:
    with AnnotatorProcess(home, home / "logs" / "annotators.log", timeout_s=120) as service:
        service.deliver(date(2013, 1, 1))  # the flights' own day: not due yet (a day's latency)
        assert inbox(home) == {}
        service.deliver(date(2013, 1, 2))
        answered = inbox(home)
    assert list(answered) == ["2013-01-02/batch-1.json"]
    items = json.loads(answered["2013-01-02/batch-1.json"])
    assert sorted(i["data"]["flight_id"] for i in items) == sorted(FLIGHTS)
    assert all(len(i["annotations"]) == 1 for i in items)
    assert service.process is not None and service.process.returncode == 0  # stopped cleanly


def test_a_killed_service_is_reported_and_one_started_again_answers_the_same(home: Path) -> None:
    log = home / "logs" / "annotators.log"
    with AnnotatorProcess(home, log, timeout_s=120) as service:
        service.deliver(date(2013, 1, 2))
        first = inbox(home)
        assert service.process is not None
        os.kill(service.process.pid, signal.SIGKILL)
        service.process.wait()
        with pytest.raises(AnnotatorServiceError, match=f"exited with status -9.*{log}"):
            service.deliver(date(2013, 1, 3))
    # Killed before it recorded the delivery: a new service delivers the day again.
    (folder(home) / "delivered.json").unlink()
    with AnnotatorProcess(home, log, timeout_s=120) as service:
        service.deliver(date(2013, 1, 2))
    assert inbox(home) == first
