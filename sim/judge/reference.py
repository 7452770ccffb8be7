"""What the flywheel's production AUC is measured against: a same-budget reference and a ceiling.

Both are a HistGradientBoosting classifier retrained every week (on its Monday, on the flights of
the days before it) on the features the dbt marts give every flight, the columns the model reads:

- the **reference** learns from as many uniformly random flights of each landing day as the
  flywheel got labels for that day: the same budget, spent without a model, a label selection
  or a promotion gate;
- the **ceiling** learns from every flight's outcome.

Only the simulator knows every outcome, so both live here and not in the pipeline.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import queue
from collections.abc import Mapping, Sequence
from datetime import date

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from ml.metrics import auroc

# HistGradientBoosting's native categorical support needs codes below its bin count; a larger
# vocabulary enters as ordinal codes (as in ml.baselines).
MAX_CATEGORIES = 255
# Fewer training rows than this, or a single class: no model that week.
MIN_TRAINING_ROWS = 50
COLUMNS = ["week", "reference", "ceiling", "reference_labels", "ceiling_labels"]


def reference_sample(
    flights: pd.DataFrame, spend: pd.Series, time_column: str, seed: int = 0
) -> pd.DataFrame:
    """Per landing day, `spend[day]` of its flights drawn uniformly at random (all of them when
    the day has fewer). A day's draw depends only on the day and `seed`: the labelled set grows
    day by day as an annotator's would."""
    picked = []
    for day, group in flights.groupby(time_column, sort=True):
        n = int(spend.get(day, 0))
        if n <= 0:
            continue
        digest = hashlib.sha256(f"{seed}/{day}".encode()).hexdigest()[:8]
        rng = np.random.default_rng(int(digest, 16))
        rows = rng.choice(len(group), size=min(n, len(group)), replace=False)
        picked.append(group.iloc[np.sort(rows)])
    return pd.concat(picked) if picked else flights.iloc[:0]


def encode(
    train: pd.DataFrame, other: pd.DataFrame, features: FeatureConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float matrices for HistGradientBoosting: categorical columns as codes of the training
    rows' vocabulary (unseen values missing), numeric columns as they are; and the mask of the
    columns it treats as categorical. Columns missing in every training row are left out."""
    both = pd.concat([train, other], ignore_index=True)
    return Columns(both, features).matrices(np.arange(len(train)), np.arange(len(train), len(both)))


class Columns:
    """The feature columns of a frame's rows as numbers, computed once for the many fits that
    take their rows from it: `matrices` of any two sets of rows are `encode`'s matrices of
    those rows, without a pass over the frame's values per fit."""

    def __init__(self, frame: pd.DataFrame, features: FeatureConfig) -> None:
        # Each categorical column as codes of its values (-1: missing), numbered in any order:
        # `matrices` renumbers them by first appearance in the training rows.
        self.codes = [pd.factorize(frame[column])[0] for column in features.categorical]
        self.numeric = [
            pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)
            for column in features.numeric
        ]

    def matrices(
        self, train: np.ndarray, other: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`encode`'s matrices for the rows at positions `train` and `other`, in that order."""
        columns = []  # (training rows' values, other rows' values, categorical)
        for codes in self.codes:
            seen = codes[train]
            values, first = np.unique(seen[seen >= 0], return_index=True)
            # Code -> its rank among the training rows' values by first appearance; the last
            # slot, never assigned, is where -1 (missing) lands: missing, as unseen values are.
            rank = np.full(codes.max(initial=-1) + 2, np.nan)
            rank[values[np.argsort(first)]] = np.arange(len(values))
            columns.append((rank[seen], rank[codes[other]], len(values) <= MAX_CATEGORIES))
        columns += [(values[train], values[other], False) for values in self.numeric]
        # A column with no value in the training rows says nothing (and HistGradientBoosting
        # cannot bin it): left out of both.
        columns = [c for c in columns if not np.isnan(c[0]).all()]
        # Column-major, as HistGradientBoosting bins them: filled without a copy per column.
        x_train = np.empty((len(train), len(columns)), order="F")
        x_other = np.empty((len(other), len(columns)), order="F")
        for j, (train_values, other_values, _) in enumerate(columns):
            x_train[:, j], x_other[:, j] = train_values, other_values
        return x_train, x_other, np.array([c[2] for c in columns], dtype=bool)


def fit_predict(
    x_train: np.ndarray,
    y: np.ndarray,
    x_other: np.ndarray,
    categorical: np.ndarray,
    seed: int,
    sample_weight: np.ndarray | None = None,
) -> np.ndarray:
    """The reference model fitted on (`x_train`, `y`), optionally weighted: its probabilities
    for `x_other`."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(categorical_features=categorical, random_state=seed)
    return model.fit(x_train, y, sample_weight=sample_weight).predict_proba(x_other)[:, 1]


# A fit's inputs: the training rows' matrix, their labels, the scored rows' matrix and which
# columns are categorical.
Fit = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# AUCs already computed, by (week, "reference" or "ceiling"): the fingerprint of their fit's
# inputs (see `fingerprint`) and the AUC.
Fitted = Mapping[tuple[date, str], tuple[str, float]]


class PlayedFlights:
    """Every flight played, ready for the weekly fits: what each retrained model learns from
    and scores."""

    def __init__(self, flights: pd.DataFrame, features: FeatureConfig, time_column: str) -> None:
        self.flights = flights.reset_index(drop=True)
        self.columns = Columns(self.flights, features)
        self.dates = pd.to_datetime(self.flights[time_column]).to_numpy("datetime64[D]")
        self.labels = self.flights[features.label].to_numpy(dtype=np.int64)

    def fit(self, pool: np.ndarray, week: date) -> tuple[int, np.ndarray, Fit | None]:
        """The model retrained on `week` (a Monday) on the rows at positions `pool` (in that
        order) of the days before it: how many rows it learns from, the outcomes of the week's
        flights it scores, and its fit's inputs; None when it learns from too few rows or one
        class, or when the week's flights do not have both outcomes."""
        start = np.datetime64(week, "D")
        scored = np.flatnonzero((self.dates >= start) & (self.dates < start + 7))
        train = pool[self.dates[pool] < start]
        y_scored, y = self.labels[scored], self.labels[train]
        if not 0 < y_scored.sum() < len(y_scored):
            return len(train), y_scored, None
        if len(y) < MIN_TRAINING_ROWS or y.min() == y.max():
            return len(train), y_scored, None
        x_train, x_other, categorical = self.columns.matrices(train, scored)
        return len(train), y_scored, (x_train, y, x_other, categorical)


def fingerprint(fit: Fit) -> str:
    """A digest of a fit's inputs. The fit is deterministic (a fixed seed; HistGradientBoosting
    gives the same model on any number of threads), so equal digests mean equal AUCs."""
    digest = hashlib.blake2b(digest_size=16)
    for array in fit:
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes(order="A"))
    return digest.hexdigest()


