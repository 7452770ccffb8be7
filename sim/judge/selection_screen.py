"""A fast replay of the labeling loop that screens ways to pick labels (selection_strategies).

No orchestration: each day the current model, the report's reference learner (a
HistGradientBoosting classifier, sim.judge.reference) refitted every `refit_days` on the labels
of the days before, scores the day's flights; a strategy picks `budget` of them; their outcomes
come back `latency_days` later and join the training pool. The features computed from labels
(sim.judge.label_features) are computed from the replay's own labels, as the warehouse computes
them from the flywheel's: a day's from the labels known before it. Before the first model,
every strategy draws uniformly.

Each week from `scored_from` on is scored as the report scores the flywheel (`production_auc`):
every flight of the week, by the scores the model gave it on its day.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date, timedelta

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from sim.judge.label_features import COLUMNS, day_numbers, segment_codes, window_features
from sim.judge.reference import MIN_TRAINING_ROWS, Columns, production_auc
from sim.judge.selection_strategies import STRATEGIES, DayView

RECALIBRATION_DAYS = 14  # monitoring.recalibration_days


@dataclass(frozen=True)
class ScreenConfig:
    """The replay's budget, cadence and learner."""

    budget: int = 150  # pipelines.defs.labeling.assets' default
    audit_share: float = 0.4  # likewise
    refit_days: int = 7
    latency_days: int = 1  # the world's annotators answer the day after the flight
    members: int = 3  # bootstrap models for `disagreement`
    max_iter: int = 100  # HistGradientBoosting's default
    member_max_iter: int = 100  # the bootstrap members'
    scored_from: date = date(2013, 4, 1)  # a Monday: the first week scored


class World:
    """The replayed flights as numbers, computed once for every replay of them."""

    def __init__(self, examples: pd.DataFrame, features: FeatureConfig, time_column: str) -> None:
        base = replace(
            features,
            numeric=tuple(c for c in features.numeric if c not in COLUMNS),
            categorical=tuple(c for c in features.categorical if c not in COLUMNS),
        )
        self.examples = examples.reset_index(drop=True)
        self.ids = self.examples[features.id_columns[0]].to_numpy()
        self.columns = Columns(self.examples, base)
        self.codes = segment_codes(self.examples)
        self.days = day_numbers(self.examples[time_column])
        self.labels = self.examples[features.label].to_numpy(dtype=np.int64)
        order = np.argsort(self.days, kind="stable")
        bounds = np.searchsorted(self.days[order], np.unique(self.days), side="left")
        self.day_rows = dict(
            zip(np.unique(self.days).tolist(), np.split(order, bounds[1:]), strict=True)
        )


@dataclass
class Pool:
    """The labels bought so far: rows, outcomes, the day each became known, training weights
    and whether it was drawn uniformly."""

    rows: np.ndarray
    late: np.ndarray
    known: np.ndarray
    weight: np.ndarray
    uniform: np.ndarray

    @classmethod
    def empty(cls) -> Pool:
        """No labels yet."""
        return cls(*(np.zeros(0, t) for t in (np.int64, np.float64, np.int64, np.float64, bool)))

    def add(
        self,
        rows: np.ndarray,
        late: np.ndarray,
        known: np.ndarray,
        weight: np.ndarray,
        uniform: np.ndarray,
    ) -> None:
        """Append labels, one value of each per label."""
        for name, values in zip(
            ("rows", "late", "known", "weight", "uniform"),
            (rows, late, known, weight, uniform),
            strict=True,
        ):
            setattr(self, name, np.concatenate([getattr(self, name), values]))


