"""The restore drill: a stack backed up while it runs (`python -m deploy.stack backup`), restored
into a new FLYWHEEL_HOME (`restore`) and started there (`up`), holds the state of the backup's
point and plays on from it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from deploy.stack import s3
from sim.world.nycflights import load
from tests.deploy.stackctl import passable, stack, stack_env
from tests.deploy.test_stack import (
    BIN,
    day_counts,
    dimensions_loaded,
    land,
    runs,
    settled,
    succeeded,
    wait_for,
)

pytestmark = [
    pytest.mark.skipif(
        sys.platform != "linux", reason="the stack runs PostgreSQL from the distribution's packages"
    ),
    # One stack at a time under pytest-xdist (`make test`); this test starts two, one after the
    # other.
    pytest.mark.xdist_group("stack"),
]

DAYS = ("2013-01-02", "2013-01-03")
AFTER = "2013-01-04"  # landed after the backup
MODEL = "restore-drill"


@contextmanager
def settings_of(home: Path) -> Iterator[dict[str, str]]:
    """The stack's settings under `home`, set in this process while in the block (its Dagster
    instance, warehouse and MLflow server are read through them)."""
    values = stack_env(home)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in values.items():
            patch.setenv(key, value)
        yield values


def state() -> dict:
    """What the restored stack must hold as the original did at the backup: the warehouse's
    raw flights per day, the runs with their statuses, the landing sensor's status and cursor,
    and the version the `champion` alias points at."""
    import dagster as dg
    from dagster._core.scheduler.instigation import InstigatorType
    from mlflow import MlflowClient

    with dg.DagsterInstance.get() as instance:
        sensors = [
            (s.status.value, s.instigator_data.cursor)
            for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
            if s.instigator_name == "landing_sensor"
        ]
    return {
        "days": day_counts(),
        "runs": {
            r["id"]: (r["job"], r["tags"].get("dagster/partition"), r["status"]) for r in runs()
        },
        "sensor": sensors,
        "champion": MlflowClient().get_model_version_by_alias(MODEL, "champion").version,
    }


def loaded(*days: str):
    """Whether the dimension tables and each of `days` were loaded, and no run is left going."""
    return lambda seen: (
        dimensions_loaded(seen) and all(succeeded(day)(seen) for day in days) and settled(seen)
    )


def register_champion() -> None:
    """A run with a file in its artifacts, registered as a version of `MODEL` that the alias
    `champion` points at (as the runs' MLflow user, whose settings are set)."""
    from mlflow import MlflowClient

    client = MlflowClient()
    run = client.create_run(client.create_experiment(MODEL)).info
    client.log_text(run.run_id, "kept", "model/probe.txt")
    client.set_terminated(run.run_id)
    client.create_registered_model(MODEL)
    version = client.create_model_version(MODEL, f"{run.artifact_uri}/model", run.run_id)
    client.set_registered_model_alias(MODEL, "champion", version.version)


def test_a_stack_backed_up_while_it_runs_is_restored_in_a_new_home_and_plays_on(
    tmp_path_factory, tmp_path: Path
):
    import mlflow

    original, restored = tmp_path_factory.mktemp("original"), tmp_path_factory.mktemp("restored")
    backup = tmp_path_factory.mktemp("backups") / "drill"
    for home in (original, restored):
        passable(home)
    try:
        stack("up", original)
        with settings_of(original) as values:
            workspace = str(original / "stack" / "workspace.yaml")
            subprocess.run(
                [str(BIN / "dagster"), "sensor", "start", "landing_sensor", "-w", workspace],
                env=values,
                capture_output=True,
                check=True,
            )
            land(values, DAYS[0], days=len(DAYS))
            wait_for(loaded(*DAYS), timeout_s=600)
            register_champion()
            taken = state()
        print(stack("backup", original, args=[str(backup)]))
        with settings_of(original) as values:
            land(values, AFTER)  # into the original's bucket after the backup's point
        stack("down", original)

        print(stack("restore", restored, args=[str(backup)]))
        print(stack("up", restored))
        with settings_of(restored) as values:
            assert state() == taken
            assert AFTER not in taken["days"] and set(DAYS) <= set(taken["days"])
            listed = s3.client(values).list_objects_v2(Bucket="flywheel", Prefix="landing/")
            keys = [item["Key"] for item in listed["Contents"]]
            assert any(DAYS[0] in key for key in keys) and not [k for k in keys if AFTER in k]
            downloaded = mlflow.artifacts.download_artifacts(
                f"models:/{MODEL}@champion", dst_path=str(tmp_path)
            )
            assert (Path(downloaded) / "probe.txt").read_text() == "kept"
            # The restored sensor takes the next day, once, and none of the days before again.
            land(values, AFTER)
            seen = wait_for(loaded(AFTER), timeout_s=300)
            expected = len(load().day("flights", AFTER))
            assert day_counts() == {**taken["days"], AFTER: (expected, expected)}
        new = [r for r in seen if r["id"] not in taken["runs"]]
        assert {r["tags"].get("dagster/partition") for r in new} == {AFTER}, new
    finally:
        for home in (restored, original):
            if (home / "stack" / "stack.env").exists():
                stack("down", home)
