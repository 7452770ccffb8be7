"""The same-budget reference and the all-labels ceiling, on flights whose outcomes are known."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ml.config import FeatureConfig
from ml.metrics import auroc
from sim.judge.baseline_fits import BaselineFits
from sim.judge.reference import (
    Columns,
    PlayedExamples,
    baseline_pools,
    encode,
    fingerprint,
    reference_by_period,
    reference_sample,
)

FEATURES = FeatureConfig(categorical=("carrier",), numeric=("x", "noise"), label="is_late")
START = date(2013, 1, 7)  # a Monday


def flights(weeks: int = 3, per_day: int = 120, flip_from: date | None = None) -> pd.DataFrame:
    """Flights whose lateness follows `x` (and carrier "BB"); from `flip_from` on it follows
    minus `x`, so a model that saw those days would rank them the other way round."""
    rng = np.random.default_rng(0)
    days = [START + timedelta(days=d) for d in range(7 * weeks)]
    frame = pd.DataFrame(
        {
            "flight_id": [f"{d}_{i}" for d in days for i in range(per_day)],
            "flight_date": np.repeat(days, per_day),
            "carrier": rng.choice(["AA", "BB", "CC"], size=len(days) * per_day),
            "x": rng.normal(size=len(days) * per_day),
            "noise": rng.normal(size=len(days) * per_day),
        }
    )
    sign = np.where(
        (frame.flight_date >= flip_from) if flip_from else np.zeros(len(frame), bool), -1, 1
    )
    signal = sign * frame.x + 0.5 * (frame.carrier == "BB") + 0.3 * rng.normal(size=len(frame))
    frame["is_late"] = signal > 0.3
    return frame


def test_the_sample_spends_each_days_budget_and_a_day_draws_the_same_flights() -> None:
    frame = flights(weeks=1, per_day=50)
    days = sorted(frame.flight_date.unique())
    spend = pd.Series([10, 0, 60, 5, 5, 5, 5], index=days)
    sample = reference_sample(frame, spend, "flight_date", seed=3)
    counts = sample.groupby("flight_date").size()
    # The budget of each day, all of a day's 50 flights where it asks for more, none for 0.
    assert counts.to_dict() == {days[0]: 10, days[2]: 50, **{d: 5 for d in days[3:]}}
    assert sample.flight_id.is_unique
    # A day's draw does not depend on the other days' budgets.
    other = reference_sample(frame, spend.where(spend.index != days[0], 30), "flight_date", seed=3)
    assert set(other[other.flight_date == days[3]].flight_id) == set(
        sample[sample.flight_date == days[3]].flight_id
    )
    assert set(reference_sample(frame, spend, "flight_date", seed=4).flight_id) != set(
        sample.flight_id
    )


def test_each_week_is_scored_by_models_trained_on_the_days_before_it_only() -> None:
    # From the third week on lateness follows minus x: a model that saw any of its flights
    # would not rank them upside down.
    third = START + timedelta(days=14)
    frame = flights(weeks=3, flip_from=third)
    spend = pd.Series(30, index=sorted(frame.flight_date.unique()))
    weekly = reference_by_period(
        frame, spend, [START, START + timedelta(days=7), third], FEATURES, "flight_date"
    )

    first, second, flipped = weekly.to_dict("records")
    # Nothing before the first Monday: no model that week.
    assert np.isnan(first["reference"]) and np.isnan(first["ceiling"])
    assert (first["reference_labels"], first["ceiling_labels"]) == (0, 0)
    # The second week: trained on the first week's 7 x 30 sampled flights (reference) and on
    # all its 7 x 120 (ceiling); both rank the second week's flights well, the ceiling better.
    assert (second["reference_labels"], second["ceiling_labels"]) == (210, 840)
    assert second["reference"] > 0.75 and second["ceiling"] >= second["reference"] - 0.01
    # The flipped week is ranked upside down by both: neither saw a flight of it.
    assert flipped["reference"] < 0.3 and flipped["ceiling"] < 0.3
    assert (flipped["reference_labels"], flipped["ceiling_labels"]) == (420, 1680)


# What the code before report periods and classes (commit f88cf31) fitted on `flights(weeks=4)`
# flipped from its third week, with `[0, 10, 30, 60, 120, 5, 45]` labels a day: per week and
# baseline, the labels it learned from and the fingerprint of its fit's inputs (the same draws,
# rows, codes and outcomes).
BEFORE_PERIODS = {
    (date(2013, 1, 14), "reference"): (270, "ec478cc2e4aed1428e880962a9dce92c"),
    (date(2013, 1, 14), "ceiling"): (840, "c64ca9c368b48da19a3d8b1b068471b7"),
    (date(2013, 1, 21), "reference"): (540, "465aa83b5020e589cc0d0dab0d5dc868"),
    (date(2013, 1, 21), "ceiling"): (1680, "3d06dcdf78e7b109e24f30d92a844dfc"),
    (date(2013, 1, 28), "reference"): (810, "37f326c253c49be05dd6f7aac98a1984"),
    (date(2013, 1, 28), "ceiling"): (2520, "9a33597f007abc7d83a3b7e6db6e89b6"),
}


def test_a_daily_binary_task_keeps_the_weekly_fits_and_aucs_it_had() -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier

    frame = flights(weeks=4, flip_from=START + timedelta(days=14))
    spend = pd.Series([0, 10, 30, 60, 120, 5, 45] * 4, index=sorted(frame.flight_date.unique()))
    weeks = [START + timedelta(weeks=k) for k in range(4)]
    table = reference_by_period(frame, spend, weeks, FEATURES, "flight_date").set_index("period")
    assert table.loc[START, ["reference", "ceiling"]].isna().all()
    played = PlayedExamples(frame, FEATURES, "flight_date")
    for week in weeks[1:]:
        for name, pool in baseline_pools(played, spend, "flight_date", seed=0).items():
            labels, y, fit = played.fit(pool, week)
            assert fit is not None and (labels, fingerprint(fit)) == BEFORE_PERIODS[(week, name)]
            # The model and the metric as before: the AUC of P(late) from seed 0's model.
            model = HistGradientBoostingClassifier(categorical_features=fit[3], random_state=0)
            expected = auroc(y, model.fit(fit[0], fit[1]).predict_proba(fit[2])[:, 1])
            assert table.loc[week, name] == expected
            assert table.loc[week, f"{name}_labels"] == labels


def test_unseen_categories_and_missing_values_are_scored() -> None:
    frame = flights(weeks=2)
    second = frame.flight_date >= START + timedelta(days=7)
    frame.loc[second, "carrier"] = frame.loc[second, "carrier"].replace("CC", "ZZ")
    frame.loc[frame.index[::7], "x"] = np.nan
    spend = pd.Series(40, index=sorted(frame.flight_date.unique()))
    weekly = reference_by_period(frame, spend, [START + timedelta(days=7)], FEATURES, "flight_date")
    assert weekly.reference.iloc[0] > 0.7 and weekly.reference_labels.iloc[0] == 7 * 40


def test_a_feature_missing_in_every_training_row_is_left_out() -> None:
    # The first week has no `noise` at all (a feed that did not deliver it yet), nor a carrier.
    frame = flights(weeks=2)
    first = frame.flight_date < START + timedelta(days=7)
    frame.loc[first, "noise"] = np.nan
    frame.loc[first, "carrier"] = None
    spend = pd.Series(40, index=sorted(frame.flight_date.unique()))
    weekly = reference_by_period(frame, spend, [START + timedelta(days=7)], FEATURES, "flight_date")
    assert weekly.reference.iloc[0] > 0.7 and weekly.ceiling.iloc[0] > 0.7


def vocabulary_codes(train: pd.Series, other: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """What a categorical column's codes must be: positions in the training rows' values in
    order of first appearance, missing for missing or unseen values."""
    vocabulary = pd.Index(train.dropna().unique())
    codes = [vocabulary.get_indexer(s).astype(float) for s in (train, other)]
    for c in codes:
        c[c < 0] = np.nan
    return codes[0], codes[1]


def test_columns_give_each_fit_the_codes_of_its_own_training_rows() -> None:
    frame = pd.DataFrame(
        {
            "carrier": ["CC", None, "AA", "CC", "BB", "DD", "AA", np.nan, "EE", "BB"],
            "x": [1.0, 2.0, None, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0],
            "noise": [np.nan] * 5 + [1.0] * 5,
        }
    )
    columns = Columns(frame, FEATURES)
    # Training rows out of order and a scored set with a value they never saw ("DD", "EE").
    train, other = np.array([2, 3, 0, 1, 4]), np.array([6, 5, 8, 9, 7])
    x_train, x_other, categorical = columns.matrices(train, other)
    codes = vocabulary_codes(frame.carrier[train], frame.carrier[other])
    # "AA" first seen, then "CC", "BB"; "noise" has no value in the training rows: left out.
    np.testing.assert_array_equal(x_train[:, 0], codes[0])
    np.testing.assert_array_equal(x_train[:, 0], [0, 1, 1, np.nan, 2])
    np.testing.assert_array_equal(x_other[:, 0], codes[1])
    np.testing.assert_array_equal(x_train[:, 1], frame.x[train])
    np.testing.assert_array_equal(x_other[:, 1], frame.x[other])
    assert x_train.shape == (5, 2) and categorical.tolist() == [True, False]
    # encode: the same for two frames.
    encoded = encode(frame.iloc[train], frame.iloc[other], FEATURES)
    for got, want in zip(encoded, (x_train, x_other, categorical), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_codes_are_those_of_the_training_rows_in_a_real_sized_week() -> None:
    frame = flights(weeks=3)
    frame.loc[frame.index[::5], "carrier"] = None
    frame.loc[frame.flight_date >= START + timedelta(days=14), "carrier"] = "ZZ"
    columns = Columns(frame, FEATURES)
    rng = np.random.default_rng(1)
    train = rng.permutation(np.flatnonzero(frame.flight_date < START + timedelta(days=14)))
    other = np.flatnonzero(frame.flight_date >= START + timedelta(days=7))
    x_train, x_other, _ = columns.matrices(train, other)
    for got, want in zip(
        (x_train[:, 0], x_other[:, 0]),
        vocabulary_codes(frame.carrier.iloc[train], frame.carrier.iloc[other]),
        strict=True,
    ):
        np.testing.assert_array_equal(got, want)


def add_by_week(
    fits: BaselineFits, frame: pd.DataFrame, weeks: int, spend: pd.Series | None = None
) -> None:
    """As the simulation does: each week's flights once it is played, that week's fit, and the
    labels spent on the days played so far (when given)."""
    for k in range(weeks):
        monday = START + timedelta(days=7 * k)
        week = frame[(frame.flight_date >= monday) & (frame.flight_date < monday + timedelta(7))]
        so_far = None if spend is None else spend[spend.index < monday + timedelta(7)]
        fits.add(week, [monday], so_far)


def test_the_baselines_fitted_in_the_background_are_those_the_report_fits() -> None:
    frame = flights(weeks=4)
    spend = pd.Series(30, index=sorted(frame.flight_date.unique()))
    weeks = [START + timedelta(days=7 * k) for k in range(4)]
    fits = BaselineFits(FEATURES, "flight_date")
    add_by_week(fits, frame, 4, spend)
    fitted = fits.results()
    # The first week has nothing before it: no fit.
    assert sorted(fitted) == sorted(
        (week, name) for week in weeks[1:] for name in ("ceiling", "reference")
    )
    own = reference_by_period(frame, spend, weeks, FEATURES, "flight_date")
    reused = reference_by_period(frame, spend, weeks, FEATURES, "flight_date", fitted=fitted)
    pd.testing.assert_frame_equal(reused, own, check_exact=True)
    # A fit with the same inputs is not made again: a planted AUC with the right fingerprint
    # is what the report shows...
    planted = {key: (digest, 0.123) for key, (digest, _) in fitted.items()}
    shown = reference_by_period(frame, spend, weeks, FEATURES, "flight_date", fitted=planted)
    assert (shown.ceiling[1:] == 0.123).all() and (shown.reference[1:] == 0.123).all()
    # ...and one whose inputs differ (a flight changed since) is fitted again,
    changed = frame.copy()
    changed.loc[changed.index[5], "x"] += 1.0
    again = reference_by_period(changed, spend, weeks, FEATURES, "flight_date", fitted=planted)
    assert (again.ceiling[1:] != 0.123).all()
    pd.testing.assert_frame_equal(
        again, reference_by_period(changed, spend, weeks, FEATURES, "flight_date")
    )
    # as is a reference whose days got more labels after its week was fitted.
    more = spend.copy()
    more.iloc[2] += 10
    later = reference_by_period(frame, more, weeks, FEATURES, "flight_date", fitted=planted)
    assert (later.reference[1:] != 0.123).all() and (later.ceiling[1:] == 0.123).all()


def test_without_the_labels_spent_only_the_ceiling_is_fitted_in_the_background() -> None:
    fits = BaselineFits(FEATURES, "flight_date")
    add_by_week(fits, flights(weeks=3), 3)
    assert {name for _, name in fits.results()} == {"ceiling"}


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time of process `pid` (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_weeks_are_fitted_as_they_come_and_then_the_process_rests() -> None:
    fits = BaselineFits(FEATURES, "flight_date")
    try:
        fits.hurry()  # at the idle priority, a busy machine (another test) would hold it back
        add_by_week(fits, flights(weeks=4), 4)
        # Fitted without being asked for the results: while the days would play.
        deadline = time.monotonic() + 60
        while fits.made() < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fits.made() == 3
        if sys.platform == "linux":  # nothing left to fit: it waits, it does not spin
            before = cpu_seconds(fits._process.pid)
            time.sleep(1.0)
            assert cpu_seconds(fits._process.pid) - before < 0.2
        assert len(fits.results()) == 3
    finally:
        fits.close()


def test_a_failure_in_the_background_is_raised_with_its_traceback() -> None:
    fits = BaselineFits(FEATURES, "flight_date")
    add_by_week(fits, flights(weeks=2).drop(columns="is_late"), 2)
    with pytest.raises(RuntimeError, match=r"(?s)background fits failed.*KeyError: 'is_late'"):
        fits.results()


def policies(pid: int) -> set[int]:
    """The scheduling policy of each thread of process `pid`."""
    return {os.sched_getscheduler(int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()}


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux's idle scheduling class")
def test_the_fits_run_at_the_idle_priority_until_the_results_are_waited_for(monkeypatch):
    """While the days play the fits take only idle cores; once the report waits for them,
    they are all it waits for."""
    fits = BaselineFits(FEATURES, "flight_date")
    pid = fits._process.pid
    assert policies(pid) == {os.SCHED_IDLE}  # set before it starts a thread: they inherit it
    add_by_week(fits, flights(weeks=3), 3)
    hurry, seen = fits.hurry, []
    monkeypatch.setattr(fits, "hurry", lambda: seen.append((hurry(), policies(pid))) or True)
    assert len(fits.results()) == 2  # the ceilings of the second and third weeks
    assert seen == [(True, {os.SCHED_OTHER})]


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux's idle scheduling class")
def test_fits_hurried_before_the_process_got_going_stay_hurried() -> None:
    """The report may wait for the fits before the process has even imported its libraries
    (a loaded machine, a short play): it must not put itself back at the idle priority then."""
    fits = BaselineFits(FEATURES, "flight_date")
    try:
        assert fits.hurry()
        settled(fits._process.pid)
        assert policies(fits._process.pid) == {os.SCHED_OTHER}
    finally:
        fits.close()


def test_where_the_fits_cannot_be_hurried_the_report_fits_what_they_had_not(monkeypatch):
    """Without the right to lift another process's priority, the results are those made so
    far, and the report's own fits make up the rest."""
    frame = flights(weeks=4)
    spend = pd.Series(30, index=sorted(frame.flight_date.unique()))
    weeks = [START + timedelta(days=7 * k) for k in range(4)]
    fits = BaselineFits(FEATURES, "flight_date")
    fits.hurry()  # that one is made soon, wherever this runs
    add_by_week(fits, frame, 4, spend)
    deadline = time.monotonic() + 300
    while fits.made() < 1:  # one made, the others possibly not
        assert time.monotonic() < deadline, "the background process fitted nothing"
        time.sleep(0.1)

    def refused(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refused)
    fitted = fits.results()
    assert not fits._process.is_alive()
    every = {(week, name) for week in weeks[1:] for name in ("ceiling", "reference")}
    assert fitted and set(fitted) <= every
    own = reference_by_period(frame, spend, weeks, FEATURES, "flight_date")
    reused = reference_by_period(frame, spend, weeks, FEATURES, "flight_date", fitted=fitted)
    pd.testing.assert_frame_equal(reused, own, check_exact=True)


