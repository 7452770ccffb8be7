"""Distribution drift against the training profile: PSI, KS and segment shifts."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from ml.labels import probabilities_from_output, score_of

MISSING = "__missing__"
PREDICTION = "prediction"
PSI_EPS = 1e-4
_KOLMOGOROV_TERMS = np.arange(1, 101)
DRIFT_COLUMNS = [
    *["feature", "kind", "psi", "ks", "ks_pvalue"],
    *["n_training", "n_current", "missing_share_current"],
]


def psi(expected: ArrayLike, actual: ArrayLike, eps: float = PSI_EPS) -> float:
    """Population stability index sum((a - e) * ln(a / e)) over proportions floored at ``eps``."""
    e, a = _proportions(expected), _proportions(actual)
    if e.shape != a.shape:
        raise ValueError(f"psi needs the same bins; got {e.size} and {a.size}")
    e, a = np.maximum(e, eps), np.maximum(a, eps)
    return float(np.sum((a - e) * np.log(a / e)))


def quantile_bin_edges(values: ArrayLike, n_bins: int = 10) -> np.ndarray:
    """Unique interior bin edges at the quantiles of the non-missing ``values``."""
    v = _floats(values)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return np.empty(0)
    return np.unique(np.quantile(v, np.linspace(0, 1, n_bins + 1)[1:-1]))


def binned_proportions(values: ArrayLike, edges: ArrayLike) -> np.ndarray:
    """Share of ``values`` in the bins (-inf, e0], (e0, e1], ..., (ek, inf), then missing (NaN)."""
    v = _floats(values)
    if v.size == 0:
        raise ValueError("binned_proportions needs at least one value")
    edges = np.asarray(edges, dtype=np.float64)
    missing = np.isnan(v)
    # side="left" counts the edges strictly below a value: bins are closed on the right.
    bins = np.searchsorted(edges, v[~missing], side="left")
    counts = np.bincount(bins, minlength=edges.size + 1).astype(np.float64)
    return np.r_[counts, missing.sum()] / v.size


def ks_statistic(training: ArrayLike, current: ArrayLike) -> float:
    """Two-sample Kolmogorov-Smirnov D: the largest gap between the two ECDFs, NaN ignored."""
    r, c = (np.sort(x[~np.isnan(x)]) for x in (_floats(training), _floats(current)))
    if r.size == 0 or c.size == 0:
        raise ValueError("ks_statistic needs non-missing values in both samples")
    points = np.concatenate([r, c])
    gap = (
        np.searchsorted(r, points, "right") / r.size - np.searchsorted(c, points, "right") / c.size
    )
    return float(np.max(np.abs(gap)))


def ks_pvalue(d: float, n: int, m: int) -> float:
    """Asymptotic p-value of a two-sample KS statistic ``d`` from the Kolmogorov distribution."""
    if n <= 0 or m <= 0:
        raise ValueError(f"ks_pvalue needs two non-empty samples; got n={n}, m={m}")
    lam = d * np.sqrt(n * m / (n + m))
    if lam <= 0:
        return 1.0
    j = _KOLMOGOROV_TERMS
    if lam < 1:
        # The alternating series converges slowly for small lambda; Jacobi's form does not.
        cdf = np.sqrt(2 * np.pi) / lam * np.exp(-((2 * j - 1) ** 2) * np.pi**2 / (8 * lam**2)).sum()
        return float(np.clip(1 - cdf, 0.0, 1.0))
    terms = 2 * (-1.0) ** (j - 1) * np.exp(-2 * j**2 * lam**2)
    return float(np.clip(terms.sum(), 0.0, 1.0))


@dataclass
class NumericProfile:
    """A numeric feature's profile: bin edges, bin proportions (missing last) and a sample."""

    edges: list[float]
    proportions: list[float]
    sample: list[float]


