"""Services killed during a retraining on the production-shaped stack.

The loop of tests/deploy/test_parity.py is played through the daemon (`sim run --daemon`): the
operator's bootstrap retraining on the fourth day, the weekly schedule's on the fifth. While it
plays, two services are SIGKILLed at chosen moments of those retrainings, and supervisord
restarts each:

- the object store, as the bootstrap's dataset step starts pushing its version to the DVC remote
  (the version's pointer file has just been written by `dvc add`; `dvc push` comes next);
- the MLflow server, as the scheduled retraining's challenger starts being logged (its parameters,
  the first thing `log_challenger` sends, have reached the server; metrics, the baselines' and
  the model's artifacts and the model's registration are still to come).

The simulation must then finish without a hand, as it would unharmed: each run once (the killed
ones retried), two dataset versions that an empty cache fetches from the remote, two registered
versions, each the one its retraining recorded, every MLflow run of the retrainings ended, and
no Dagster run left queued or in progress.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.deploy.stackctl import passable, stack, stack_env
from tests.deploy.test_parity import (
    BUDGET,
    inventory,
    simulation_args,
    summary,
    task_file,  # noqa: F401 (a fixture: the flagship task with a one-day cooldown)
)

REPO = Path(__file__).resolve().parents[2]
DATASET_STEP, TRAINING_STEP = "flights__training_dataset", "flights__challenger_model"

pytestmark = [
    pytest.mark.skipif(
        sys.platform != "linux", reason="the stack runs PostgreSQL from the distribution's packages"
    ),
    # One stack at a time under pytest-xdist (`make test`): each starts eight processes.
    pytest.mark.xdist_group("stack"),
    # A loop played with two retrainings: about ten minutes, for `make test-all`.
    pytest.mark.slow,
]


def retraining_runs(instance, statuses=None) -> list:
    """The instance's retraining runs, oldest first."""
    import dagster as dg

    filters = dg.RunsFilter(job_name="retraining_job", statuses=statuses or [])
    return [r.dagster_run for r in instance.get_run_records(filters, ascending=True)]


def in_step(instance, step: str, chosen: Callable[[object], bool]) -> str | None:
    """The id of a started retraining run that `chosen` accepts and that has begun `step`."""
    import dagster as dg

    for run in retraining_runs(instance, [dg.DagsterRunStatus.STARTED]):
        if not chosen(run):
            continue
        logs = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)
        if any(entry.step_key == step for entry in logs):
            return run.run_id
    return None


def step_finished(instance, run_id: str, step: str, by: float) -> bool:
    """Whether `step` of run `run_id` had succeeded by the time `by`."""
    import dagster as dg

    done = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
    return step in {entry.step_key for entry in done if entry.timestamp < by}


def poll(
    sim: subprocess.Popen, output: Path, found: Callable[[], object], what: str, every_s: float
) -> object:
    """Call `found` every `every_s` until it returns something; fail naming `what` after 20
    minutes, or if the simulation ends first."""
    deadline = time.monotonic() + 1200
    while (result := found()) is None:
        assert sim.poll() is None, f"the simulation ended before {what}:\n{output.read_text()}"
        assert time.monotonic() < deadline, f"no {what} in 20 minutes"
        time.sleep(every_s)
    return result


def kill(home: Path, service: str, group: bool = False) -> int:
    """SIGKILL a service of the stack (its whole process group if `group`); its pid."""
    from deploy.stack.stack import Stack

    pid = Stack.of_home(home).supervisor.pid(service)
    assert pid is not None, f"{service} is not running"
    if group:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGKILL)
    return pid


def restarted(home: Path, service: str, killed: int, timeout_s: float = 120) -> float:
    """Wait until supervisord runs `service` again in a new process; the seconds it took."""
    from deploy.stack.stack import Stack

    supervisor, began = Stack.of_home(home).supervisor, time.monotonic()
    while supervisor.pid(service) in (None, killed) or not supervisor.states([service])[
        service
    ].startswith("RUNNING"):
        assert time.monotonic() - began < timeout_s, supervisor.states([service])
        time.sleep(0.5)
    return time.monotonic() - began


