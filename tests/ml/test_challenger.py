"""A challenger is the best trial's parameters fitted on train and validation for its epochs."""

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from ml.baselines import evaluate_baselines
from ml.challenger import configs_from_params, fit_challenger
from ml.config import ModelConfig, SearchSpace, TrainConfig, TuneConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES

SPACE = SearchSpace(width=(16,), depth=(1, 1), arch=("mlp",))


def test_configs_from_params_fill_both_configs() -> None:
    params = {"arch": "mlp", "width": 16, "lr": 0.01, "weight_decay": 1e-5}
    model, train = configs_from_params(params, ModelConfig(), TrainConfig(max_epochs=3))
    assert (model.arch, model.width, model.depth) == ("mlp", 16, ModelConfig().depth)
    assert (train.lr, train.weight_decay, train.max_epochs) == (0.01, 1e-5, 3)
    with pytest.raises(ValueError, match="n_layers"):
        configs_from_params({"n_layers": 2}, ModelConfig(), TrainConfig())


def test_the_challenger_is_the_best_trial_fitted_on_train_and_validation(
    splits: dict[str, pd.DataFrame], tmp_path: Path
) -> None:
    datamodule = TabularDataModule(
        splits["train"], splits["val"], features=FEATURES, batch_size=512
    )
    tune = TuneConfig(
        n_trials=2, storage=str(tmp_path / "s.journal"), study_name="t", search_space=SPACE
    )
    train = TrainConfig(max_epochs=3, batch_size=512)

    challenger = fit_challenger(datamodule, tune, ModelConfig(), train, str(tmp_path / "ckpt"))

    assert challenger.checkpoint == str(tmp_path / "ckpt" / "last.ckpt")
    assert challenger.model_config.width == 16 and challenger.train_config.lr == pytest.approx(
        challenger.tuning.best_params["lr"]
    )
    # The best trial's best epoch: its validation scores are the challenger's, and the final
    # fit runs that many epochs over the train and validation rows (no early stopping).
    history = challenger.tuning.best_history
    best = min(history, key=lambda r: r["val/logloss"])
    assert best["val/logloss"] == challenger.tuning.best_value
    assert challenger.metrics == {"auroc": best["val/auroc"], "logloss": best["val/logloss"]}
    epochs = int(best["epoch"]) + 1
    assert challenger.train_config.max_epochs == challenger.fit.epochs_run == epochs
    rows = len(splits["train"]) + len(splits["val"])
    assert challenger.fit.optimizer_steps == epochs * math.ceil(rows / 512)
    assert set(challenger.baselines) == {"logistic_regression", "hist_gradient_boosting"}
    # Its baselines are fitted once, on the train split, and score validation as a fit does.
    assert challenger.baselines == evaluate_baselines(datamodule, "val", seed=train.seed)
    assert challenger.fitted_baselines.preprocessor == datamodule.preprocessor
    # The registered model is the last epoch's, as trained (not the best on rows it learned).
    final = torch.load(challenger.checkpoint, weights_only=False)
    assert final["epoch"] == epochs - 1


def test_a_challenger_of_several_members_is_tuned_with_one_network(
    splits: dict[str, pd.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ml import challenger as module
    from ml.inference import load_predictor
    from ml.models import TabularEnsemble

    tuned_with: list[int] = []
    tune = module.tune

    def recording_tune(datamodule, tune_config, model_config, *args, **kwargs):
        tuned_with.append(model_config.members)
        return tune(datamodule, tune_config, model_config, *args, **kwargs)

    monkeypatch.setattr(module, "tune", recording_tune)
    datamodule = TabularDataModule(
        splits["train"], splits["val"], features=FEATURES, batch_size=512
    )
    config = TuneConfig(
        n_trials=1, storage=str(tmp_path / "s.journal"), study_name="t", search_space=SPACE
    )
    train = TrainConfig(max_epochs=2, batch_size=512, accelerator="cpu")

    # The base config's count, unless the call names another.
    challenger = fit_challenger(
        datamodule, config, ModelConfig(members=2), train, str(tmp_path / "a")
    )
    assert tuned_with == [1] and challenger.model_config.members == 2
    net = load_predictor(challenger.checkpoint).module.net
    assert isinstance(net, TabularEnsemble) and len(net.members) == 2
    challenger = fit_challenger(
        datamodule, config, ModelConfig(members=2), train, str(tmp_path / "b"), members=1
    )
    assert challenger.model_config.members == 1
    with pytest.raises(ValueError, match="members must be at least 1"):
        fit_challenger(datamodule, config, ModelConfig(), train, str(tmp_path / "c"), members=0)
    assert tuned_with == [1, 1], "an invalid count fails before any trial"
