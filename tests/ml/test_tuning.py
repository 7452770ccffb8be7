"""Studies prune a clearly worse trial, record trial attributes and continue after a crash."""

import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from ml.config import ModelConfig, SearchSpace, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES
from ml.tuning import claim_trial, create_study, plan_trials, start_params, tune
from tests.ml.conftest import REPO, run_until_killed

SPACE = SearchSpace(width=(16,), depth=(1, 1), arch=("mlp",))
GOOD = {"arch": "mlp", "width": 16, "depth": 1, "dropout": 0.0, "lr": 3e-2, "weight_decay": 1e-6}
# A learning rate 300x smaller barely moves from the initial weights in two epochs.
BAD = GOOD | {"lr": 1e-4}
# On the CPU, also where a GPU is present: the trials' device is asserted.
TRAIN = TrainConfig(max_epochs=2, batch_size=512, early_stopping_patience=None, accelerator="cpu")


@pytest.fixture(scope="module")
def datamodule(splits: dict[str, pd.DataFrame]) -> TabularDataModule:
    return TabularDataModule(splits["train"], splits["val"], features=FEATURES, batch_size=512)


def _config(tmp_path: Path, **overrides: object) -> TuneConfig:
    # Reduction factor 3 with max_resource 2 gives a single Hyperband bracket whose first rung is
    # epoch 1: the second trial is pruned there exactly when it is worse than the first.
    base = TuneConfig(
        n_trials=2,
        storage=str(tmp_path / "study.journal"),
        study_name="test",
        min_resource=1,
        reduction_factor=3,
        search_space=SPACE,
    )
    return replace(base, **overrides)


def test_clearly_worse_trial_is_pruned(datamodule: TabularDataModule, tmp_path: Path) -> None:
    config = _config(tmp_path)
    study = create_study(config, max_epochs=TRAIN.max_epochs)
    study.enqueue_trial(GOOD)
    study.enqueue_trial(BAD)

    result = tune(datamodule, config, ModelConfig(), TRAIN)

    states = [t.state for t in study.get_trials()]
    assert states == [TrialState.COMPLETE, TrialState.PRUNED]
    assert (result.n_complete, result.n_pruned, result.best_trial) == (1, 1, 0)
    assert result.best_params == GOOD
    complete, pruned = study.get_trials()
    assert complete.user_attrs["epochs_run"] == 2 and pruned.user_attrs["epochs_run"] == 2
    assert pruned.last_step == 1
    for trial in (complete, pruned):
        assert trial.user_attrs["device"] == "cpu"
        assert trial.user_attrs["wall_seconds"] > 0
    assert result.total_compute_seconds == pytest.approx(
        sum(t.user_attrs["wall_seconds"] for t in (complete, pruned))
    )


def test_crashed_study_continues_with_its_trials(
    datamodule: TabularDataModule, tmp_path: Path
) -> None:
    config = _config(tmp_path, n_trials=3, pruning=False)
    one_epoch = replace(TRAIN, max_epochs=1)
    seen: list[int] = []

    def crash_after_first_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        seen.append(trial.number)
        raise RuntimeError("worker died")

    with pytest.raises(RuntimeError, match="worker died"):
        tune(datamodule, config, ModelConfig(), one_epoch, trial_callback=crash_after_first_trial)
    first = create_study(config, max_epochs=1).trials[0]

    result = tune(
        datamodule,
        config,
        ModelConfig(),
        one_epoch,
        trial_callback=lambda _, t: seen.append(t.number),
    )

    trials = create_study(config, max_epochs=1).trials
    assert [t.number for t in trials] == [0, 1, 2] and seen == [0, 1, 2]
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert trials[0].params == first.params and trials[0].value == first.value
    assert trials[1].params != trials[0].params  # the resumed sampler does not replay trial 0
    assert result.n_complete == 3
    # The budget is already spent: another call runs no further trial.
    assert tune(datamodule, config, ModelConfig(), one_epoch).n_complete == 3


