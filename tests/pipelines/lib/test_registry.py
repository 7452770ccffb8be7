"""The champion alias: promotion records, the one-command rollback, and models served only
while their stored files are those registered."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pipelines.lib.registry import (
    DIGEST_TAG,
    MODEL_FOLDER,
    ArtifactDigestError,
    _load_model,
    artifact_digest,
    champion,
    load_model,
    model_folder,
    record_decision,
    rollback,
    seal,
    serving_model,
)
from pipelines.lib.tracking import process_wide_store, tracker_resource
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


MODEL_CODE = """
from pathlib import Path

import mlflow
from mlflow.pyfunc import PythonModel


class Constant(PythonModel):
    def load_context(self, context):
        self.value = float(Path(context.artifacts["value"]).read_text())

    def predict(self, context, model_input, params=None):
        return [self.value] * len(model_input)


mlflow.models.set_model(Constant())
"""


@pytest.fixture
def sealed(tracker, tmp_path):
    """Three versions, each a model answering its own number, sealed as training seals them;
    version 1 promoted, then version 2 (whose previous champion is 1)."""
    import mlflow

    code = tmp_path / "constant_model.py"
    code.write_text(MODEL_CODE)
    name = "flywheel-constant"
    with process_wide_store(tracker.tracking_uri, tracker.registry_uri):
        for k in (1, 2, 3):
            value = tmp_path / f"value-{k}.txt"
            value.write_text(str(k))
            with mlflow.start_run(experiment_id=tracker.experiment_id()):
                mlflow.pyfunc.log_model(
                    name="model",
                    python_model=str(code),
                    artifacts={"value": str(value)},
                    registered_model_name=name,
                )
            seal(tracker, name, k)
    record_decision(tracker, name, 1, "promoted", "first", promote=True)
    record_decision(tracker, name, 2, "promoted", "second", promote=True)
    _load_model.cache_clear()  # each load below is a new process's first
    yield name
    _load_model.cache_clear()


def _stored_value_file(home: Path, version: int) -> Path:
    """The artifact store's own copy of a version's value file (under the local store's home)."""
    (found,) = (p for p in home.rglob(f"value-{version}.txt") if p.parent != home)
    return found


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_version_is_served_only_while_its_files_are_those_it_was_registered_with(
    tracker, sealed, tmp_path
) -> None:
    current = champion(tracker, sealed)
    assert len(current.tags[DIGEST_TAG]) == 64
    served, model, refused = serving_model(tracker, current)
    assert (served.version, model.predict([[0]]), refused) == (2, [2.0], [])

    _flip_a_byte(_stored_value_file(tmp_path, 2))
    _load_model.cache_clear()
    with pytest.raises(ArtifactDigestError, match=f"models:/{sealed}/2: .* not the .* recorded"):
        load_model(tracker, current)
    # Scoring refuses the tampered champion; the champion before it serves meanwhile.
    served, model, refused = serving_model(tracker, current)
    assert (served.version, model.predict([[0]])) == (1, [1.0])
    assert len(refused) == 1 and f"models:/{sealed}/2" in refused[0]
    # The alias is not moved by a refusal: the operator decides (a rollback, a retraining).
    assert champion(tracker, sealed).version == 2

    _flip_a_byte(_stored_value_file(tmp_path, 1))
    _load_model.cache_clear()
    with pytest.raises(ArtifactDigestError, match="nothing is scored"):
        serving_model(tracker, current)


def test_the_digest_covers_every_file_and_its_path(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"1")
    before = artifact_digest(tmp_path)
    (tmp_path / "a" / "x").rename(tmp_path / "x")
    moved = artifact_digest(tmp_path)
    (tmp_path / "y").write_bytes(b"")
    assert len({before, moved, artifact_digest(tmp_path)}) == 3


LOADER = """
import sys, time
from pipelines.lib.registry import champion, load_model
from pathlib import Path
from pipelines.lib.tracking import tracker_resource
tracker = tracker_resource("local", Path(sys.argv[1]))
print(load_model(tracker, champion(tracker, sys.argv[2])).predict([[0]])[0], flush=True)
if sys.argv[3] == "stay":
    time.sleep(600)
"""


@pytest.mark.integration
def test_a_loaded_models_files_go_with_the_process_that_loaded_them(
    tracker, sealed, tmp_path, monkeypatch
) -> None:
    """A process that ends removes the folder of the model it loaded; one that was killed
    leaves it, and the next load on the machine removes it."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    env = {**os.environ, "TMPDIR": str(temporary)}
    command = [sys.executable, "-c", LOADER, str(tmp_path), sealed]

    ended = subprocess.run([*command, "end"], env=env, capture_output=True, text=True)
    assert (ended.returncode, ended.stdout.strip()) == (0, "2.0"), ended.stderr
    assert list(temporary.iterdir()) == []

    staying = subprocess.Popen([*command, "stay"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert staying.stdout.readline().strip() == "2.0"
        (left,) = temporary.iterdir()
        assert left.name.startswith(f"{MODEL_FOLDER}{staying.pid}@")
    finally:
        staying.kill()
        staying.wait()
    assert left.exists()
    model_folder()  # the next load's folder, in this process
    (ours,) = temporary.iterdir()
    assert ours.name.startswith(f"{MODEL_FOLDER}{os.getpid()}@")
