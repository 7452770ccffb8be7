"""Which flights go to annotators: a random audit share, drift segments, then uncertainty."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipelines.labeling.label_studio import SEGMENT_TYPES

# The reasons of picks drawn uniformly from a day's flights: the labels that give unbiased
# estimates (targeted picks favour hard cases).
UNIFORM_REASONS = ("audit", "random")


def select_for_labeling(
    candidates: pd.DataFrame,
    budget: int,
    audit_share: float,
    seed: int,
    flagged_segments: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The candidates to label, at most `budget`, with a `reason` and a `priority` (1 = first).

    Without any score, a seeded uniform sample ("random"). Otherwise a uniform "audit" sample of
    round(budget * audit_share) from all candidates keeps estimates unbiased; then scored flights
    in drift-flagged segments, most uncertain first ("drift_segment", at most half of what is
    left); then scored flights by |score - 0.5| ascending, ties by flight_id ("uncertainty");
    budget still left goes to a uniform sample of unscored flights ("random").
    """
    _check_selection_args(candidates, budget, audit_share, flagged_segments)
    # Sorting first makes the choice independent of the order the candidates arrive in.
    pool = candidates.sort_values("flight_id", kind="stable").reset_index(drop=True)
    rng = np.random.default_rng(seed)
    picks: list[tuple[int, str]] = []
    scored = pool["score"].notna()
    if scored.any():
        n_audit = min(round(budget * audit_share), len(pool))
        picks += [(i, "audit") for i in rng.choice(len(pool), n_audit, replace=False)]
        left = _by_uncertainty(pool, scored, {i for i, _ in picks})
        drift = left[_in_flagged(pool.loc[left], flagged_segments)] if len(left) else left
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
    candidates: pd.DataFrame, budget: int, audit_share: float, flagged: pd.DataFrame | None
) -> None:
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if not 0 <= audit_share <= 1:
        raise ValueError(f"audit_share must be within [0, 1], got {audit_share}")
    needed = {"flight_id", "score"}
    if flagged is not None and not flagged.empty:
        needed |= {"route", "carrier", "origin", "scheduled_hour"}
        if lacking := {"segment_type", "segment_value"} - set(flagged.columns):
            raise ValueError(f"flagged_segments lacks the columns {sorted(lacking)}")
        if unknown := set(flagged["segment_type"]) - set(SEGMENT_TYPES):
            raise ValueError(f"unknown segment types {sorted(unknown)}; expected {SEGMENT_TYPES}")
    if lacking := needed - set(candidates.columns):
        raise ValueError(f"candidates lack the columns {sorted(lacking)}")
    if candidates["flight_id"].duplicated().any():
        raise ValueError("candidates must hold each flight_id once")


def _by_uncertainty(pool: pd.DataFrame, scored: pd.Series, taken: set[int]) -> np.ndarray:
    """Positions of scored, untaken rows, most uncertain first, ties by flight_id."""
    margin = (pool["score"] - 0.5).abs()
    order = pd.DataFrame({"margin": margin, "flight_id": pool["flight_id"]})[scored]
    order = order.drop(index=list(taken), errors="ignore")
    return order.sort_values(["margin", "flight_id"], kind="stable").index.to_numpy()


def _in_flagged(rows: pd.DataFrame, flagged: pd.DataFrame | None) -> np.ndarray:
    """Whether each row lies in one of the drift-flagged segments."""
    if flagged is None or flagged.empty:
        return np.zeros(len(rows), dtype=bool)
    hour = rows["scheduled_hour"].map(lambda h: "" if pd.isna(h) else str(int(h)))
    values = {
        "route": rows["route"].astype(str),
        "carrier": rows["carrier"].astype(str),
        "origin_hour": rows["origin"].astype(str) + "-" + hour,
    }
    hit = np.zeros(len(rows), dtype=bool)
    for kind, group in flagged.groupby("segment_type"):
        hit |= values[str(kind)].isin(set(group["segment_value"].astype(str))).to_numpy()
    return hit