def test_studies_of_other_datasets_draw_other_configurations(tmp_path: Path) -> None:
    space = SearchSpace()  # the full space, sampled without training anything

    def drawn(name: str, folder: str) -> list[dict]:
        config = TuneConfig(
            storage=str(tmp_path / folder / "study.journal"), study_name=name, search_space=space
        )
        (tmp_path / folder).mkdir(exist_ok=True)
        study = create_study(config, max_epochs=2)
        params = []
        for _ in range(3):
            trial = study.ask()
            params.append(
                {
                    "lr": trial.suggest_float("lr", *space.lr, log=True),
                    "width": trial.suggest_categorical("width", list(space.width)),
                }
            )
            study.tell(trial, 0.5)
        return params

    first = drawn("flights-0123456789ab", "a")
    assert drawn("flights-0123456789ab", "b") == first  # the same study draws the same
    assert drawn("flights-ba9876543210", "c") != first  # another dataset's draws its own


def test_a_new_study_tries_the_defaults_first(tmp_path: Path) -> None:
    model = ModelConfig(arch="mlp", width=16, depth=1, dropout=0.0)
    train = replace(TRAIN, lr=3e-2, weight_decay=1e-6)
    assert start_params(SPACE, model, train) == GOOD
    config = _config(tmp_path, n_trials=3)
    study = create_study(config, max_epochs=1)
    assert plan_trials(study, 3, GOOD) == 3
    queued = study.get_trials()
    assert [t.state for t in queued] == [TrialState.WAITING] * 3
    assert queued[0].system_attrs["fixed_params"] == GOOD
    assert all(not t.system_attrs.get("fixed_params") for t in queued[1:])
    # A study with trials already (a resumed one) is not given the defaults again.
    study.tell(study.ask(), 0.5)
    assert plan_trials(study, 4, GOOD) == 1
    assert not study.get_trials()[-1].system_attrs.get("fixed_params")
    # Defaults the space cannot hold are not tried.
    assert start_params(SPACE, ModelConfig(), train) is None  # resmlp, 128 wide
    assert start_params(SPACE, model, replace(train, lr=1.0)) is None


def test_a_killed_trial_is_queued_again_in_its_slot_and_runs_first(tmp_path: Path) -> None:
    config = _config(tmp_path, n_trials=3)
    study = create_study(config, max_epochs=1)
    assert plan_trials(study, 3, GOOD) == 3
    killed = claim_trial(study, config)  # slot 0 starts, and its process dies: left RUNNING
    assert killed is not None and killed.suggest_float("lr", *SPACE.lr, log=True) == GOOD["lr"]
    # Resumed: slot 0 is queued again, with the defaults, and is claimed before slots 1 and 2.
    assert plan_trials(study, 3, GOOD) == 1
    again = claim_trial(study, config)
    assert again is not None and (again.number, again.user_attrs["slot"]) == (3, 0)
    assert again.suggest_float("lr", *SPACE.lr, log=True) == GOOD["lr"]
    later = claim_trial(study, config)
    assert later is not None and (later.number, later.user_attrs["slot"]) == (1, 1)
    # The sampler of a slot draws the same configuration, whoever claims it and when.
    drawn = later.suggest_float("lr", *SPACE.lr, log=True)
    fresh = create_study(replace(config, storage=str(tmp_path / "other.journal")), max_epochs=1)
    plan_trials(fresh, 3)
    claim_trial(fresh, config)
    assert claim_trial(fresh, config).suggest_float("lr", *SPACE.lr, log=True) == drawn


def test_tune_runs_the_defaults_as_its_first_trial(
    datamodule: TabularDataModule, tmp_path: Path
) -> None:
    model = ModelConfig(arch="mlp", width=16, depth=1, dropout=0.0)
    train = replace(TRAIN, max_epochs=1, lr=3e-2, weight_decay=1e-6)
    tune(datamodule, _config(tmp_path, pruning=False), model, train)
    first, second = create_study(_config(tmp_path), max_epochs=1).get_trials()
    assert first.params == GOOD and second.params != GOOD
    off = _config(tmp_path / "off", pruning=False, defaults_first=False)
    (tmp_path / "off").mkdir()
    tune(datamodule, off, model, train)
    assert all(t.params != GOOD for t in create_study(off, max_epochs=1).get_trials())
    # A study bounded by time alone starts with them too.
    timed = _config(tmp_path / "timed", n_trials=None, timeout_s=0.01, pruning=False)
    (tmp_path / "timed").mkdir()
    tune(datamodule, timed, model, train)
    assert create_study(timed, max_epochs=1).get_trials()[0].params == GOOD