def kill_the_object_store_during_the_push(home: Path, sim, output: Path) -> dict:
    """SIGKILL the object store once the bootstrap's dataset step has written its version's
    pointer (`dvc add` done, `dvc push` starting)."""
    import dagster as dg

    pointer = Path(stack_env(home)["FLYWHEEL_DVC_REPO"]) / "datasets" / "flights.dvc"
    with dg.DagsterInstance.get() as instance:
        run_id = poll(
            sim,
            output,
            lambda: in_step(instance, DATASET_STEP, lambda run: True),
            "retraining run in its dataset step",
            every_s=0.1,
        )
        before = pointer.stat().st_mtime_ns if pointer.exists() else None
        poll(
            sim,
            output,
            lambda: (pointer.exists() and pointer.stat().st_mtime_ns != before) or None,
            "dataset pointer written",
            every_s=0.01,
        )
        killed, at = kill(home, "s3"), time.time()
        pushed = step_finished(instance, run_id, DATASET_STEP, by=at)
    return {"run": run_id, "step_done": pushed, "restart_s": restarted(home, "s3", killed)}


def parent_run(client, run_id: str):
    """The MLflow run of the challenger trained by Dagster run `run_id` (not its trials')."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    found = client.search_runs(experiments, f"tags.`dagster.run_id` = '{run_id}'")
    parents = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    return parents[0] if parents else None


def kill_mlflow_while_logging(home: Path, sim, output: Path, bootstrap: str) -> dict:
    """SIGKILL the MLflow server once the next retraining's challenger has logged its
    parameters, the first of what `log_challenger` sends."""
    import dagster as dg
    from mlflow import MlflowClient

    client = MlflowClient(stack_env(home)["MLFLOW_TRACKING_URI"])
    with dg.DagsterInstance.get() as instance:
        root = {bootstrap}

        def later(run) -> bool:
            return run.run_id not in root and run.tags.get("dagster/root_run_id") not in root

        run_id = poll(
            sim,
            output,
            lambda: in_step(instance, TRAINING_STEP, later),
            "scheduled retraining in its training step",
            every_s=0.5,
        )

        def logging() -> object:
            parent = parent_run(client, run_id)
            return parent if parent is not None and parent.data.params else None

        parent = poll(sim, output, logging, "challenger's parameters in MLflow", every_s=0.1)
        # The server's worker is a child of `mlflow server`: the whole service goes, as a
        # crashed container would take it.
        killed, at = kill(home, "mlflow", group=True), time.time()
        logged = step_finished(instance, run_id, TRAINING_STEP, by=at)
    return {
        "run": run_id,
        "mlflow_run": parent.info.run_id,
        "step_done": logged,
        "restart_s": restarted(home, "mlflow", killed),
    }


def bootstrap_succeeded(home: Path, sim, output: Path) -> str:
    """The root id of the bootstrap retraining, once a run of it has succeeded."""
    import dagster as dg

    def done() -> str | None:
        with dg.DagsterInstance.get() as instance:
            for run in retraining_runs(instance, [dg.DagsterRunStatus.SUCCESS]):
                return run.tags.get("dagster/root_run_id", run.run_id)
        return None

    return poll(sim, output, done, "successful bootstrap retraining", every_s=2)


def mlflow_state(env: dict[str, str]) -> dict:
    """The retrainings' MLflow runs (not their trials') with their status and Dagster run, and
    the registered versions with their training runs."""
    from mlflow import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = [
        {
            "id": r.info.run_id,
            "status": r.info.status,
            "dagster_run": r.data.tags.get("dagster.run_id"),
        }
        for r in client.search_runs(experiments, "tags.`dagster.run_id` != ''", max_results=1000)
        if "mlflow.parentRunId" not in r.data.tags
    ]
    versions = {
        v.version: v.run_id for v in client.search_model_versions("name = 'flywheel-flights'")
    }
    return {"runs": runs, "versions": versions}


def dagster_state() -> dict:
    """Every run's job, status, retry tags; and the challengers' materializations."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        records = instance.get_run_records(dg.RunsFilter(), ascending=True)
        runs = [
            {
                "id": r.dagster_run.run_id,
                "job": r.dagster_run.job_name,
                "status": r.dagster_run.status.value,
                "parent": r.dagster_run.tags.get("dagster/parent_run_id"),
            }
            for r in records
        ]
        challengers = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["flights", "challenger_model"])),
            limit=100,
            ascending=True,
        ).records
        recorded = [
            {
                k: str(c.asset_materialization.metadata[k].value)
                for k in ("registered_model_version", "mlflow_run_id")
            }
            for c in challengers
        ]
    return {"runs": runs, "challengers": recorded}


