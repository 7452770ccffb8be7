"""The search: run (or continue) a study to its budget, in this process or in workers."""

from __future__ import annotations

from dataclasses import replace

from ml.config import ModelConfig, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.tuning.hyperband import FINISHED
from ml.tuning.study import TuneResult, create_study, plan_trials, start_params, summarize
from ml.tuning.trials import TrialCallback, make_objective, work
from ml.tuning.workers import ProcessLauncher, WorkerLauncher, run_workers


def tune(
    datamodule: TabularDataModule,
    config: TuneConfig | None = None,
    model_config: ModelConfig | None = None,
    train_config: TrainConfig | None = None,
    trial_callback: TrialCallback | None = None,
    launcher: WorkerLauncher | None = None,
) -> TuneResult:
    """Run (or continue) a study until ``n_trials`` trials finished or ``timeout_s`` elapsed.

    Complete and pruned trials already in the storage count against ``n_trials``, so a crashed
    study continues where it stopped. With ``workers`` above 1 the trials run in that many
    workers on the same storage (an RDB URL, for heartbeats), started by ``launcher`` (default:
    processes on this machine), and ``trial_callback`` sees each finished trial here once they
    are done, in trial order.
    """
    config = config or TuneConfig()
    train_config = train_config or TrainConfig()
    model_config = model_config or ModelConfig()
    if config.n_trials is None and config.timeout_s is None:
        raise ValueError("set n_trials or timeout_s, or the study never ends")
    if config.workers > 1 and config.n_trials is None:
        raise ValueError("parallel workers share a trial budget: set n_trials")
    study = create_study(config, max_epochs=train_config.max_epochs)
    first = (
        start_params(config.search_space, model_config, train_config)
        if config.defaults_first
        else None
    )
    if config.n_trials is None:
        if first is not None and not study.get_trials(deepcopy=False):
            study.enqueue_trial(first)
        objective = make_objective(datamodule, config, model_config, train_config)
        callbacks = [trial_callback] if trial_callback else []
        study.optimize(objective, timeout=config.timeout_s, callbacks=callbacks)
        return summarize(study)
    plan_trials(study, config.n_trials, first)
    if config.workers == 1:
        objective = make_objective(datamodule, config, model_config, train_config)
        work(study, objective, config, [trial_callback] if trial_callback else [])
        return summarize(study)
    before = {t.number for t in study.get_trials(deepcopy=False, states=FINISHED)}
    lost = run_workers(
        datamodule, config, model_config, train_config, launcher or ProcessLauncher()
    )
    if trial_callback is not None:
        for trial in study.get_trials(deepcopy=False, states=FINISHED):
            if trial.number not in before:
                trial_callback(study, trial)
    return replace(summarize(study), workers_lost=lost)