def weekly_reference(
    flights: pd.DataFrame,
    spend: pd.Series,
    weeks: Sequence[date],
    features: FeatureConfig,
    time_column: str = "flight_date",
    seed: int = 0,
    jobs: int | None = None,
    fitted: Fitted | None = None,
) -> pd.DataFrame:
    """Production AUC per week (a Monday) of the reference and of the ceiling, each retrained on
    that Monday on the flights of the days before it; with how many labels each learned from.

    `flights` holds every flight played (its `time_column` a date, the features, the label);
    `spend` how many labels the flywheel got for each landing day's flights. A week in
    `fitted` whose fit would have the same inputs keeps its AUC there (see `BaselineFits`); the
    other fits run in `jobs` processes (default: one per core).
    """
    from joblib import Parallel, delayed

    played = PlayedFlights(flights, features, time_column)
    pools = baseline_pools(played, spend, time_column, seed)
    rows, fits = [], []
    for week in weeks:
        start = pd.Timestamp(week).date()
        row: dict[str, object] = {"week": start}
        for name, pool in pools.items():
            row[f"{name}_labels"], y, fit = played.fit(pool, start)
            row[name] = np.nan
            if fit is None:
                continue
            known = (fitted or {}).get((start, name))
            if known is not None and known[0] == fingerprint(fit):
                row[name] = known[1]
            else:
                fits.append((len(rows), name, y, fit))
        rows.append(row)
    if fits:
        scores = Parallel(n_jobs=jobs or os.cpu_count() or 1)(
            delayed(fit_predict)(*fit, seed) for _, _, _, fit in fits
        )
        for (i, name, y, _), predicted in zip(fits, scores, strict=True):
            rows[i][name] = auroc(y, predicted)
    return pd.DataFrame(rows, columns=COLUMNS)


def baseline_pools(
    played: PlayedFlights, spend: pd.Series | None, time_column: str, seed: int
) -> dict[str, np.ndarray]:
    """The rows each baseline learns from, by name: the reference's (only when `spend` is
    given) and the ceiling's, in the order the report fits them."""
    pools = {}
    if spend is not None:
        sample = reference_sample(played.flights, spend, time_column, seed)
        pools["reference"] = sample.index.to_numpy()
    pools["ceiling"] = np.arange(len(played.flights))
    return pools