@pytest.fixture(scope="module")
def played(tmp_path_factory, task_file: Path) -> Iterator[dict]:  # noqa: F811
    """The loop played through a stack with the two kills; what it left."""
    home = tmp_path_factory.mktemp("stack")
    passable(home)
    output = home / "sim-run.out"
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**BUDGET, "FLYWHEEL_TASK": str(task_file)}.items():
            patch.setenv(key, value)
        try:
            stack("up", home)
            env = stack_env(home)
            for key, value in env.items():  # this process reads the stack's instance too
                patch.setenv(key, value)
            with output.open("w") as out:
                sim = subprocess.Popen(
                    [sys.executable, "-m", *simulation_args("--daemon")],
                    cwd=REPO,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            try:
                push = kill_the_object_store_during_the_push(home, sim, output)
                bootstrap = bootstrap_succeeded(home, sim, output)
                logging = kill_mlflow_while_logging(home, sim, output, bootstrap)
                returncode = sim.wait(timeout=1500)
            finally:
                if sim.poll() is None:
                    sim.kill()
                    sim.wait()
            assert returncode == 0, f"sim run failed:\n{output.read_text()}"
            yield {
                "push": push,
                "logging": logging,
                "loop": summary(env),
                "stores": inventory(env, home / "inventory"),
                "mlflow": mlflow_state(env),
                "dagster": dagster_state(),
            }
        finally:
            stack("down", home)


def assert_converged(dagster: dict) -> None:
    """No run is left queued or in progress, and every failed run was retried."""
    runs = dagster["runs"]
    assert not [r for r in runs if r["status"] in ("QUEUED", "NOT_STARTED", "STARTING", "STARTED")]
    parents = {r["parent"] for r in runs}
    assert not [r for r in runs if r["status"] == "FAILURE" and r["id"] not in parents], runs


def assert_each_run_once(loop: dict) -> None:
    """Each run of the loop (job, partition, what asked for it, its run key) succeeded once, and
    the two retrainings are the operator's bootstrap and the weekly schedule's."""
    keys = [tuple(map(str, run)) for run in loop["runs"]]
    assert len(keys) == len(set(keys)), keys
    origins = [origin for job, _, origin, _ in loop["runs"] if job == "retraining_job"]
    assert origins == ["operator:bootstrap", "retraining_schedule"]


def test_the_object_store_killed_during_a_dvc_push_is_restarted_and_the_retraining_completes(
    played: dict,
):
    push = played["push"]
    assert not push["step_done"], "the object store was killed after the push had finished"
    assert_converged(played["dagster"])
    assert_each_run_once(played["loop"])
    # Both dataset versions, each fetched from the remote into an empty cache, every split in it.
    datasets = played["loop"]["datasets"]
    assert len(datasets) == 2 and len({dvc_hash for dvc_hash, _ in datasets}) == 2
    fetched = played["stores"]["datasets"]
    assert set(fetched) == {dvc_hash for dvc_hash, _ in datasets}
    for files in fetched.values():
        assert set(files) == {"train.parquet", "validation.parquet", "test.parquet"}
        assert all(size > 0 for size in files.values())


def test_the_mlflow_server_killed_while_a_retraining_logs_is_restarted_and_nothing_doubles(
    played: dict,
):
    logging = played["logging"]
    assert not logging["step_done"], "MLflow was killed after the challenger was logged"
    assert_converged(played["dagster"])
    assert_each_run_once(played["loop"])
    mlflow, challengers = played["mlflow"], played["dagster"]["challengers"]
    # One registered version per challenger materialized, the version it recorded, trained in
    # the MLflow run it recorded; the two decisions are on those versions.
    assert [c["registered_model_version"] for c in challengers] == ["1", "2"]
    assert mlflow["versions"] == {
        c["registered_model_version"]: c["mlflow_run_id"] for c in challengers
    }
    assert [version for version, _, _ in played["loop"]["decisions"]] == ["1", "2"]
    assert sorted(played["stores"]["models"]) == ["1", "2"]
    # No MLflow run of a retraining left running: the killed attempt's, if it failed, is ended.
    assert not [r for r in mlflow["runs"] if r["status"] == "RUNNING"], mlflow["runs"]
    finished = {r["id"] for r in mlflow["runs"] if r["status"] == "FINISHED"}
    assert {c["mlflow_run_id"] for c in challengers} <= finished
