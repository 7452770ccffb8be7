"""The champion alias: promotion records, and the one-command rollback."""

from __future__ import annotations

import pytest

from pipelines.lib.registry import champion, record_decision, rollback
from pipelines.lib.tracking import tracker_resource
from pipelines.models_cli import main

NAME = "flywheel-flights"


@pytest.fixture
def tracker(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path))
    monkeypatch.setenv("FLYWHEEL_ENV", "local")
    tracker = tracker_resource("local", tmp_path)
    client = tracker.client()
    experiment = tracker.experiment_id()
    client.create_registered_model(NAME)
    for _ in range(3):
        run = client.create_run(experiment)
        client.create_model_version(NAME, f"runs:/{run.info.run_id}/model", run.info.run_id)
    return tracker


def test_promotions_move_the_alias_and_record_the_previous_champion(tracker) -> None:
    assert champion(tracker, NAME) is None
    assert record_decision(tracker, NAME, 1, "promoted", "beats the floor", promote=True) is None
    previous = record_decision(tracker, NAME, 2, "promoted", "better", promote=True)
    assert previous is not None and previous.version == 1
    record_decision(tracker, NAME, 3, "rejected", "worse on a slice", promote=False)
    current = champion(tracker, NAME)
    assert current.version == 2
    assert current.tags["flywheel.previous_champion"] == "1"
    rejected = tracker.client().get_model_version(NAME, "3")
    assert rejected.tags["flywheel.decision"] == "rejected"
    assert rejected.tags["flywheel.reason"] == "worse on a slice"


def test_rollback_command_restores_the_previous_champion(tracker, capsys) -> None:
    record_decision(tracker, NAME, 1, "promoted", "first", promote=True)
    record_decision(tracker, NAME, 2, "promoted", "second", promote=True)
    assert main(["rollback"]) == 0
    assert "champion is now version 1" in capsys.readouterr().out
    assert champion(tracker, NAME).version == 1
    assert tracker.client().get_model_version(NAME, "1").tags["flywheel.decision"] == "rollback"
    assert main(["rollback", "--to", "2"]) == 0
    assert champion(tracker, NAME).version == 2
    capsys.readouterr()
    assert main(["list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert len(listing) == 3 and listing[1].startswith("*    2") and "rollback" in listing[1]


def test_rollback_refuses_what_it_cannot_do(tracker, capsys) -> None:
    assert main(["rollback"]) == 1
    assert "has no champion" in capsys.readouterr().err
    record_decision(tracker, NAME, 1, "promoted", "first", promote=True)
    with pytest.raises(Exception, match="was the first champion"):
        rollback(tracker, NAME)
    assert main(["rollback", "--to", "9"]) == 1
    assert "has no version 9" in capsys.readouterr().err
    assert main(["rollback", "--to", "1"]) == 1
    assert "already the champion" in capsys.readouterr().err