@dataclass
class TrainingProfile:
    """What drift is measured against: category shares and numeric bins from training data."""

    n_rows: int
    categorical: dict[str, dict[str, float]] = field(default_factory=dict)
    numeric: dict[str, NumericProfile] = field(default_factory=dict)
    prediction: NumericProfile | None = None

    def to_dict(self) -> dict:
        """Return a JSON-serialisable dict that ``from_dict`` reads back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainingProfile:
        """Rebuild a profile from ``to_dict`` output (for example after a JSON round trip)."""
        prediction = data.get("prediction")
        return cls(
            n_rows=int(data["n_rows"]),
            categorical={k: dict(v) for k, v in data["categorical"].items()},
            numeric={k: NumericProfile(**v) for k, v in data["numeric"].items()},
            prediction=None if prediction is None else NumericProfile(**prediction),
        )


def build_training_profile(
    frame: pd.DataFrame,
    categorical: Sequence[str],
    numeric: Sequence[str],
    predictions: ArrayLike | None = None,
    n_bins: int = 10,
    sample_size: int = 5000,
    seed: int = 0,
) -> TrainingProfile:
    """Profile ``frame``'s features (and optionally the model's predictions) for drift checks.

    ``predictions`` are one score per row, or a multi-class model's (n, K) probabilities (or its
    scored output frame), profiled as their score (``ml.labels.score_of``)."""

    def numeric_profile(name: str, values: ArrayLike) -> NumericProfile:
        v = _floats(values)
        edges = quantile_bin_edges(v, n_bins)
        present = v[~np.isnan(v)]
        # Seeded per feature name, so profiling another feature leaves this sample unchanged.
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        sample = rng.choice(present, size=min(sample_size, present.size), replace=False)
        return NumericProfile(
            edges.tolist(), binned_proportions(v, edges).tolist(), np.sort(sample).tolist()
        )

    prediction = None
    if predictions is not None:
        # Scores may come from another sample of the population (e.g. later days' rows).
        prediction = numeric_profile(PREDICTION, _scores(predictions))
    return TrainingProfile(
        n_rows=len(frame),
        categorical={c: _category_shares(frame[c]).to_dict() for c in categorical},
        numeric={c: numeric_profile(c, frame[c]) for c in numeric},
        prediction=prediction,
    )


def feature_drift(
    profile: TrainingProfile, frame: pd.DataFrame, predictions: ArrayLike | None = None
) -> pd.DataFrame:
    """PSI per feature (plus KS for numeric features and predictions) of ``frame`` vs profile.

    Categories training never saw share one "unseen" bin whose training share is 0.
    ``predictions`` are scores or probabilities as ``build_training_profile`` takes them.
    """
    if absent := [c for c in (*profile.categorical, *profile.numeric) if c not in frame]:
        raise KeyError(f"frame lacks the profiled features {absent}")
    rows = []
    for name, shares in profile.categorical.items():
        expected, actual = _aligned_shares(shares, _category_shares(frame[name]))
        missing = float(frame[name].isna().mean())
        rows.append((name, "categorical", psi(expected, actual), np.nan, np.nan, missing))
    numeric = [(name, ref, "numeric", frame[name]) for name, ref in profile.numeric.items()]
    if predictions is not None and profile.prediction is not None:
        numeric.append((PREDICTION, profile.prediction, PREDICTION, _scores(predictions)))
    for name, ref, kind, values in numeric:
        v = _floats(values)
        present = v[~np.isnan(v)]
        value_psi = psi(ref.proportions, binned_proportions(v, ref.edges))
        ks, p = np.nan, np.nan
        if ref.sample and present.size:
            ks = ks_statistic(ref.sample, present)
            p = ks_pvalue(ks, len(ref.sample), present.size)
        rows.append((name, kind, value_psi, ks, p, 1 - present.size / v.size))
    sizes = {"n_training": profile.n_rows, "n_current": len(frame)}
    columns = [c for c in DRIFT_COLUMNS if c not in sizes]
    return pd.DataFrame(rows, columns=columns).assign(**sizes)[DRIFT_COLUMNS]


def segment_shift(
    profile: TrainingProfile, frame: pd.DataFrame, feature: str, top: int = 5
) -> pd.DataFrame:
    """The ``top`` categories of one categorical feature ranked by their PSI contribution.

    Categories unseen in training are listed under their own value (training share 0), so
    the contributions add up to ``feature_drift``'s PSI only when at most one category is new.
    """
    if feature not in profile.categorical:
        raise KeyError(f"{feature!r} is not a categorical feature of the profile")
    training = pd.Series(profile.categorical[feature], dtype=np.float64)
    current = _category_shares(frame[feature])
    shares = pd.concat([training, current], axis=1, keys=["ref", "cur"]).fillna(0.0)
    e, a = np.maximum(shares.ref, PSI_EPS), np.maximum(shares.cur, PSI_EPS)
    out = pd.DataFrame(
        {
            "value": shares.index.astype(str),
            "training_share": shares.ref.to_numpy(),
            "current_share": shares.cur.to_numpy(),
            "psi_contribution": ((a - e) * np.log(a / e)).to_numpy(),
        }
    )
    out = out.sort_values(["psi_contribution", "value"], ascending=[False, True], kind="stable")
    return out.head(top).reset_index(drop=True)


def _scores(predictions: ArrayLike | pd.DataFrame) -> ArrayLike:
    """One score per row: scores as given; a multi-class model's probabilities (an (n, K)
    matrix, or its output frame of class probability columns) as ``score_of``."""
    if isinstance(predictions, pd.DataFrame):
        return score_of(probabilities_from_output(predictions))
    if isinstance(predictions, pd.Series):
        return predictions
    values = np.asarray(predictions)
    return score_of(values) if values.ndim == 2 and values.shape[1] > 1 else predictions


def _floats(values: ArrayLike) -> np.ndarray:
    series = values if isinstance(values, pd.Series) else pd.Series(np.asarray(values).ravel())
    return series.astype(np.float64).to_numpy()


def _proportions(counts: ArrayLike) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64).ravel()
    total = c.sum()
    if np.any(c < 0) or not total > 0:
        raise ValueError("proportions need non-negative counts with a positive total")
    return c / total


def _category_shares(values: pd.Series) -> pd.Series:
    # Categories are compared as strings: that is how they survive a JSON round trip.
    keys = values.astype(object).where(values.notna(), MISSING).astype(str)
    return keys.value_counts(normalize=True, sort=False)


def _aligned_shares(training: dict[str, float], current: pd.Series) -> tuple[np.ndarray, ...]:
    known = list(dict.fromkeys([*training, MISSING]))
    expected = np.array([training.get(k, 0.0) for k in known] + [0.0])
    seen = current.index.isin(known)
    actual = np.r_[current.reindex(known, fill_value=0.0).to_numpy(), current[~seen].sum()]
    return expected, actual
