"""A run writes only to the empty folders the Helm values give every run's pod
(deploy/helm/values.yaml: the run launcher's `security_context`, `volumes` and `volume_mounts`).

The simulation plays its first days in a mount namespace of its own, as a run's pod would run
them (tests/deploy/test_read_only_root.py builds it): the machine's root read-only, a fresh tmpfs
at each `emptyDir` mount path of the run launcher, the pod's environment (the image's variables
and the `flywheel-env` ConfigMap's, its services replaced by the embedded defaults). The days
land, the daily runs ingest them and build the dbt models, and the first model is trained: its
dataset written through DVC, a small tuning and training, its evaluation and the gate. Dagster's
storage, PostgreSQL in a pod's world, is SQLite in a folder outside the namespace.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy import test_read_only_root as read_only_root

# A mount namespace needs root and unshare on Linux.
pytestmark = read_only_root.pytestmark
REPO, VALUES = read_only_root.REPO, read_only_root.VALUES
# The first model after five days, on one validation day and one test day: one trial of one
# epoch, one network.
PLAY = [
    "run", "--days", "6", "--bootstrap-days", "5", "--validation-days", "1", "--test-days", "1",
    "--trials", "1", "--max-epochs", "1", "--members", "1", "--policy", "static",
    "--no-baselines", "--brief",
]  # fmt: skip


def run_writable_paths() -> list[str]:
    """The mount paths of the emptyDir volumes the run launcher gives every run's pod."""
    values = yaml.safe_load(VALUES.read_text())
    launcher = values["runLauncher"]["config"]["customRunLauncher"]["config"]
    assert launcher["security_context"]["readOnlyRootFilesystem"] is True
    empty = {v["name"] for v in launcher["volumes"] if "emptyDir" in v}
    return [m["mountPath"] for m in launcher["volume_mounts"] if m["name"] in empty]


def play(tmp_path: Path, writable: list[str], unset: str | None = None) -> tuple[int, str]:
    """Play the days as a run's pod with the empty folders `writable` (and without the pod's
    variable `unset`): the exit status and the output."""
    # Dagster's storage and the output: a folder outside the namespace's read-only root.
    folder = Path("/dev/shm") / f"flywheel-ro-run-{os.getpid()}-{tmp_path.name}"
    (folder / "storage").mkdir(parents=True)
    env = read_only_root.pod_environment()
    env.pop(unset or "", None)
    command = [sys.executable, "-m", "sim", *PLAY]
    text = read_only_root.script(
        writable, "/opt/dagster/dagster_home", command, folder / "storage", True
    )
    try:
        done = subprocess.run(
            ["unshare", "--mount", "bash", "-c", text], cwd=REPO, env=env, timeout=1200
        )
        return done.returncode, (folder / f"{Path(command[0]).name}.log").read_text()
    finally:
        shutil.rmtree(folder)


@pytest.mark.integration
@pytest.mark.slow
def test_a_run_trains_and_evaluates_on_a_read_only_root_with_the_values_empty_folders(tmp_path):
    writable = run_writable_paths()
    assert writable == ["/tmp", read_only_root.image_environment()["FLYWHEEL_HOME"]]
    status, output = play(tmp_path, writable)
    assert status == 0, output[-5000:]
    # Each day ingested and built by dbt; the first model trained, evaluated and gated.
    assert output.count("daily_warehouse") == 6, output
    assert "dimension_warehouse" in output
    assert re.search(r"retraining \d+s -> version 1 \w+: ", output), output


@pytest.mark.integration
@pytest.mark.parametrize(
    ("writable", "unset", "where"),
    [
        (["/tmp"], None, "'/var/lib/flywheel'"),
        (None, "DBT_TARGET_PATH", f"'{REPO}/dbt_project/target/"),
    ],
    ids=["without-the-state-folder", "without-dbt-target-path"],
)
def test_a_run_without_an_empty_folder_or_its_setting_fails_on_the_read_only_root(
    tmp_path, writable, unset, where
):
    """Without the state folder's empty folder, or without the ConfigMap's DBT_TARGET_PATH (dbt
    then writes into the project, in the image), the same play fails writing there: the play
    above ran on a root it could not write."""
    status, output = play(tmp_path, writable or run_writable_paths(), unset)
    assert status != 0
    assert f"Read-only file system: {where}" in output, output[-3000:]
