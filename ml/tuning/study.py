"""A study's life: created or resumed, its trial budget queued in slots, a queued trial claimed
by one worker, and its outcome summed up."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import Trial, TrialState

from ml.config import ModelConfig, SearchSpace, TrainConfig, TuneConfig
from ml.tuning.hyperband import FINISHED, SLOT, SlotHyperband, slot, slot_seed
from ml.tuning.storage import fail_stale, heartbeats, make_storage


@dataclass
class TuneResult:
    """Best trial and bookkeeping of a (possibly resumed) study."""

    best_params: dict[str, object]
    best_value: float
    best_trial: int
    n_complete: int
    n_pruned: int
    n_failed: int
    total_compute_seconds: float
    study_name: str
    # The best trial's validation metrics per epoch (``val/*``, with ``epoch``).
    best_history: list[dict[str, float]] = field(default_factory=list)
    # Worker processes that died without a word (SIGKILL, OOM): their trials were retried.
    workers_lost: list[int] = field(default_factory=list)


def create_study(config: TuneConfig, max_epochs: int, worker: int = 0) -> optuna.Study:
    """Create or load the study named in ``config`` (Hyperband's max resource is max_epochs).

    A queued trial draws its configuration from its slot's seed (``claim_trial`` gives the sampler
    it): whichever worker runs it, and when a killed trial is queued again, the same draw. A
    study bounded by time alone (``study.optimize``) has no slots: each worker process samples
    with its own seed, offset by the trials already stored so a resumed study does not replay
    its first run's draws. Both seeds include the study's name, so that studies of different
    datasets draw different configurations (with the same seed every new study would try the
    same ones).
    """
    pruner: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
    if config.pruning:
        pruner = SlotHyperband(
            min_resource=config.min_resource,
            max_resource=max_epochs,
            reduction_factor=config.reduction_factor,
        )
    study = optuna.create_study(
        study_name=config.study_name,
        storage=make_storage(config.storage, config),
        pruner=pruner,
        direction="minimize",
        load_if_exists=True,
    )
    seed = slot_seed(config, 1000 * worker + len(study.trials))
    study.sampler = optuna.samplers.TPESampler(seed=seed)
    return study


def start_params(space: SearchSpace, model: ModelConfig, train: TrainConfig) -> dict | None:
    """The hyperparameters of ``model`` and ``train`` as a trial's parameters, or None when one
    lies outside ``space`` (a trial cannot try it)."""
    params: dict[str, object] = {
        "arch": model.arch,
        "width": model.width,
        "depth": model.depth,
        "dropout": model.dropout,
        "lr": train.lr,
        "weight_decay": train.weight_decay,
    }
    inside = (
        model.arch in space.arch
        and model.width in space.width
        and space.depth[0] <= model.depth <= space.depth[1]
        and space.dropout[0] <= model.dropout <= space.dropout[1]
        and space.lr[0] <= train.lr <= space.lr[1]
        and space.weight_decay[0] <= train.weight_decay <= space.weight_decay[1]
    )
    return params if inside else None


def plan_trials(study: optuna.Study, n_trials: int, first: dict | None = None) -> int:
    """Queue trials until the finished, running and queued ones make ``n_trials``; how many.

    Each queued trial holds a slot (``SLOT``), the lowest one no counted trial holds: a trial
    queued in place of a killed one takes its slot, so it draws the killed one's configuration
    and runs before the later slots, as in a study never interrupted. ``first`` (parameters) is
    slot 0's: the configuration known to be good, which the sampled ones must beat.

    Workers only run queued trials, each claimed by exactly one of them, so the budget counts
    finished trials across workers exactly: a failed trial's retry takes its place (and its
    slot) in the queue. Without heartbeats a RUNNING trial may belong to a worker that died;
    it is not counted, and its place is queued again.
    """
    counted = (*FINISHED, TrialState.WAITING)
    if heartbeats(study):
        fail_stale(study)
        counted = (*counted, TrialState.RUNNING)
    held = {slot(t) for t in study.get_trials(deepcopy=False, states=counted)}
    missing = max(0, n_trials - len(held))
    free = (place for place in range(n_trials + len(held)) if place not in held)
    for place in itertools.islice(free, missing):
        params = first if place == 0 and first is not None else {}
        study.enqueue_trial(params, user_attrs={SLOT: place})
    return missing


def claim_trial(study: optuna.Study, config: TuneConfig) -> Trial | None:
    """Take a queued trial for this worker (None when the queue is empty), the lowest slot
    first.

    The storage moves a trial from WAITING to RUNNING for one caller only: a row lock in a
    database, the journal's order of records in a file.
    """
    storage = study._storage
    waiting_trials = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    for waiting in sorted(waiting_trials, key=lambda t: (slot(t), t.number)):
        try:
            if storage.set_trial_state_values(waiting._trial_id, state=TrialState.RUNNING):
                # Its configuration is drawn from its slot, whoever runs it and whenever.
                study.sampler = optuna.samplers.TPESampler(seed=slot_seed(config, slot(waiting)))
                return Trial(study, waiting._trial_id)
        except UpdateFinishedTrialError:
            continue
    return None


def summarize(study: optuna.Study) -> TuneResult:
    """Return the best trial and trial counts of a study."""
    trials = study.get_trials(deepcopy=False)
    count = {state: sum(t.state == state for t in trials) for state in TrialState}
    best = study.best_trial
    return TuneResult(
        best_params=dict(best.params),
        best_value=float(best.value),
        best_trial=best.number,
        n_complete=count[TrialState.COMPLETE],
        n_pruned=count[TrialState.PRUNED],
        n_failed=count[TrialState.FAIL],
        total_compute_seconds=sum(float(t.user_attrs.get("wall_seconds", 0.0)) for t in trials),
        study_name=study.study_name,
        best_history=list(best.user_attrs.get("history", [])),
    )
