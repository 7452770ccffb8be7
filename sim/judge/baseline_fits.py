"""The same-budget reference's and the all-labels ceiling's fits (sim.judge.reference), made
while the simulation plays its partitions, by a process at the lowest CPU priority."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from pipelines.task.cadence import Cadence
from sim.judge.reference import PlayedExamples, baseline_pools, fingerprint, fit_predict


class BaselineFits:
    """The baselines' fits of each report period, made while the partitions are played by a
    process at the lowest CPU priority: it takes only the time the partitions leave idle, so the
    report need not fit them after the last one. Give it each period's examples in the order the
    report will read them, with the labels the flywheel spent on each partition so far (`add`),
    then hand its `results` to `reference_by_period`, which keeps those whose inputs are the same
    as its own and fits the others: the ceiling's, and the same-budget reference's once a
    partition's spend is final.

    The process ends with `results`, with `close`, or when the process that started it is gone
    (killed too): on Linux the kernel kills it then, whatever share of a core it gets.
    """

    def __init__(
        self,
        features: FeatureConfig,
        time_column: str,
        seed: int = 0,
        cadence: Cadence = "daily",
    ) -> None:
        context = multiprocessing.get_context("spawn")  # not a fork of a threaded process
        self._inbox: multiprocessing.Queue = context.Queue()
        self._outbox: multiprocessing.Queue = context.Queue()
        self._process = context.Process(
            target=_fit_in_background,
            args=(self._inbox, self._outbox, features, time_column, seed, cadence, _parent()),
            name="baseline-fits",
            daemon=True,
        )
        self._process.start()
        # Set here, before the process has started a thread, not by the process itself: set
        # there, it could come after `hurry` had lifted it, and hold it back for good.
        self._idle = _set_policy(self._process.pid, "SCHED_IDLE")
        self._fitted: dict[tuple[date, str], tuple[str, float]] = {}
        self._ended = False

    def add(
        self, examples: pd.DataFrame, periods: Sequence[date], spend: pd.Series | None = None
    ) -> None:
        """The examples played since the last `add` (with their label), the report periods
        (their first days) whose baselines can be fitted now (every partition of them has been
        played), and the labels spent on each landing partition so far
        (`reference_by_period`'s `spend`; None: the ceiling's fits only)."""
        self._inbox.put((examples, [pd.Timestamp(period).date() for period in periods], spend))

    def made(self) -> int:
        """How many fits are made so far (without waiting for any)."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._take(self._outbox.get_nowait())
        return len(self._fitted)

    def results(self) -> dict[tuple[date, str], tuple[str, float]]:
        """Every fit: (period, "ceiling" or "reference") -> (the `fingerprint` of its inputs, its
        AUC). Raises RuntimeError when the process failed (with its traceback) or was killed.

        The fits still to make are now what the caller waits for, so the process is lifted to
        the normal priority first (`hurry`) and every fit asked for is made. Where it may not be
        lifted, those made so far are returned and the process is ended: at the idle priority on
        a machine whose cores stay busy it could wait for hours, and `reference_by_period` fits
        the rest itself."""
        self._inbox.put(None)
        try:
            if self._process.is_alive() and not self.hurry():
                self.made()
                return dict(self._fitted)
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

    def hurry(self) -> bool:
        """Lift every thread of the process from the idle priority to the normal one; whether
        it could (a process may raise another's priority only with CAP_SYS_NICE or where its
        RLIMIT_NICE allows it)."""
        return self._idle and _set_policy(self._process.pid, "SCHED_OTHER")

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


def _parent() -> tuple[int, bool]:
    """This process's id, and whether the calling thread is its main thread: the kernel's
    parent-death signal follows the thread that started the child, not the process, so it is
    asked for only where that thread lasts as long as the process."""
    return os.getpid(), threading.current_thread() is threading.main_thread()


def _die_with(parent: tuple[int, bool]) -> None:
    """End this process when `parent` ends. The kernel kills it at once where it can
    (PR_SET_PDEATHSIG): a process at the idle priority on a busy machine may not run for many
    seconds, so the loop's own check of its parent could come late. That check stays, for
    other systems and a parent gone before the signal was asked for."""
    pid, main_thread = parent
    if sys.platform == "linux" and main_thread:
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != pid:
        os._exit(0)


def _set_policy(pid: int, policy: str) -> bool:
    """Set Linux's scheduling `policy` (SCHED_IDLE: only when a core would otherwise be idle;
    SCHED_OTHER: the normal one) on every thread of process `pid`; whether it could. Threads
    it starts later inherit its main thread's. Lowering it is always allowed; raising it takes
    CAP_SYS_NICE or an RLIMIT_NICE that allows it."""
    if not hasattr(os, "sched_setscheduler") or not hasattr(os, policy):
        return False
    try:
        for thread in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setscheduler(int(thread.name), getattr(os, policy), os.sched_param(0))
    except (PermissionError, FileNotFoundError, ProcessLookupError):
        return False
    return True


def _fit_in_background(
    inbox: multiprocessing.Queue,
    outbox: multiprocessing.Queue,
    features: FeatureConfig,
    time_column: str,
    seed: int,
    cadence: Cadence,
    parent: tuple[int, bool],
) -> None:
    """`BaselineFits`' process: fits the periods asked for, oldest first, while taking in what
    is added, and sends each result as it is made; once told (None) that nothing more comes and
    every period is fitted, it says so and ends."""
    import traceback

    _die_with(parent)
    # Loaded before the limit below, which applies to the libraries loaded when it is set:
    # HistGradientBoosting's OpenMP runtime would otherwise start a thread per core, and one
    # that the scheduler sets aside leaves the others spinning at their barriers.
    from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: F401
    from threadpoolctl import threadpool_limits

    if not hasattr(os, "SCHED_IDLE"):  # no idle class to be put in (`_set_policy`): the lowest nice
        os.nice(19)
    frames: list[pd.DataFrame] = []
    pending: list[date] = []
    played: PlayedExamples | None = None
    spend: pd.Series | None = None
    pools: dict[str, np.ndarray] = {}  # each baseline's rows of `played`
    done = False
    try:
        with threadpool_limits(1):
            while True:
                if os.getppid() != parent[0]:
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
                    examples = pd.concat(frames, ignore_index=True)
                    played = PlayedExamples(examples, features, time_column, cadence)
                    pools = baseline_pools(played, spend, time_column, seed)
                period = pending.pop(0)
                for name, pool in pools.items():
                    _, y, fit = played.fit(pool, period)
                    if fit is not None:
                        predicted = fit_predict(*fit, seed, n_classes=played.n_classes)
                        auc = played.auc(y, predicted)
                        outbox.put(("fit", (period, name), (fingerprint(fit), auc)))
        outbox.put(("end",))
    except BaseException:  # the simulation shows it (and fits the periods itself)
        outbox.put(("error", traceback.format_exc()))
