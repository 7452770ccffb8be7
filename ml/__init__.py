"""Flywheel's ML library: configs, preprocessing, data module, models, training and tuning.

Importing the package is cheap and pulls in no orchestration, tracking or tuning libraries;
``ml.tuning`` (Optuna) and ``ml.baselines`` (scikit-learn) are imported explicitly when needed.
"""

from ml.config import FeatureConfig, ModelConfig, SearchSpace, TrainConfig, TuneConfig

__all__ = ["FeatureConfig", "ModelConfig", "SearchSpace", "TrainConfig", "TuneConfig"]
