"""Several workers on one study: how they are launched (processes here, a Kubernetes Job in the
pipelines), what each runs, and how their ending is judged."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import torch

from ml.config import (
    ModelConfig,
    SearchSpace,
    TrainConfig,
    TuneConfig,
    config_from_dict,
    config_to_dict,
)
from ml.data import TabularDataModule
from ml.training import share_cores
from ml.tuning.hyperband import FINISHED
from ml.tuning.study import create_study
from ml.tuning.trials import make_objective, work

# Seconds the workers of an interrupted tuning get to exit on SIGTERM, together, before SIGKILL.
STOP_WAIT_S = 10.0


class WorkerError(RuntimeError):
    """A tuning worker failed; the message holds its exit status and log's end."""


@dataclass
class WorkersOutcome:
    """How a launcher's workers ended: those lost (killed by a signal, the OOM killer, an
    eviction: their trials are retried by the others) and the messages of those that failed."""

    lost: list[int] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


class WorkerLauncher(Protocol):
    """Runs ``workers`` workers on one study somewhere and waits until all of them ended.

    A worker runs ``run_worker(spec, datamodule, index)`` with this spec and an equal
    datamodule (where it runs, it may rebuild it from the same data). Interrupted (the run was
    cancelled), no worker outlives the call. Processes here (``ProcessLauncher``); the pods of
    a Kubernetes Job in the pipelines (``pipelines.lib.tuning_workers``).
    """

    def run(
        self, spec: dict[str, object], datamodule: TabularDataModule, workers: int
    ) -> WorkersOutcome:
        """Start the workers, wait for them; how they ended."""
        ...


class ProcessLauncher:
    """Workers as processes on this machine (``python -m ml.tuning work SPEC INDEX``)."""

    def run(
        self, spec: dict[str, object], datamodule: TabularDataModule, workers: int
    ) -> WorkersOutcome:
        """Start the processes and wait for them; SIGTERM then SIGKILL any left on the way out."""
        with tempfile.TemporaryDirectory(prefix="tuning-") as folder:
            spec_dir = Path(folder)
            torch.save(datamodule, spec_dir / "datamodule.pt")
            (spec_dir / "configs.json").write_text(json.dumps(spec))
            processes = []
            for worker in range(workers):
                log = (spec_dir / f"worker-{worker}.log").open("w")
                command = [sys.executable, "-m", "ml.tuning", "work", str(spec_dir), str(worker)]
                process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
                processes.append((process, log))
            outcome = WorkersOutcome()
            try:
                for worker, (process, log) in enumerate(processes):
                    status = process.wait()
                    log.close()
                    if status < 0:
                        outcome.lost.append(worker)
                    elif status != 0:
                        tail = (spec_dir / f"worker-{worker}.log").read_text()[-3000:]
                        outcome.failed.append(
                            f"tuning worker {worker} exited with status {status}:\n{tail}"
                        )
            finally:
                # Interrupted (the run was cancelled): no worker outlives the step. Their running
                # trials stop beating and are retried when the study resumes. All are asked at
                # once and waited for together (a busy machine must not multiply the wait by the
                # workers); one still running after STOP_WAIT_S is killed.
                running = [process for process, _ in processes if process.poll() is None]
                for process in running:
                    process.terminate()
                deadline = time.monotonic() + STOP_WAIT_S
                for process in running:
                    try:
                        process.wait(timeout=max(0.0, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
                for _, log in processes:
                    log.close()
            return outcome


def worker_spec(
    config: TuneConfig, model_config: ModelConfig, train_config: TrainConfig
) -> dict[str, object]:
    """What a worker needs besides the data: the three configs, as JSON-ready dicts."""
    return {
        "tune": config_to_dict(config),
        "model": config_to_dict(model_config),
        "train": config_to_dict(train_config),
    }


def run_workers(
    datamodule: TabularDataModule,
    config: TuneConfig,
    model_config: ModelConfig,
    train_config: TrainConfig,
    launcher: WorkerLauncher,
) -> list[int]:
    """Run ``config.workers`` workers on the study through ``launcher``; the lost ones.

    A worker killed by a signal (SIGKILL, the OOM killer) is lost: its running trial is failed
    by the heartbeat and retried by the others. A worker that exits with an error raises
    WorkerError (after the others finished). If no trial is left to run while the budget is not
    spent, that is a WorkerError too.
    """
    spec = worker_spec(config, model_config, train_config)
    outcome = launcher.run(spec, datamodule, config.workers)
    if outcome.failed:
        raise WorkerError("\n\n".join(outcome.failed))
    study = create_study(config, max_epochs=train_config.max_epochs)
    done = len(study.get_trials(deepcopy=False, states=FINISHED))
    if done < (config.n_trials or 0):
        raise WorkerError(
            f"study {config.study_name}: {done} of {config.n_trials} trials finished and no "
            f"worker is left (lost: {outcome.lost}); run it again to continue"
        )
    return outcome.lost


def run_worker(spec: dict[str, object], datamodule: TabularDataModule, worker: int) -> None:
    """One worker: run queued trials of the spec's study until none is left."""
    configs = copy.deepcopy(spec)  # the configs are popped apart below
    space = config_from_dict(SearchSpace, configs["tune"].pop("search_space"))
    tune_config = replace(config_from_dict(TuneConfig, configs["tune"]), search_space=space)
    model_config = config_from_dict(ModelConfig, configs["model"])
    train_config = config_from_dict(TrainConfig, configs["train"])
    share_cores(tune_config.workers)  # on a GPU too: the step's host work needs the cores
    study = create_study(tune_config, max_epochs=train_config.max_epochs, worker=worker)
    objective = make_objective(datamodule, tune_config, model_config, train_config)
    work(study, objective, tune_config, [], worker=worker)


def worker_main(spec_dir: Path, worker: int) -> None:
    """The worker process ``ProcessLauncher`` starts: its spec and datamodule from files."""
    spec = json.loads((spec_dir / "configs.json").read_text())
    run_worker(spec, torch.load(spec_dir / "datamodule.pt", weights_only=False), worker)