def test_a_killed_fitting_process_is_named_not_waited_for() -> None:
    fits = BaselineFits(FEATURES, "flight_date")
    add_by_week(fits, flights(weeks=2), 2)
    fits._process.kill()  # as the OOM killer would
    fits._process.join()
    with pytest.raises(RuntimeError, match="ended with exit code -9 and no results"):
        fits.results()


KILLED_PARENT = """
import sys, time
from datetime import date
from ml.config import FeatureConfig
from sim.judge.baseline_fits import BaselineFits
if __name__ == "__main__":
    features = FeatureConfig(categorical=(), numeric=("x",), label="is_late")
    fits = BaselineFits(features, "flight_date")
    fits.hurry()  # at the idle priority, a busy machine would not let it start for minutes
    print(fits._process.pid, flush=True)
    time.sleep(600)
"""


def settled(pid: int) -> None:
    """Wait until process `pid` has started and waits (its CPU time still for a second)."""
    stat = Path(f"/proc/{pid}/stat")
    before, deadline = None, time.monotonic() + 300
    while time.monotonic() < deadline:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        now = (fields[0], int(fields[11]) + int(fields[12]))  # state, utime + stime
        if now == before and now[0] == "S":
            return
        before = now
        time.sleep(1)
    raise AssertionError(f"process {pid} never settled")


@pytest.mark.parametrize("stopped", [False, True], ids=["running", "never-scheduled"])
def test_the_fitting_process_ends_when_the_simulation_is_killed(tmp_path, stopped) -> None:
    """`never-scheduled`: the fitting process is stopped (SIGSTOP) before its parent is killed,
    as a process at the idle priority on a busy machine may not run for minutes: its own check
    of its parent cannot run, and only the kernel's parent-death signal ends it."""
    script = tmp_path / "simulation.py"
    script.write_text(KILLED_PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    if stopped:
        settled(child)
    os.kill(child, signal.SIGSTOP if stopped else 0)  # it runs, or stops
    parent.kill()  # SIGKILL: nothing of the parent's own cleanup runs
    parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        # Reap it if it was handed to this process (it is when this is the init process).
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child, os.WNOHANG)
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
        raise AssertionError(f"the fitting process {child} outlived its killed parent")
