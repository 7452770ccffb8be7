"""Labels with several ordered classes: label values to class indices, and a model's output.

A binary model's output is P(true) per row, shape (n,). A model of K >= 3 classes
(``FeatureConfig.classes``) predicts an (n, K) matrix of probabilities whose column k is
``classes[k]``; its one score per row (for drift monitoring, the predictions table, plots) is
``score_of``: the expected class index over K - 1, in [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

# The columns of a multi-class model's scored output (``output_frame``): the score, then one
# probability per class, ``p_0`` .. ``p_<K-1>`` in ``classes`` order.
SCORE_COLUMN = "score"
PROBABILITY_PREFIX = "p_"


def class_indices(values: ArrayLike, classes: Sequence[Any], column: str = "label") -> np.ndarray:
    """Map label values to their int64 index in ``classes``; a missing value, or one that is
    not a class, is a ValueError naming ``column`` (and the first such value)."""
    series = values if isinstance(values, pd.Series) else pd.Series(np.asarray(values))
    if series.isna().any():
        raise ValueError(f"label column {column!r} has missing values")
    index = pd.Index(list(classes)).get_indexer(series)
    if (unknown := index < 0).any():
        value = series[unknown].iloc[0]
        value = value.item() if isinstance(value, np.generic) else value
        raise ValueError(
            f"label column {column!r} holds {value!r} ({int(unknown.sum())} rows), "
            f"which is not one of its classes {pd.Index(list(classes)).tolist()}"
        )
    return index.astype(np.int64)


def score_of(probs: ArrayLike) -> np.ndarray:
    """One score per row: P(true) for binary (n,) probabilities, as they are; for (n, K)
    probabilities the expected class index divided by K - 1 (an ordinal mean in [0, 1])."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim == 1:
        return p
    if p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"probabilities must be (n,) or (n, K >= 2), got shape {p.shape}")
    k = p.shape[1]
    return p @ np.arange(k, dtype=np.float64) / (k - 1)


def output_frame(probs: np.ndarray) -> np.ndarray | pd.DataFrame:
    """A model's scored output: binary (n,) probabilities unchanged; (n, K) probabilities as a
    frame of ``score`` (``score_of``) and ``p_0`` .. ``p_<K-1>``."""
    if probs.ndim == 1:
        return probs
    columns = {f"{PROBABILITY_PREFIX}{k}": probs[:, k] for k in range(probs.shape[1])}
    return pd.DataFrame({SCORE_COLUMN: score_of(probs), **columns})


def probabilities_from_output(output: Any) -> np.ndarray:
    """The probabilities of a scored output (``output_frame``, or the pyfunc model's): (n,)
    for a binary model's vector, (n, K) from a multi-class model's ``p_<k>`` columns."""
    if not isinstance(output, pd.DataFrame):
        return np.asarray(output, dtype=np.float64).ravel()
    names = [c for c in output.columns if str(c).startswith(PROBABILITY_PREFIX)]
    if not names:
        raise ValueError(f"output has no {PROBABILITY_PREFIX}<k> columns: {list(output.columns)}")
    names.sort(key=lambda c: int(str(c).removeprefix(PROBABILITY_PREFIX)))
    return output[names].to_numpy(dtype=np.float64)
