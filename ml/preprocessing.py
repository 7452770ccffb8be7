"""Train-split-only preprocessing: categorical vocabularies and numeric standardisation or
quantile encoding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ml.config import FeatureConfig, config_from_dict, config_to_dict

OOV_INDEX = 0
# Quantiles kept per numeric column for `numeric_encoding: quantile` (fewer when the train split
# has fewer observed values), and how close to 0 or 1 a quantile may come before it is mapped
# to the standard normal (the ends stay finite: about +-5.2).
N_QUANTILES = 256
QUANTILE_BOUND = 1e-7


@dataclass
class Preprocessor:
    """Maps a feature table to an int64 category matrix and a float32 numeric matrix.

    Categorical index 0 is the shared bucket for missing, rare and unseen values. Every numeric
    column becomes two inputs: its encoded value (0 when missing) and a missing indicator. The
    value is standardised, or with ``features.numeric_encoding == "quantile"`` its quantile among
    the train split's values, mapped through the standard normal's inverse distribution
    function (scikit-learn's ``QuantileTransformer(output_distribution="normal")``, ties at their
    mid-rank): 0 is the train median.
    """

    features: FeatureConfig
    vocabularies: dict[str, list[str]]
    means: list[float]
    stds: list[float]
    # Per numeric column, its train quantiles at evenly spaced ranks (quantile encoding only).
    quantiles: list[list[float]] | None = None

    @classmethod
    def fit(cls, train: pd.DataFrame, features: FeatureConfig | None = None) -> Preprocessor:
        """Fit vocabularies and standardisation statistics on the training split only."""
        features = features or FeatureConfig()
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
        quantiles = None
        if features.numeric_encoding == "quantile":
            quantiles = [_quantiles(values[:, j]) for j in range(values.shape[1])]
        elif features.numeric_encoding != "standard":
            raise ValueError(
                f"numeric_encoding must be 'standard' or 'quantile', "
                f"not {features.numeric_encoding!r}"
            )
        return cls(features, vocabularies, means.tolist(), stds.tolist(), quantiles)

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
        if self.quantiles is None:
            scaled = (values - np.asarray(self.means)) / np.asarray(self.stds)
        else:
            scaled = np.column_stack(
                [_normal_scores(values[:, j], q) for j, q in enumerate(self.quantiles)]
            ).reshape(values.shape)
        scaled[missing] = 0.0
        numeric = np.concatenate([scaled, missing], axis=1).astype(np.float32)
        return categorical, numeric

    def labels(self, frame: pd.DataFrame) -> np.ndarray:
        """Return the binary label as a float32 vector (missing labels are an error)."""
        label = frame[self.features.label]
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
        } | ({} if self.quantiles is None else {"quantiles": self.quantiles})

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> Preprocessor:
        """Rebuild a fitted preprocessor from ``to_dict`` output."""
        return cls(
            features=config_from_dict(FeatureConfig, state["features"]),
            vocabularies={k: list(v) for k, v in state["vocabularies"].items()},
            means=list(state["means"]),
            stds=list(state["stds"]),
            quantiles=[list(q) for q in state["quantiles"]] if "quantiles" in state else None,
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


def _quantiles(column: np.ndarray) -> list[float]:
    """The observed values' quantiles at up to N_QUANTILES evenly spaced ranks ([] if none)."""
    observed = column[~np.isnan(column)]
    if not len(observed):
        return []
    ranks = np.linspace(0.0, 1.0, min(N_QUANTILES, len(observed)))
    return np.quantile(observed, ranks).tolist()


def _normal_scores(column: np.ndarray, quantiles: list[float]) -> np.ndarray:
    """Each value's rank among ``quantiles`` as a standard normal score (0 for a column the train
    split never observed). A value equal to several quantiles takes the middle of their ranks."""
    if len(quantiles) < 2:
        return np.zeros(len(column))
    import torch  # the inverse normal distribution function; numpy has none

    points = np.asarray(quantiles)
    ranks = np.linspace(0.0, 1.0, len(points))
    # Interpolated upwards and downwards: on a run of equal quantiles (a column mostly 0) the two
    # give the run's first and last rank, and their mean its middle.
    up = np.interp(column, points, ranks)
    down = -np.interp(-column, -points[::-1], -ranks[::-1])
    ranks = np.clip((up + down) / 2, QUANTILE_BOUND, 1 - QUANTILE_BOUND)
    return torch.special.ndtri(torch.from_numpy(ranks)).numpy()
