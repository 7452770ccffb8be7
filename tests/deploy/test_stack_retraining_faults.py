"""Services and a run's process killed during a retraining on the production-shaped stack.

The loop of tests/deploy/test_parity.py is played through the daemon (`sim run --daemon`): the
operator's bootstrap retraining on the fourth day, the weekly schedule's on the fifth. While it
plays, three processes are SIGKILLed at chosen moments of those retrainings:

- the object store, as the bootstrap's dataset step starts pushing its version to the DVC remote
  (the version's pointer file has just been written by `dvc add`; `dvc push` comes next);
- the bootstrap's own run process (the run worker the code server started), once that dataset
  step has succeeded and its training step is inside a tuning trial (the trial RUNNING in
  Optuna's storage; the challenger not yet fit, logged or registered);
- the MLflow server, as the scheduled retraining's challenger starts being logged (its parameters,
  the first thing `log_challenger` sends, have reached the server; metrics, the baselines' and
  the model's artifacts and the model's registration are still to come).

supervisord restarts the two services; the killed run is failed by the code server that started
it and retried by the daemon. The run's kill comes after the object store's fault is over (its
step succeeded) and in another retraining than MLflow's, so each fault's outcome is its own.

The simulation must then finish without a hand, as it would unharmed: each run once (the killed
ones retried), two dataset versions that an empty cache fetches from the remote, two registered
versions, each the one its retraining recorded, every MLflow run of the retrainings ended, no
tuning trial left running, and no Dagster run left queued or in progress.
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

from tests.deploy.retraining_state import (
    alive,
    dagster_state,
    mlflow_state,
    parent_run,
    run_messages,
    study_storage,
    trials,
    tuning_state,
)
from tests.deploy.stackctl import passable, stack, stack_env
from tests.deploy.test_parity import (
    BUDGET,
    inventory,
    simulation_args,
    summary,
    task_file,  # noqa: F401 (a fixture: the flagship task with a one-day cooldown)
)
from tests.deploy.test_stack import run_pids

REPO = Path(__file__).resolve().parents[2]
DATASET_STEP, TRAINING_STEP = "flights__training_dataset", "flights__challenger_model"

pytestmark = [
    pytest.mark.skipif(
        sys.platform != "linux", reason="the stack runs PostgreSQL from the distribution's packages"
    ),
    # One stack at a time under pytest-xdist (`make test`): each starts eight processes.
    pytest.mark.xdist_group("stack"),
    # A loop played with two retrainings, one of them twice: minutes, for `make test-all`.
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


def kill_the_run_in_a_trial(home: Path, sim, output: Path, run_id: str) -> dict:
    """SIGKILL the process of retraining run `run_id` once its dataset step has succeeded and
    its training step is inside a tuning trial (RUNNING in Optuna's storage)."""
    import dagster as dg
    import psutil

    storage = study_storage(stack_env(home))
    with dg.DagsterInstance.get() as instance:

        def training() -> str | None:
            status = instance.get_run_by_id(run_id).status
            assert status == dg.DagsterRunStatus.STARTED, f"the run ended {status} untrained"
            return in_step(instance, TRAINING_STEP, lambda run: run.run_id == run_id)

        poll(sim, output, training, "bootstrap retraining in its training step", every_s=0.5)
        running = poll(
            sim,
            output,
            lambda: trials(storage, ("RUNNING",)) or None,
            "tuning trial running",
            every_s=0.1,
        )
        (pid,) = run_pids(instance, run_id)
        # Whatever the run's process started (a tuning worker, a data loader) is to end with it.
        children = psutil.Process(pid).children(recursive=True)
        os.kill(pid, signal.SIGKILL)
        at = time.time()
        trained = step_finished(instance, run_id, TRAINING_STEP, by=at)
        pushed = step_finished(instance, run_id, DATASET_STEP, by=at)
    return {
        "run": run_id,
        "children": children,
        "step_done": trained,
        "dataset_done": pushed,
        # Read after the kill: a trial the dead process held stays RUNNING until it is failed.
        "trials_held": [t for t in trials(storage, ("RUNNING",)) if t in running],
    }


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


@pytest.fixture(scope="module")
def played(tmp_path_factory, task_file: Path) -> Iterator[dict]:  # noqa: F811
    """The loop played through a stack with the three kills; what it left."""
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
                run = kill_the_run_in_a_trial(home, sim, output, push["run"])
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
                "run": {**run, "log": run_messages(run["run"])},
                "logging": logging,
                "loop": summary(env),
                "stores": inventory(env, home / "inventory"),
                "mlflow": mlflow_state(env),
                "dagster": dagster_state(),
                "tuning": tuning_state(env),
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


def test_the_retraining_run_killed_in_a_trial_is_failed_retried_and_registers_once(played: dict):
    killed = played["run"]
    assert killed["dataset_done"], "the run was killed before the object store's fault was over"
    assert not killed["step_done"], "the run was killed after the challenger was trained"
    assert killed["trials_held"], "the trial had ended before the run was killed"
    assert_converged(played["dagster"])
    assert_each_run_once(played["loop"])
    # Failed (the code server that started the run's process saw it die), then retried once by
    # the daemon, and the retry completed the bootstrap.
    runs = {r["id"]: r for r in played["dagster"]["runs"]}
    assert runs[killed["run"]]["status"] == "FAILURE"
    retries = [r["status"] for r in runs.values() if r["parent"] == killed["run"]]
    assert retries == ["SUCCESS"]
    # What an operator reads in the killed run's log: the code server's word that the run's
    # process, named, was ended by SIGKILL.
    crashed = f"Run execution process for {killed['run']} was terminated by signal 9 (SIGKILL)"
    assert [m for m in killed["log"] if crashed in m], killed["log"]
    # One registered version per challenger materialized: the killed attempt registered none.
    mlflow, challengers = played["mlflow"], played["dagster"]["challengers"]
    assert [c["registered_model_version"] for c in challengers] == ["1", "2"]
    assert mlflow["versions"] == {
        c["registered_model_version"]: c["mlflow_run_id"] for c in challengers
    }
    # The killed attempt's MLflow run, which its process could not end, was ended by its retry.
    statuses = [r["status"] for r in mlflow["runs"] if r["dagster_run"] == killed["run"]]
    assert statuses == ["KILLED"], mlflow["runs"]
    # No trial left running or waiting; the held one failed and was run again, and each study
    # completed its budget exactly.
    budget = int(BUDGET["FLYWHEEL_TRIALS"])
    tuning = played["tuning"]
    assert len(tuning) == 2, tuning
    for states in tuning.values():
        assert set(states) <= {"COMPLETE", "PRUNED", "FAIL"}, tuning
        assert states.get("COMPLETE", 0) + states.get("PRUNED", 0) == budget, tuning
    for study, _, _ in killed["trials_held"]:
        assert tuning[study].get("FAIL") == 1, tuning
    # Nothing the run's process had started outlived it.
    assert not [p.pid for p in killed["children"] if alive(p)]
