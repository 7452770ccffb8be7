"""The preprocessor is fitted on train only, handles unseen/missing values and round-trips."""

import json

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from ml.data import TabularDataModule
from ml.preprocessing import OOV_INDEX, Preprocessor
from ml.synthetic import FEATURES


def test_fitted_state_ignores_validation_data(splits: dict[str, pd.DataFrame]) -> None:
    val = splits["val"]
    shuffled = val.sample(frac=1.0, random_state=0).assign(temp=val["temp"] * 100, carrier="QQ")
    first = TabularDataModule(splits["train"], val, features=FEATURES).preprocessor.to_dict()
    second = TabularDataModule(splits["train"], shuffled, features=FEATURES).preprocessor.to_dict()
    assert first == second
    assert "QQ" not in first["vocabularies"]["carrier"]
    assert "ZZ" not in first["vocabularies"]["carrier"]


def test_unseen_and_missing_categories_map_to_oov(splits: dict[str, pd.DataFrame]) -> None:
    pre = Preprocessor.fit(splits["train"], FEATURES)
    val = splits["val"]
    categorical, _ = pre.transform(val)
    carrier = categorical[:, pre.features.categorical.index("carrier")]
    maker = categorical[:, pre.features.categorical.index("plane_manufacturer")]
    assert (carrier[(val["carrier"] == "ZZ").to_numpy()] == OOV_INDEX).all()
    assert (carrier[(val["carrier"] != "ZZ").to_numpy()] > OOV_INDEX).all()
    assert (maker[val["plane_manufacturer"].isna().to_numpy()] == OOV_INDEX).all()
    assert categorical.dtype == np.int64
    assert categorical.max(axis=0).tolist() < pre.cardinalities


def test_missing_numerics_become_zero_with_indicator(splits: dict[str, pd.DataFrame]) -> None:
    pre = Preprocessor.fit(splits["train"], FEATURES)
    _, numeric = pre.transform(splits["val"])
    n = len(pre.features.numeric)
    assert numeric.dtype == np.float32 and numeric.shape == (len(splits["val"]), 2 * n)
    j = pre.features.numeric.index("wind_gust")
    missing = splits["val"]["wind_gust"].isna().to_numpy()
    assert missing.any()
    assert (numeric[missing, j] == 0).all() and (numeric[missing, n + j] == 1).all()
    assert (numeric[~missing, n + j] == 0).all()


def test_standardisation_uses_train_statistics(splits: dict[str, pd.DataFrame]) -> None:
    pre = Preprocessor.fit(splits["train"], FEATURES)
    _, numeric = pre.transform(splits["train"])
    j = pre.features.numeric.index("distance")
    assert abs(numeric[:, j].mean()) < 1e-4 and abs(numeric[:, j].std() - 1) < 1e-4
    assert np.isclose(pre.means[j], splits["train"]["distance"].mean())


def test_rare_categories_share_the_oov_bucket() -> None:
    frame = pd.DataFrame(
        {"c": ["a", "a", "b", None], "x": [1.0, 2.0, None, 4.0], "y": [1, 0, 1, 0]}
    )
    features = FeatureConfig(("c",), ("x",), "y", (), min_category_frequency=2)
    pre = Preprocessor.fit(frame, features)
    categorical, numeric = pre.transform(frame)
    assert pre.vocabularies == {"c": ["a"]}
    assert categorical[:, 0].tolist() == [1, 1, 0, 0]
    assert numeric[:, 1].tolist() == [0, 0, 1, 0]


def test_state_round_trips_through_json(splits: dict[str, pd.DataFrame]) -> None:
    pre = Preprocessor.fit(splits["train"], FEATURES)
    restored = Preprocessor.from_dict(json.loads(json.dumps(pre.to_dict())))
    assert restored == pre
    for a, b in zip(pre.transform(splits["test"]), restored.transform(splits["test"]), strict=True):
        np.testing.assert_array_equal(a, b)
