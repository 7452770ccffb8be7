"""PostgreSQL killed during a parallel tuning: the study's database (Optuna's RDB storage) is
SIGKILLed, every process of it, while the workers train, and started again. The tuning fails
naming the lost connection; run again on the same study, as a retried run does, it finishes
the exact budget: nothing a completed trial recorded is lost, no trial is done twice.

The kill found a wedge: a worker that dies between claiming a trial and its first heartbeat
left the trial running with no heartbeat, which Optuna never takes for stale, and the run
again waited for it for ever (`ml.tuning.storage.fail_never_beaten`)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import psutil
import pytest
from optuna.trial import TrialState

from deploy.stack import postgres
from ml.config import ModelConfig, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES
from ml.tuning import WorkerError, create_study, tune
from ml.tuning.storage import fail_never_beaten

SLOW = TrainConfig(max_epochs=40, batch_size=512, early_stopping_patience=None)


@pytest.fixture
def own_server(tmp_path_factory) -> tuple[str, Path, int]:
    """A PostgreSQL server of this test's own (killing the session's would fail others)."""
    from tests.deploy.stackctl import passable

    home = tmp_path_factory.mktemp("killed-postgres")
    passable(home)
    with postgres.scratch_server(home) as url:
        yield url, home / "data", int(url.rsplit(":", 1)[1])


def kill_server(data: Path) -> None:
    """SIGKILL the postmaster and every backend of the cluster in `data`, at once."""
    pid = int((data / "postmaster.pid").read_text().split()[0])
    server = psutil.Process(pid)
    for process in [server, *server.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    psutil.wait_procs([server], timeout=10)


def kill_when_training(config: TuneConfig, data: Path, done: threading.Event, log: list) -> None:
    """Once a trial has recorded a completed sibling and another is training, kill the server."""
    study = create_study(config, max_epochs=1)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not done.is_set():
        trials = study.get_trials(deepcopy=False)
        complete = [t.number for t in trials if t.state == TrialState.COMPLETE]
        training = [t for t in trials if t.state == TrialState.RUNNING and len(t.params) == 6]
        if complete and training:
            log.append(sorted(complete))
            kill_server(data)
            return
        time.sleep(0.2)


# Without the fix the run again waited for ever: a deadline makes that a failure.
@pytest.mark.timeout(600)
def test_postgres_killed_mid_tuning_fails_it_named_and_a_rerun_finishes_the_budget(
    own_server, splits: dict[str, pd.DataFrame], study_config: TuneConfig
) -> None:
    url, data, port = own_server
    config = replace(study_config, storage=f"{url}/optuna", n_trials=6)
    datamodule = TabularDataModule(
        splits["train"], splits["val"], features=FEATURES, batch_size=512
    )
    create_study(config, max_epochs=1)  # the tables exist before the killer reads them
    done, completed_before = threading.Event(), []
    watch = (config, data, done, completed_before)
    killer = threading.Thread(target=kill_when_training, args=watch)
    killer.start()
    fast = replace(SLOW, max_epochs=2)
    try:
        with pytest.raises(WorkerError) as failed:
            # The first trials end fast; later ones train long enough to be killed inside.
            tune(datamodule, config, ModelConfig(), replace(SLOW, max_epochs=40))
    finally:
        done.set()
        killer.join()
    assert completed_before, "the server was never killed inside a trial"
    assert "server closed the connection" in str(failed.value) or "OperationalError" in str(
        failed.value
    ), str(failed.value)

    postgres.start(data, port, data.parent / "postgres.log")
    result = tune(datamodule, config, ModelConfig(), fast)
    trials = create_study(config, max_epochs=1).get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == config.n_trials == result.n_complete
    assert set(completed_before[0]) <= {t.number for t in complete}
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert os.getpid() not in {t.user_attrs.get("pid") for t in trials}


def test_a_trial_claimed_by_a_worker_that_never_beat_is_failed_and_queued_again(
    study_config: TuneConfig,
) -> None:
    """The wedge alone: a trial claimed (running) whose worker died before its first
    heartbeat is failed once the grace period has passed, and its retry is queued."""
    config = replace(study_config, n_trials=1, grace_period_s=1)
    study = create_study(config, max_epochs=1)
    claimed = study.ask()  # running, no heartbeat: its worker "died" here
    assert fail_never_beaten(study) == []  # within the grace period: left alone
    time.sleep(1.5)
    assert fail_never_beaten(study) == [claimed.number]
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[1].system_attrs["failed_trial"] == claimed.number
    assert fail_never_beaten(study) == []  # failed once
