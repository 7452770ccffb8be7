"""Which examples go to annotators: a random audit share, drift segments, then uncertainty."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

# The reasons of picks drawn uniformly from a day's examples: the labels that give unbiased
# estimates (targeted picks favour hard cases).
UNIFORM_REASONS = ("audit", "random")
# The examples table's column of each label's reason; the training datasets' weight column is
# the model spec's.
REASON_COLUMN = "selection_reason"


def importance_weights(
    reasons: pd.Series, days: pd.Series, day_sizes: pd.Series, exponent: float
) -> np.ndarray:
    """Each labelled example's training weight: how many of its day's examples it stands for,
    raised to `exponent`.

    A day's targeted picks (any reason but audit or random, or none) stand for themselves: 1.
    Its uniform picks are taken as a uniform sample of the day's other examples, so each stands
    for (the day's examples - its targeted picks) / its uniform picks of them, and at least
    itself. With exponent 1 the weighted training loss estimates the loss over every example of
    the labelled days: a post-stratified Horvitz-Thompson estimate, high in variance and nearly
    free of selection bias (the audit picks are drawn from every example before the targeted
    ones, so a few of them stand in the targeted picks' stratum; a day's random picks after
    scored ones come from its unscored examples only). With 0 every label weighs 1; between,
    the weights are tempered.

    `reasons` and `days` are per example; `day_sizes` is indexed by day: how many examples the
    day had, labelled or not.
    """
    if not 0 <= exponent <= 1:
        raise ValueError(f"importance exponent must be within [0, 1], got {exponent}")
    if len(reasons) != len(days):
        raise ValueError(f"{len(reasons)} reasons for {len(days)} days")
    frame = pd.DataFrame(
        {"uniform": reasons.isin(UNIFORM_REASONS).to_numpy(), "day": days.to_numpy()}
    )
    if exponent == 0:
        return np.ones(len(frame))
    per_day = frame.groupby("day").uniform.agg(["sum", "size"])
    sizes = per_day.index.map(day_sizes)
    if (unknown := per_day.index[pd.isna(sizes)]).size:
        raise ValueError(
            f"no example count for {len(unknown)} labelled days (first: {unknown.min()}): "
            "the weights need how many examples each day had"
        )
    uniform, targeted = per_day["sum"], per_day["size"] - per_day["sum"]
    stands_for = ((np.asarray(sizes, dtype=float) - targeted) / uniform.clip(lower=1)).clip(lower=1)
    weights = np.where(frame.uniform, frame.day.map(stands_for).to_numpy(dtype=float), 1.0)
    return weights**exponent


def select_for_labeling(
    candidates: pd.DataFrame,
    budget: int,
    audit_share: float,
    seed: int,
    flagged_segments: pd.DataFrame | None = None,
    *,
    example_id: str,
    segments: Mapping[str, Sequence[str]] | None = None,
) -> pd.DataFrame:
    """The candidates to label, at most `budget`, with a `reason` and a `priority` (1 = first).

    Without any score, a seeded uniform sample ("random"). Otherwise a uniform "audit" sample of
    round(budget * audit_share) from all candidates keeps estimates unbiased; then scored examples
    in drift-flagged segments, most uncertain first ("drift_segment", at most half of what is
    left); then scored examples by their margin ascending, ties by `example_id` ("uncertainty"):
    |score - 0.5| for a binary label, the two likeliest classes' gap where the candidates hold
    each class's probability (`p_0`, `p_1`, ...);
    budget still left goes to a uniform sample of unscored examples ("random").

    A flagged segment type is a column of the candidates, or one of `segments`: a composite
    whose value is its columns' values joined by "-".
    """
    segments = dict(segments or {})
    _check_selection_args(candidates, budget, audit_share, flagged_segments, example_id, segments)
    # Sorting first makes the choice independent of the order the candidates arrive in.
    pool = candidates.sort_values(example_id, kind="stable").reset_index(drop=True)
    rng = np.random.default_rng(seed)
    picks: list[tuple[int, str]] = []
    scored = pool["score"].notna()
    if scored.any():
        n_audit = min(round(budget * audit_share), len(pool))
        picks += [(i, "audit") for i in rng.choice(len(pool), n_audit, replace=False)]
        left = _by_uncertainty(pool, scored, {i for i, _ in picks}, example_id)
        in_flagged = _in_flagged(pool.loc[left], flagged_segments, segments)
        drift = left[in_flagged] if len(left) else left
        picks += [(i, "drift_segment") for i in drift[: (budget - len(picks)) // 2]]
        taken = {i for i, _ in picks}
        picks += [(i, "uncertainty") for i in left if i not in taken][: budget - len(picks)]
    taken = {i for i, _ in picks}
    unscored = np.array([i for i in range(len(pool)) if i not in taken and not scored[i]])
    n_random = min(budget - len(picks), len(unscored))
    picks += (
        [(i, "random") for i in rng.choice(unscored, n_random, replace=False)] if n_random else []
    )
    chosen = pool.loc[[i for i, _ in picks]].reset_index(drop=True)
    return chosen.assign(
        reason=[reason for _, reason in picks], priority=np.arange(1, len(picks) + 1)
    )


def _check_selection_args(
    candidates: pd.DataFrame,
    budget: int,
    audit_share: float,
    flagged: pd.DataFrame | None,
    example_id: str,
    segments: Mapping[str, Sequence[str]],
) -> None:
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if not 0 <= audit_share <= 1:
        raise ValueError(f"audit_share must be within [0, 1], got {audit_share}")
    needed = {example_id, "score"}
    if flagged is not None and not flagged.empty:
        if lacking := {"segment_type", "segment_value"} - set(flagged.columns):
            raise ValueError(f"flagged_segments lacks the columns {sorted(lacking)}")
        for kind in sorted(set(flagged["segment_type"].astype(str))):
            if kind not in segments and kind not in candidates.columns:
                raise ValueError(
                    f"unknown segment type {kind!r}: neither a column of the candidates nor a "
                    f"composite segment ({sorted(segments)})"
                )
            needed |= set(segments.get(kind, (kind,)))
    if lacking := needed - set(candidates.columns):
        raise ValueError(f"candidates lack the columns {sorted(lacking)}")
    if candidates[example_id].duplicated().any():
        raise ValueError(f"candidates must hold each {example_id} once")


def _by_uncertainty(
    pool: pd.DataFrame, scored: pd.Series, taken: set[int], example_id: str
) -> np.ndarray:
    """Positions of scored, untaken rows, most uncertain first, ties by example id."""
    classes = [c for c in pool.columns if c.startswith("p_") and c[2:].isdigit()]
    if len(classes) > 1:
        top = np.sort(pool[classes].to_numpy(dtype=np.float64), axis=1)
        margin = pd.Series(top[:, -1] - top[:, -2], index=pool.index)
    else:
        margin = (pool["score"] - 0.5).abs()
    order = pd.DataFrame({"margin": margin, "id": pool[example_id]})[scored]
    order = order.drop(index=list(taken), errors="ignore")
    return order.sort_values(["margin", "id"], kind="stable").index.to_numpy()


def _in_flagged(
    rows: pd.DataFrame, flagged: pd.DataFrame | None, segments: Mapping[str, Sequence[str]]
) -> np.ndarray:
    """Whether each row lies in one of the drift-flagged segments."""
    if flagged is None or flagged.empty:
        return np.zeros(len(rows), dtype=bool)
    hit = np.zeros(len(rows), dtype=bool)
    for kind, group in flagged.groupby("segment_type"):
        columns = segments.get(str(kind), (str(kind),))
        parts = [rows[c].map(_segment_text) for c in columns]
        values = parts[0].str.cat(parts[1:], sep="-") if len(parts) > 1 else parts[0]
        hit |= values.isin(set(group["segment_value"].astype(str))).to_numpy()
    return hit


def _segment_text(value: object) -> str:
    """A segment part as monitoring and dbt write it: whole numbers without a decimal point."""
    if value is None or (pd.api.types.is_scalar(value) and pd.isna(value)):
        return ""
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)
