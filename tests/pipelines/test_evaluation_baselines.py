"""The baselines a challenger is evaluated against learn from the rows it learned from."""

from __future__ import annotations

import numpy as np

from ml.config import FeatureConfig
from ml.synthetic import make_flights
from pipelines.defs.evaluation.report import refitted_baselines


def test_the_baselines_learn_from_the_validation_rows_too() -> None:
    # A carrier first seen in the validation week, always late there and in the test week: the
    # challenger's final fit learned it (train and validation); so must its floor.
    frames = {"train": make_flights(1500, seed=1), "validation": make_flights(600, seed=2)}
    test = make_flights(600, seed=3)
    for frame in (frames["validation"], test):
        new = np.arange(len(frame)) % 5 == 0
        frame.loc[new, "carrier"] = "QQ"
        frame.loc[new, "is_late"] = True
    features = FeatureConfig()

    scores = refitted_baselines(frames, test, features, seed=0)

    # Nothing is learned from the test rows: their labels flipped, the scores are the same.
    flipped = test.assign(is_late=~test["is_late"].astype(bool))
    for name, same in refitted_baselines(frames, flipped, features, seed=0).items():
        assert (same == scores[name]).all(), name
    new = (test["carrier"] == "QQ").to_numpy()
    for name in ("logistic_regression", "hist_gradient_boosting"):
        assert len(scores[name]) == len(test)
        # Fitted on the train split alone, QQ is an unknown carrier: about the base rate (0.3).
        assert scores[name][new].mean() > 0.6, name
        assert scores[name][new].mean() > scores[name][~new].mean() + 0.3, name