class BaselineFits:
    """The baselines' weekly fits, made while the days are played by a process at the lowest CPU
    priority: it takes only the time the days leave idle, so the report need not fit them after
    the last day. Give it each week's flights in the order the report will read them, with the
    labels the flywheel spent on each day so far (`add`), then hand its `results` to
    `weekly_reference`, which keeps those whose inputs are the same as its own and fits the
    others: the ceiling's, and the same-budget reference's once a day's spend is final.

    The process ends with `results`, with `close`, or when the process that started it is gone
    (killed too).
    """

    def __init__(
        self, features: FeatureConfig, time_column: str = "flight_date", seed: int = 0
    ) -> None:
        context = multiprocessing.get_context("spawn")  # not a fork of a threaded process
        self._inbox: multiprocessing.Queue = context.Queue()
        self._outbox: multiprocessing.Queue = context.Queue()
        self._process = context.Process(
            target=_fit_in_background,
            args=(self._inbox, self._outbox, features, time_column, seed, os.getpid()),
            name="baseline-fits",
            daemon=True,
        )
        self._process.start()
        self._fitted: dict[tuple[date, str], tuple[str, float]] = {}
        self._ended = False

    def add(
        self, flights: pd.DataFrame, weeks: Sequence[date], spend: pd.Series | None = None
    ) -> None:
        """The flights played since the last `add` (with their label), the weeks (Mondays) whose
        baselines can be fitted now (every day of them has been played), and the labels spent on
        each landing day so far (`weekly_reference`'s `spend`; None: the ceiling's fits only)."""
        self._inbox.put((flights, [pd.Timestamp(week).date() for week in weeks], spend))

    def made(self) -> int:
        """How many fits are made so far (without waiting for any)."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._take(self._outbox.get_nowait())
        return len(self._fitted)

    def results(self) -> dict[tuple[date, str], tuple[str, float]]:
        """Every fit, once those asked for are made: (week, "ceiling" or "reference") -> (the
        `fingerprint` of its inputs, its AUC). Raises RuntimeError when the process failed (with
        its traceback) or was killed."""
        self._inbox.put(None)
        try:
            while not self._ended:
                alive = self._process.is_alive()
                try:
                    self._take(self._outbox.get(timeout=1.0))
                except queue.Empty:
                    if not alive:  # ended before that second, and nothing came: killed
                        raise RuntimeError(
                            "the baselines' background fits ended with exit code "
                            f"{self._process.exitcode} and no results"
                        ) from None
        finally:
            self.close()
        return dict(self._fitted)

    def _take(self, message: tuple) -> None:
        """A fit made, the end of the fits, or the traceback of a failure."""
        if message[0] == "fit":
            self._fitted[message[1]] = message[2]
        elif message[0] == "error":
            self._ended = True
            raise RuntimeError(f"the baselines' background fits failed:\n{message[1]}")
        else:
            self._ended = True

    def close(self) -> None:
        """End the process now, if it still runs."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        for box in (self._inbox, self._outbox):
            box.close()
            box.cancel_join_thread()


def _lowest_priority() -> None:
    """This process runs only when a core would otherwise be idle (Linux's idle scheduling
    class; elsewhere the lowest nice value). Threads it starts later inherit it."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.nice(19)


def _fit_in_background(
    inbox: multiprocessing.Queue,
    outbox: multiprocessing.Queue,
    features: FeatureConfig,
    time_column: str,
    seed: int,
    parent: int,
) -> None:
    """`BaselineFits`' process: fits the weeks asked for, oldest first, while taking in what is
    added, and sends each result as it is made; once told (None) that nothing more comes and
    every week is fitted, it says so and ends."""
    import traceback

    # Loaded before the limit below, which applies to the libraries loaded when it is set:
    # HistGradientBoosting's OpenMP runtime would otherwise start a thread per core, and one
    # that the scheduler sets aside leaves the others spinning at their barriers.
    from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: F401
    from threadpoolctl import threadpool_limits

    _lowest_priority()
    frames: list[pd.DataFrame] = []
    pending: list[date] = []
    played: PlayedFlights | None = None
    spend: pd.Series | None = None
    pools: dict[str, np.ndarray] = {}  # each baseline's rows of `played`
    done = False
    try:
        with threadpool_limits(1):
            while True:
                if os.getppid() != parent:
                    return  # the simulation is gone (killed): nobody will read the results
                if not done:
                    try:  # take in what was sent; wait for it only when nothing is left to fit
                        message = inbox.get(block=not pending, timeout=2.0)
                    except queue.Empty:
                        message = ()
                    if message is None:
                        done = True
                    elif message:
                        frames.append(message[0])
                        pending, played = sorted({*pending, *message[1]}), None
                        spend = message[2] if message[2] is not None else spend
                        continue
                    elif not pending:
                        continue
                if not pending:
                    break
                if played is None:
                    flights = pd.concat(frames, ignore_index=True)
                    played = PlayedFlights(flights, features, time_column)
                    pools = baseline_pools(played, spend, time_column, seed)
                week = pending.pop(0)
                for name, pool in pools.items():
                    _, y, fit = played.fit(pool, week)
                    if fit is not None:
                        auc = auroc(y, fit_predict(*fit, seed))
                        outbox.put(("fit", (week, name), (fingerprint(fit), auc)))
        outbox.put(("end",))
    except BaseException:  # the simulation shows it (and fits the weeks itself)
        outbox.put(("error", traceback.format_exc()))
