"""Tuning fanned out over worker processes on one study in Optuna's RDB storage on PostgreSQL.

The budget is exact across workers (every trial is queued up front and claimed by one worker),
and a worker killed with SIGKILL mid-trial loses nothing: its trial's heartbeat stops, the trial
is failed once stale and queued again, and the other worker finishes the budget.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import psutil
import pytest
from optuna.trial import TrialState

from ml.config import ModelConfig, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES
from ml.tuning import WorkerError, create_study, tune
from tests.ml.conftest import REPO

ONE_EPOCH = TrainConfig(max_epochs=1, batch_size=512, early_stopping_patience=None)


@pytest.fixture(scope="module")
def datamodule(splits: dict[str, pd.DataFrame]) -> TabularDataModule:
    return TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=512)


def test_two_workers_finish_a_12_trial_budget_exactly(
    datamodule: TabularDataModule, study_config: TuneConfig
) -> None:
    seen: list[int] = []

    result = tune(
        datamodule, study_config, ModelConfig(), ONE_EPOCH, lambda _, t: seen.append(t.number)
    )

    trials = create_study(study_config, max_epochs=1).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 12
    assert sorted(t.number for t in trials) == list(range(12))
    assert {t.user_attrs["worker"] for t in trials} == {0, 1}  # both worked
    assert len({t.user_attrs["pid"] for t in trials}) == 2 and os.getpid() not in {
        t.user_attrs["pid"] for t in trials
    }
    assert (result.n_complete, result.workers_lost) == (12, [])
    assert sorted(seen) == list(range(12))  # the callback saw each trial once, here
    # The budget is spent: running the study again queues and runs nothing.
    assert tune(datamodule, study_config, ModelConfig(), ONE_EPOCH).n_complete == 12
    assert len(create_study(study_config, max_epochs=1).get_trials()) == 12


def kill_worker_mid_trial(
    config: TuneConfig, killed: list[tuple[int, int]], done: threading.Event
) -> None:
    """SIGKILL the process of the first worker seen training a trial (once), until `done`.

    Whichever worker it is: on a loaded machine one worker may start late and find the budget
    spent. The process is stopped first and the trial read again: a trial that finished between
    the first read and the signal is let go, so the kill always lands inside a trial. `killed`
    gets the trial's number and its worker.
    """
    study = create_study(config, max_epochs=1)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not done.is_set():
        trials = study.get_trials(states=(TrialState.RUNNING,))
        for trial in trials:
            # All six parameters suggested: the trial is training.
            if "worker" in trial.user_attrs and len(trial.params) == 6:
                pid = trial.user_attrs["pid"]
                os.kill(pid, signal.SIGSTOP)
                time.sleep(0.3)  # a write already sent reaches the storage
                running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if trial.number not in {t.number for t in running}:
                    os.kill(pid, signal.SIGCONT)
                    continue
                os.kill(pid, signal.SIGKILL)
                killed.append((trial.number, trial.user_attrs["worker"]))
                return
        time.sleep(0.2)


def test_a_worker_killed_mid_trial_loses_nothing(
    datamodule: TabularDataModule, study_config: TuneConfig
) -> None:
    config = replace(study_config, n_trials=4)
    # Trials long enough that the killer's poll always finds one training: these splits are
    # small, so a trial of a few epochs can start and end between two polls of a loaded machine
    # and the killer miss every trial of the study; 80 epochs span many polls.
    slow = replace(ONE_EPOCH, max_epochs=80)
    # The study (and its tables) exists before the killer thread reads it.
    create_study(config, max_epochs=1)
    killed: list[tuple[int, int]] = []
    done = threading.Event()
    killer = threading.Thread(target=kill_worker_mid_trial, args=(config, killed, done))
    killer.start()

    try:
        result = tune(datamodule, config, ModelConfig(), slow)
    finally:
        done.set()
        killer.join()

    assert len(killed) == 1, "no worker was ever seen running a trial"
    ((number, victim),) = killed
    trials = {t.number: t for t in create_study(config, max_epochs=1).get_trials()}
    failed = [t for t in trials.values() if t.state == TrialState.FAIL]
    finished = [t for t in trials.values() if t.state == TrialState.COMPLETE]
    assert [t.number for t in failed] == [number]
    assert len(finished) == 4 and result.n_complete == 4 and result.n_failed == 1
    assert result.workers_lost == [victim]
    # The killed trial was retried with its parameters, by the worker that was left.
    (retry,) = [t for t in finished if t.system_attrs.get("failed_trial") == number]
    assert retry.params == trials[number].params and retry.user_attrs["worker"] == 1 - victim
    assert retry.number > max(
        t.number for t in trials.values() if "failed_trial" not in t.system_attrs
    )
    assert not [t for t in trials.values() if t.state in (TrialState.RUNNING, TrialState.WAITING)]


def test_a_worker_that_raises_fails_the_tuning_with_its_error(
    datamodule: TabularDataModule, study_config: TuneConfig
) -> None:
    # An impossible search space: every trial raises inside the worker.
    space = replace(study_config.search_space, depth=(3, 1))
    broken = replace(study_config, n_trials=2, search_space=space)
    with pytest.raises(WorkerError, match=r"tuning worker \d exited with status 1:(.|\n)*Error"):
        tune(datamodule, broken, ModelConfig(), ONE_EPOCH)
    states = {t.state for t in create_study(broken, max_epochs=1).get_trials()}
    assert TrialState.RUNNING not in states and TrialState.FAIL in states


def test_parallel_workers_need_a_trial_budget(
    datamodule: TabularDataModule, study_config: TuneConfig
) -> None:
    with pytest.raises(ValueError, match="budget"):
        tune(
            datamodule, replace(study_config, n_trials=None, timeout_s=5.0), train_config=ONE_EPOCH
        )


INTERRUPTED = """
import faulthandler, signal, sys
# Where it is, on SIGUSR1: what the test shows if the interrupt does not end it.
faulthandler.register(signal.SIGUSR1, all_threads=True)
# An interrupt raises here, as in a run, whose process installs its own interrupt handlers: a
# process that inherits SIGINT ignored keeps ignoring it (Lightning ignores it for good in a
# process where a fit was interrupted, as an earlier test in the same pytest worker may do).
signal.signal(signal.SIGINT, signal.default_int_handler)
from ml.config import ModelConfig, SearchSpace, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES
from ml.tuning import tune

