"""Slots and Hyperband: a queued trial's place in the budget decides what it draws and which
bracket it meets, whichever worker runs it and whenever."""

from __future__ import annotations

import zlib

import optuna
from optuna.trial import FrozenTrial, TrialState

from ml.config import TuneConfig

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
SLOT = "slot"  # a queued trial's place in the budget (a user attribute): what it draws from


def slot(trial: FrozenTrial) -> int:
    """The trial's place in the budget: 0 for the first trial, 1 for the second... A trial
    queued again for a killed one takes its slot, so it draws and runs as that one would have.
    (A trial queued before slots existed: its number.)"""
    return int(trial.user_attrs.get(SLOT, trial.number))


def slot_seed(config: TuneConfig, place: int) -> int:
    """The sampler's seed for the trial in slot ``place``: the study's name (studies of other
    datasets draw other configurations), the configured seed and the slot, never the order in
    which trials ran or which worker ran them."""
    return (zlib.crc32(config.study_name.encode()) + config.sampler_seed + place) % 2**32


class SlotHyperband(optuna.pruners.HyperbandPruner):
    """Hyperband whose brackets follow the trials' slots, not their numbers.

    Optuna puts trial ``n`` in the bracket a hash of the study's name and ``n`` gives. A trial
    queued again for one killed mid-run gets a new number, so it would land in another bracket
    and meet other competitors. Here it lands in its slot's bracket, and the killed trial
    (superseded: a newer trial holds its slot) leaves every bracket, with the values it
    reported before it died: the rungs see what an uninterrupted study's would have.
    """

    def _get_bracket_id(self, study: optuna.Study, trial: FrozenTrial) -> int:
        if len(self._pruners) == 0 or SLOT not in trial.user_attrs:
            return super()._get_bracket_id(study, trial)
        place = slot(trial)
        # A complete or pruned trial is counted, so its slot is never queued again: only a
        # running or failed one (the one being pruned, a killed one) needs the others read.
        if trial.state not in FINISHED:
            trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
            if any(t.number > trial.number and slot(t) == place for t in trials):
                return -1  # superseded: in no bracket
        assert self._n_brackets is not None
        n = zlib.crc32(f"{study.study_name}_{place}".encode()) % self._total_trial_allocation_budget
        for bracket_id in range(self._n_brackets):
            n -= self._trial_allocation_budgets[bracket_id]
            if n < 0:
                return bracket_id
        raise AssertionError("the allocation budgets sum to their total")