def test_budget_needs_a_limit(datamodule: TabularDataModule, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        tune(datamodule, _config(tmp_path, n_trials=None, timeout_s=None), train_config=TRAIN)


KILLED_STUDY = """
import os, signal, sys
from dataclasses import replace
from ml.config import ModelConfig, SearchSpace, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES
from ml.tuning import tune

train_path, val_path, journal = sys.argv[1:4]
config = TuneConfig(n_trials=3, storage=journal, study_name="killed", pruning=False,
                    search_space=SearchSpace(width=(16,), depth=(1, 1), arch=("mlp",)))

def die_after_first_trial(study, trial):
    # The first trial is stored; the process dies without warning, as a lost spot node would.
    os.kill(os.getpid(), signal.SIGKILL)

tune(TabularDataModule(train_path, val_path, features=FEATURES, batch_size=512), config,
     ModelConfig(), TrainConfig(max_epochs=1, batch_size=512, early_stopping_patience=None),
     trial_callback=die_after_first_trial)
"""


def test_study_killed_by_sigkill_continues_with_its_trials(
    parquet_splits: dict[str, Path], tmp_path: Path
) -> None:
    journal = tmp_path / "killed.journal"
    run_until_killed(KILLED_STUDY, parquet_splits, journal)
    config = TuneConfig(
        n_trials=3, storage=str(journal), study_name="killed", pruning=False, search_space=SPACE
    )
    before = create_study(config, max_epochs=1).trials
    # The budget was queued before the first trial ran: the two others wait for a worker.
    assert [t.state for t in before] == [
        TrialState.COMPLETE,
        TrialState.WAITING,
        TrialState.WAITING,
    ]

    dm = TabularDataModule(
        parquet_splits["train"], parquet_splits["val"], features=FEATURES, batch_size=512
    )
    one_epoch = TrainConfig(max_epochs=1, batch_size=512, early_stopping_patience=None)
    result = tune(dm, config, ModelConfig(), one_epoch)
    after = create_study(config, max_epochs=1).trials
    assert result.n_complete == 3 and len(after) == 3
    assert all(t.state == TrialState.COMPLETE for t in after)
    assert after[0].params == before[0].params and after[0].value == before[0].value


MID_TRIAL_KILL = """
import os, signal, sys
import lightning as L
import ml.tuning
from ml.config import ModelConfig, SearchSpace, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES

train_path, val_path, journal, kill_in = sys.argv[1:5]
config = TuneConfig(n_trials=4, storage=journal, study_name="slots", min_resource=1,
                    reduction_factor=3, search_space=SearchSpace(width=(16,), depth=(1, 1)))
started = []

class Die(L.Callback):
    # Dies as the second epoch starts, in the first trial from the kill_in-th on that the
    # pruner let through its first epoch: that epoch's value is reported.
    def on_train_epoch_start(self, trainer, pl_module):
        if int(kill_in) and len(started) >= int(kill_in) and trainer.current_epoch == 1:
            os.kill(os.getpid(), signal.SIGKILL)

def train(datamodule, model, train_config, callbacks=()):
    started.append(1)
    return real_train(datamodule, model, train_config, callbacks=[*callbacks, Die()])

real_train, ml.tuning.trials.train = ml.tuning.trials.train, train
ml.tuning.tune(TabularDataModule(train_path, val_path, features=FEATURES, batch_size=512),
               config, ModelConfig(arch="mlp", width=16, depth=1),
               TrainConfig(max_epochs=3, batch_size=512, early_stopping_patience=None))
"""


def test_a_trial_killed_mid_run_is_run_again_as_the_uninterrupted_study_ran_it(
    parquet_splits: dict[str, Path], tmp_path: Path
) -> None:
    """SIGKILL in the third or fourth of four trials (slot 2 or 3), after its first epoch
    reported to the pruner; the study resumed in a fresh process ends as one never
    interrupted: the same configuration, value and state in every slot, the killed trial left
    RUNNING and out of every Hyperband bracket (its rerun is not compared with its own first
    epoch)."""

    def play(journal: Path, kill_in: int) -> list:
        args = [*(str(parquet_splits[k]) for k in ("train", "val")), str(journal), str(kill_in)]
        done = subprocess.run(
            [sys.executable, "-c", MID_TRIAL_KILL, *args],
            cwd=REPO,
            capture_output=True,
            timeout=300,
        )
        return [done.returncode, done.stderr.decode()[-2000:]]

    killed = tmp_path / "killed.journal"
    status, err = play(killed, kill_in=3)
    assert status == -signal.SIGKILL, err
    assert play(killed, kill_in=0)[0] == 0  # resumed: nothing is killed
    assert play(tmp_path / "whole.journal", kill_in=0)[0] == 0

    def by_slot(journal: Path) -> tuple[dict, list]:
        config = TuneConfig(storage=str(journal), study_name="slots", search_space=SPACE)
        trials = create_study(config, max_epochs=3).get_trials()
        done = {
            t.user_attrs["slot"]: (t.state, t.params, t.value, t.last_step)
            for t in trials
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
        }
        return done, [t for t in trials if t.state not in (TrialState.COMPLETE, TrialState.PRUNED)]

    resumed, left = by_slot(killed)
    whole, none = by_slot(tmp_path / "whole.journal")
    assert sorted(resumed) == sorted(whole) == [0, 1, 2, 3] and not none
    [stale] = left
    assert stale.state == TrialState.RUNNING and stale.user_attrs["slot"] in (2, 3)
    assert stale.number == stale.user_attrs["slot"] and 0 in stale.intermediate_values
    for place, (state, params, value, step) in whole.items():
        assert resumed[place][:2] == (state, params), place
        assert resumed[place][2] == pytest.approx(value, abs=1e-6), place
        assert resumed[place][3] == step, place
    # The draws differ from slot to slot, and the pruner stopped some.
    assert len({tuple(sorted(p.items())) for _, p, _, _ in whole.values()}) == 4
    assert TrialState.PRUNED in {state for state, *_ in whole.values()}


def test_k_trials_at_once_give_the_results_of_the_same_trials_one_after_another(
    datamodule: TabularDataModule, tmp_path: Path
) -> None:
    # Four fixed trials (as seeded suggestions would be), run by one worker and by two at once.
    trials = [
        GOOD,
        GOOD | {"lr": 3e-3, "dropout": 0.2},
        GOOD | {"width": 16, "depth": 1, "weight_decay": 1e-3},
        BAD,
    ]
    outcomes = {}
    for workers in (1, 2):
        config = _config(
            tmp_path,
            n_trials=4,
            storage=str(tmp_path / f"k{workers}.journal"),
            workers=workers,
            pruning=False,
        )
        study = create_study(config, max_epochs=TRAIN.max_epochs)
        for params in trials:
            study.enqueue_trial(params)
        assert tune(datamodule, config, ModelConfig(), TRAIN).n_complete == 4
        done = create_study(config, max_epochs=TRAIN.max_epochs).get_trials()
        outcomes[workers] = {
            tuple(sorted(t.params.items())): (t.value, t.user_attrs["history"]) for t in done
        }
        # Which worker took which trial is a race (a loaded machine may start the second process
        # after the first took all four); that both work is test_parallel_tuning's 12 trials.
        assert {t.user_attrs["worker"] for t in done} <= set(range(workers))

    assert outcomes[1].keys() == outcomes[2].keys() and len(outcomes[1]) == 4
    for params, (value, history) in outcomes[1].items():
        # Each worker process trains with its share of the cores; sums may be reordered.
        assert outcomes[2][params][0] == pytest.approx(value, abs=1e-4)
        assert len(outcomes[2][params][1]) == len(history) == TRAIN.max_epochs
