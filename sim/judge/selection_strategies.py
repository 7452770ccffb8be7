"""Ways to spend a day's label budget, screened by sim.judge.selection_screen.

Each strategy takes the day's flights as the current model sees them (`DayView`) and returns
the positions it picks among them and each pick's training weight. All but `uniform` spend the
audit share (`round(budget * audit_share)`) on a uniform sample first, as the export does:

- `uniform`: every pick drawn uniformly;
- `current`: the project's own choice, `pipelines.labeling.selection.select_for_labeling`
  (without drift-flagged segments: they need the drift monitor's flags);
- `margin`: the rest by the calibrated probability's distance to the recent late rate,
  |p' - prior|, smallest first, where p' is the score after the prior shift
  (`ml.calibration.prior_shift`) that makes the recent uniform labels' scores average them;
- `disagreement`: the rest by the spread of the scores of models fitted on bootstrap resamples
  of the labels, largest first;
- `pps`: a systematic sample with inclusion probabilities proportional to a defensive mixture,
  audit share x uniform + the rest x p(1 - p); each pick weighs 1 / its inclusion probability
  (Horvitz-Thompson) in training.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ml.calibration import prior_shift, shift
from pipelines.labeling.selection import UNIFORM_REASONS, select_for_labeling


@dataclass(frozen=True)
class DayView:
    """A day's flights as the current model sees them."""

    ids: np.ndarray  # flight ids
    scores: np.ndarray  # the model's P(late)
    members: np.ndarray | None  # (members, flights): bootstrap models' P(late)
    # The current model's scores of the uniform picks labelled lately, and their outcomes.
    recent_scores: np.ndarray
    recent_late: np.ndarray


# Positions picked, each one's training weight, and whether it was drawn uniformly.
Picks = tuple[np.ndarray, np.ndarray, np.ndarray]
Strategy = Callable[[DayView, int, float, np.random.Generator], Picks]
# Fewer recent uniform labels than this: no prior shift (monitoring.recalibration_min_labels).
MIN_RECALIBRATION_LABELS = 100


def uniform(view: DayView, budget: int, audit_share: float, rng: np.random.Generator) -> Picks:
    """`budget` flights drawn uniformly."""
    n = min(budget, len(view.ids))
    return np.sort(rng.choice(len(view.ids), n, replace=False)), np.ones(n), np.ones(n, bool)


def current(view: DayView, budget: int, audit_share: float, rng: np.random.Generator) -> Picks:
    """The export's selection: an audit sample, then the least sure by |score - 0.5|."""
    candidates = pd.DataFrame({"flight_id": view.ids, "score": view.scores})
    chosen = select_for_labeling(
        candidates, budget, audit_share, int(rng.integers(2**31)), example_id="flight_id"
    )
    positions = pd.Index(view.ids).get_indexer(chosen.flight_id)
    return positions, np.ones(len(positions)), chosen.reason.isin(UNIFORM_REASONS).to_numpy()


def calibrated(view: DayView) -> tuple[np.ndarray, float]:
    """The day's scores after the prior shift to the recent uniform labels, and their late
    rate (the day's mean score when too few came back)."""
    if len(view.recent_late) < MIN_RECALIBRATION_LABELS:
        return view.scores, float(np.mean(view.scores))
    delta = prior_shift(view.recent_scores, view.recent_late)
    return shift(view.scores, delta), float(np.mean(view.recent_late))


def margin(view: DayView, budget: int, audit_share: float, rng: np.random.Generator) -> Picks:
    """An audit sample, then the smallest |calibrated score - prior|."""
    probs, prior = calibrated(view)
    return _audit_then(-np.abs(probs - prior), budget, audit_share, rng)


def disagreement(view: DayView, budget: int, audit_share: float, rng: np.random.Generator) -> Picks:
    """An audit sample, then the largest spread of the bootstrap members' scores."""
    if view.members is None:
        raise ValueError("disagreement needs the bootstrap members' scores")
    return _audit_then(view.members.std(axis=0), budget, audit_share, rng)


def _audit_then(
    priority: np.ndarray, budget: int, audit_share: float, rng: np.random.Generator
) -> Picks:
    """A uniform audit sample, then the highest `priority` (ties at random) up to `budget`."""
    n = len(priority)
    audit = rng.choice(n, min(round(budget * audit_share), n), replace=False)
    order = np.lexsort((rng.random(n), -priority))
    rest = order[~np.isin(order, audit)][: max(min(budget, n) - len(audit), 0)]
    picks = np.concatenate([audit, rest])
    return picks, np.ones(len(picks)), np.arange(len(picks)) < len(audit)


def inclusion_probabilities(scores: np.ndarray, budget: int, audit_share: float) -> np.ndarray:
    """Each flight's chance to be picked: `budget` x (audit share / flights + (1 - audit share)
    x p(1 - p) / its sum), those above 1 set to 1 and the rest scaled up again to sum to
    `budget` (all 1 when `budget` covers every flight)."""
    n = len(scores)
    if budget >= n:
        return np.ones(n)
    u = scores * (1 - scores)
    size = u / u.sum() if u.sum() > 0 else np.full(n, 1 / n)
    size = audit_share / n + (1 - audit_share) * size
    pi, capped = np.zeros(n), np.zeros(n, dtype=bool)
    while True:
        left = budget - capped.sum()
        pi = np.where(capped, 1.0, left * size / size[~capped].sum())
        over = (pi > 1) & ~capped
        if not over.any():
            return pi
        capped |= over


def systematic_sample(pi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Positions drawn by systematic sampling in a random order: each position with its
    probability `pi`, round(sum(pi)) of them in all."""
    order = rng.permutation(len(pi))
    edges = np.concatenate([[0.0], np.cumsum(pi[order])])
    points = rng.random() + np.arange(round(edges[-1]))
    hit = np.searchsorted(edges, points, side="right") - 1
    return np.sort(order[np.unique(hit)])


def pps(view: DayView, budget: int, audit_share: float, rng: np.random.Generator) -> Picks:
    """A sample with probability proportional to the defensive p(1 - p) mixture, weighted by
    the inverse of each pick's inclusion probability."""
    pi = inclusion_probabilities(view.scores, budget, audit_share)
    picks = systematic_sample(pi, rng)
    return picks, 1.0 / pi[picks], np.zeros(len(picks), bool)


STRATEGIES: dict[str, Strategy] = {
    "uniform": uniform,
    "current": current,
    "margin": margin,
    "disagreement": disagreement,
    "pps": pps,
}
