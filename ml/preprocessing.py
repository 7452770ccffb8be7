"""Train-split-only preprocessing: categorical vocabularies and numeric standardisation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ml.config import FeatureConfig, config_from_dict, config_to_dict
from ml.labels import class_indices

OOV_INDEX = 0


@dataclass
class Preprocessor:
    """Maps a feature table to an int64 category matrix and a float32 numeric matrix.

    Categorical index 0 is the shared bucket for missing, rare and unseen values. Every numeric
    column becomes two inputs: its standardised value (0 when missing) and a missing indicator.
    """

    features: FeatureConfig
    vocabularies: dict[str, list[str]]
    means: list[float]
    stds: list[float]

    @classmethod
    def fit(cls, train: pd.DataFrame, features: FeatureConfig) -> Preprocessor:
        """Fit vocabularies and standardisation statistics on the training split only."""
        vocabularies = {
            col: _vocabulary(train[col], features.min_category_frequency)
            for col in features.categorical
        }
        values = _numeric_values(train, features.numeric)
        with np.errstate(all="ignore"):
            observed = ~np.isnan(values)
            counts = observed.sum(axis=0)
            means = np.where(counts > 0, np.nansum(values, axis=0) / np.maximum(counts, 1), 0.0)
            sq = np.nansum((values - means) ** 2, axis=0) / np.maximum(counts, 1)
        stds = np.sqrt(sq)
        # A constant or all-missing column must not divide by zero at transform time.
        stds = np.where(stds > 1e-12, stds, 1.0)
        return cls(features, vocabularies, means.tolist(), stds.tolist())

    @property
    def cardinalities(self) -> list[int]:
        """Embedding table sizes per categorical column, including the OOV bucket."""
        return [len(self.vocabularies[c]) + 1 for c in self.features.categorical]

    @property
    def n_numeric_inputs(self) -> int:
        """Width of the numeric matrix: one value and one missing indicator per column."""
        return 2 * len(self.features.numeric)

    def transform(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Return the (n, n_categorical) int64 and (n, 2 * n_numeric) float32 feature matrices."""
        categorical = np.zeros((len(frame), len(self.features.categorical)), dtype=np.int64)
        for j, col in enumerate(self.features.categorical):
            codes = pd.Categorical(_as_string(frame[col]), categories=self.vocabularies[col]).codes
            # Categorical codes are -1 for missing and unseen values, so +1 lands them on OOV 0.
            categorical[:, j] = codes.astype(np.int64) + 1
        values = _numeric_values(frame, self.features.numeric)
        missing = np.isnan(values)
        scaled = (values - np.asarray(self.means)) / np.asarray(self.stds)
        scaled[missing] = 0.0
        numeric = np.concatenate([scaled, missing], axis=1).astype(np.float32)
        return categorical, numeric

    def labels(self, frame: pd.DataFrame) -> np.ndarray:
        """Return the binary label as a float32 vector, or with ``features.classes`` each
        row's class index as an int64 vector (missing labels, and values that are no class,
        are an error)."""
        label = frame[self.features.label]
        if self.features.classes is not None:
            return class_indices(label, self.features.classes, self.features.label)
        if label.isna().any():
            raise ValueError(f"label column {self.features.label!r} has missing values")
        return label.to_numpy(dtype=np.float32)

    def weights(self, frame: pd.DataFrame) -> np.ndarray | None:
        """Return the rows' weights as a float32 vector, or None when the features name no
        weight column. A missing column, or a weight that is missing, negative or infinite, is
        an error naming how many rows hold one."""
        column = self.features.weight
        if column is None:
            return None
        if column not in frame.columns:
            raise ValueError(f"weight column {column!r} is not in the table")
        weights = pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)
        bad = ~np.isfinite(weights) | (weights < 0)
        if bad.any():
            raise ValueError(
                f"weight column {column!r} has {int(bad.sum())} missing, negative or infinite "
                f"values (of {len(weights)} rows)"
            )
        if len(weights) and weights.sum() <= 0:
            raise ValueError(f"weight column {column!r} is zero in every row")
        return weights.astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        """Return the fitted state as a JSON-serialisable dict."""
        return {
            "features": config_to_dict(self.features),
            "vocabularies": self.vocabularies,
            "means": self.means,
            "stds": self.stds,
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> Preprocessor:
        """Rebuild a fitted preprocessor from ``to_dict`` output."""
        return cls(
            features=config_from_dict(FeatureConfig, state["features"]),
            vocabularies={k: list(v) for k, v in state["vocabularies"].items()},
            means=list(state["means"]),
            stds=list(state["stds"]),
        )


def _as_string(series: pd.Series) -> pd.Series:
    # Vocabularies are stored as strings so the state stays JSON; cast values the same way.
    return series.astype("string")


def _vocabulary(series: pd.Series, min_frequency: int) -> list[str]:
    counts = _as_string(series).value_counts(dropna=True)
    return sorted(str(v) for v in counts[counts >= min_frequency].index)


def _numeric_values(frame: pd.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    if not columns:
        return np.zeros((len(frame), 0), dtype=np.float64)
    return frame[list(columns)].to_numpy(dtype=np.float64, na_value=np.nan)