class Model:
    """The reference learner fitted at a day on the pool's labels of the days before, with the
    encoding of the rows it may score (the days ahead and the recent ones)."""

    def __init__(
        self,
        world: World,
        pool: Pool,
        label_x: np.ndarray,
        day: int,
        seed: int,
        config: ScreenConfig,
        members: int,
    ) -> None:
        before = world.days[pool.rows] < day
        train = pool.rows[before]
        ahead = np.flatnonzero(
            (world.days >= day - RECALIBRATION_DAYS - 2) & (world.days < day + config.refit_days)
        )
        x_train, self.x_other, categorical = world.columns.matrices(train, ahead)
        self.slot = np.full(len(world.days), -1)
        self.slot[ahead] = np.arange(len(ahead))
        self.label_x = label_x
        self.keep = ~np.isnan(label_x[train]).all(axis=0)
        self.categorical = np.concatenate([categorical, np.zeros(self.keep.sum(), bool)])
        x = np.hstack([x_train, label_x[train][:, self.keep]])
        y, w = pool.late[before].astype(np.int64), pool.weight[before]
        self.models = [self._fit(x, y, w, seed, config.max_iter)]
        rng = np.random.default_rng(seed)
        for _ in range(members):
            sample = rng.integers(len(y), size=len(y))
            self.models.append(
                self._fit(x[sample], y[sample], w[sample], seed, config.member_max_iter)
            )

    def _fit(self, x: np.ndarray, y: np.ndarray, w: np.ndarray, seed: int, max_iter: int) -> object:
        from sklearn.ensemble import HistGradientBoostingClassifier

        model = HistGradientBoostingClassifier(
            categorical_features=self.categorical, random_state=seed, max_iter=max_iter
        )
        # Equal weights are no weights; given anyway, they would send the binning to its slow
        # weighted-quantile path.
        return model.fit(x, y, sample_weight=None if np.all(w == w[0]) else w)

    def scores(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """P(late) of the rows (of the days it may score), and each bootstrap member's."""
        x = np.hstack([self.x_other[self.slot[rows]], self.label_x[rows][:, self.keep]])
        probs = [m.predict_proba(x)[:, 1] for m in self.models]
        return probs[0], (np.vstack(probs[1:]) if len(probs) > 1 else None)


def trainable(world: World, pool: Pool, day: int) -> bool:
    """Whether the pool's labels of the days before `day` are enough for a model."""
    y = pool.late[world.days[pool.rows] < day]
    return len(y) >= MIN_TRAINING_ROWS and 0 < y.sum() < len(y)


def stream(seed: int, name: str) -> np.random.Generator:
    """The random draws of one strategy's replay under `seed`."""
    digest = hashlib.sha256(f"selection-screen/{seed}/{name}".encode()).hexdigest()[:8]
    return np.random.default_rng(int(digest, 16))


def replay(
    world: World,
    strategy: str,
    seed: int,
    config: ScreenConfig,
    on_labels: Callable[[np.ndarray, np.ndarray, int], None] | None = None,
) -> pd.DataFrame:
    """A row per scored week (`week`, its Monday): the production AUC of the scores the replay
    gave its flights on their days (`auc`), and how many labels the week's model learned from
    (`labels`). `on_labels` is told of each day's picks: their rows, the scores they were served
    (NaN before the first model) and the day number their labels become known."""
    pick, rng = STRATEGIES[strategy], stream(seed, strategy)
    members = config.members if strategy == "disagreement" else 0
    pool, model, trained_on = Pool.empty(), None, {}
    label_x = np.full((len(world.days), len(COLUMNS)), np.nan)
    # The scores each flight got on its day, and the current model's (for the prior shift).
    served, now = np.full(len(world.days), np.nan), np.full(len(world.days), np.nan)
    first = day_numbers([config.scored_from])[0]
    for day, rows in world.day_rows.items():
        label_x[rows] = window_features(world.codes, rows, day, pool.rows, pool.late, pool.known)
        if (day - first) % config.refit_days == 0 and trainable(world, pool, day):
            model = Model(world, pool, label_x, day, seed, config, members)
            trained_on[day] = int((world.days[pool.rows] < day).sum())
            recent = np.flatnonzero(model.slot >= 0)
            recent = recent[world.days[recent] < day]
            now[recent] = model.scores(recent)[0]
        if model is None:
            view = DayView(
                world.ids[rows], np.full(len(rows), np.nan), None, np.zeros(0), np.zeros(0)
            )
            picked, weight, uniform = STRATEGIES["uniform"](view, config.budget, 0.0, rng)
        else:
            served[rows], member_scores = model.scores(rows)
            now[rows] = served[rows]
            lately = pool.uniform & (pool.known >= day - RECALIBRATION_DAYS) & (pool.known < day)
            view = DayView(
                world.ids[rows],
                served[rows],
                member_scores,
                now[pool.rows[lately]],
                pool.late[lately],
            )
            picked, weight, uniform = pick(view, config.budget, config.audit_share, rng)
        if len(picked) > config.budget:
            raise ValueError(f"{strategy} picked {len(picked)} flights, over the budget")
        chosen = rows[picked]
        known = np.full(len(chosen), day + config.latency_days)
        pool.add(chosen, world.labels[chosen].astype(np.float64), known, weight, uniform)
        if on_labels is not None:
            on_labels(chosen, served[chosen], day + config.latency_days)
    return weekly_auc(world, served, trained_on, first, config.refit_days)


def weekly_auc(
    world: World, served: np.ndarray, trained_on: dict[int, int], first: int, days: int
) -> pd.DataFrame:
    """The production AUC of each period of `days` days from day number `first` on."""
    rows = []
    for start in range(first, int(world.days.max()) + 1, days):
        week = np.flatnonzero((world.days >= start) & (world.days < start + days))
        auc = production_auc(world.labels[week], served[week], None)
        if np.isnan(served[week]).any():
            raise ValueError(f"the week of day {start} has flights no model scored")
        rows.append(
            {
                "week": date(1970, 1, 1) + timedelta(int(start)),
                "auc": auc,
                "labels": trained_on.get(start, 0),
            }
        )
    return pd.DataFrame(rows)
