"""A challenger is the best trial's checkpoint (refitted when it ran elsewhere), scored like the
baselines."""

from pathlib import Path

import pandas as pd
import pytest

from ml.challenger import configs_from_params, fit_challenger
from ml.config import ModelConfig, SearchSpace, TrainConfig, TuneConfig
from ml.data import TabularDataModule

SPACE = SearchSpace(width=(16,), depth=(1, 1), arch=("mlp",))


def test_configs_from_params_fill_both_configs() -> None:
    params = {"arch": "mlp", "width": 16, "lr": 0.01, "weight_decay": 1e-5}
    model, train = configs_from_params(params, ModelConfig(), TrainConfig(max_epochs=3))
    assert (model.arch, model.width, model.depth) == ("mlp", 16, ModelConfig().depth)
    assert (train.lr, train.weight_decay, train.max_epochs) == (0.01, 1e-5, 3)
    with pytest.raises(ValueError, match="n_layers"):
        configs_from_params({"n_layers": 2}, ModelConfig(), TrainConfig())


def test_challenger_is_the_best_trial_as_trained_or_refitted(
    splits: dict[str, pd.DataFrame], tmp_path: Path
) -> None:
    datamodule = TabularDataModule(splits["train"], splits["val"], batch_size=512)
    tune = TuneConfig(
        n_trials=1, storage=str(tmp_path / "s.journal"), study_name="t", search_space=SPACE
    )
    train = TrainConfig(max_epochs=2, batch_size=512)

    challenger = fit_challenger(datamodule, tune, ModelConfig(), train, str(tmp_path / "ckpt"))

    # The trial ran here: its own best epoch's checkpoint, not a second training.
    assert Path(challenger.checkpoint).parent == tmp_path / "ckpt" / "trials" / "trial-0000"
    assert not list((tmp_path / "ckpt").glob("*.ckpt"))
    assert challenger.model_config.width == 16 and challenger.train_config.lr == pytest.approx(
        challenger.tuning.best_params["lr"]
    )
    assert challenger.fit.best_metrics["val/logloss"] == challenger.tuning.best_value
    assert challenger.metrics["logloss"] == pytest.approx(challenger.tuning.best_value, rel=1e-4)
    assert set(challenger.baselines) == {"logistic_regression", "hist_gradient_boosting"}

    # The study is done, so this call runs no trial: the best one ran in an earlier process and
    # is trained again. Same seed and data: the refit reproduces the trial and its best epoch.
    again = fit_challenger(datamodule, tune, ModelConfig(), train, str(tmp_path / "refit"))
    assert again.tuning.best_trial == challenger.tuning.best_trial
    assert Path(again.checkpoint).parent == tmp_path / "refit"
    assert again.fit.best_metrics["val/logloss"] == pytest.approx(
        challenger.tuning.best_value, rel=1e-5
    )
    assert again.metrics == pytest.approx(challenger.metrics, rel=1e-5)