train, val, storage, study = sys.argv[1:5]
config = TuneConfig(n_trials=50, storage=storage, study_name=study, pruning=False, workers=2,
                    search_space=SearchSpace(width=(16,), depth=(1, 1), arch=("mlp",)))
# Trials far longer than the test: the workers are still training when it interrupts them.
tune(TabularDataModule(train, val, features=FEATURES, batch_size=512), config, ModelConfig(),
     TrainConfig(max_epochs=2000, batch_size=512, early_stopping_patience=None))
"""


def test_an_interrupted_tuning_leaves_no_worker_behind(
    parquet_splits: dict[str, Path], study_config: TuneConfig
) -> None:
    # What a cancelled run does to its step: an interrupt in the process that started workers.
    args = [str(parquet_splits["train"]), str(parquet_splits["val"]), study_config.storage]
    log = parquet_splits["train"].with_name("parent.log")
    with log.open("w") as out:
        parent = subprocess.Popen(
            [sys.executable, "-c", INTERRUPTED, *args, study_config.study_name],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    study = create_study(study_config, max_epochs=1)
    deadline = time.monotonic() + 120
    while not study.get_trials(states=(TrialState.RUNNING,)) and time.monotonic() < deadline:
        time.sleep(0.5)
    workers = psutil.Process(parent.pid).children()
    assert len(workers) == 2, "the workers never started a trial"
    parent.send_signal(signal.SIGINT)
    try:
        status = parent.wait(timeout=60)
    except subprocess.TimeoutExpired:
        parent.send_signal(signal.SIGUSR1)  # its threads' stacks, into its log
        time.sleep(2)
        parent.kill()
        pytest.fail(f"still running 60 s after SIGINT:\n{log.read_text()[-6000:]}")
    assert status != 0, log.read_text()[-3000:]
    gone, alive = psutil.wait_procs(workers, timeout=5)
    assert alive == [] and len(gone) == 2
