"""The report's production figures when nothing was scored; its baselines fitted as days play."""

from __future__ import annotations

from datetime import date, timedelta
from types import SimpleNamespace

import duckdb
import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from ml.metrics import auroc
from pipelines.lib.warehouse import DuckDBWarehouse
from sim.judge.examples import Judged
from sim.judge.reference import PlayedExamples, fingerprint, fit_predict, reference_sample
from sim.judge.report import (
    BaselinesInBackground,
    labels_per_partition,
    played_examples,
    production_examples,
    weekly_auc,
)
from sim.world import nycflights


def test_a_span_without_a_promoted_model_has_no_weekly_figures(tmp_path) -> None:
    # No champion was ever promoted, so no scoring run created the predictions table.
    warehouse = DuckDBWarehouse(path=str(tmp_path / "warehouse.duckdb"))
    with warehouse.connect() as con:
        con.execute("create table fct_flight_features (flight_id bigint, flight_date date)")
    defs = SimpleNamespace(resources={"warehouse": warehouse, "tracker": None})
    judged = Judged.of("flights")
    flights = production_examples(defs, judged, date(2013, 1, 1), date(2013, 1, 31))
    assert flights.empty
    weekly = weekly_auc(flights, np.array([]), judged)
    assert weekly.empty and "flywheel" in weekly.columns


def test_the_baselines_fitted_while_the_days_play_are_those_the_report_would_fit(tmp_path) -> None:
    # Three weeks of real flights (Monday 2013-01-07 to Sunday 01-27) in a warehouse; production
    # from Wednesday 01-16, so its first week is the Monday 01-14's.
    days = [date(2013, 1, 7) + timedelta(days=d) for d in range(21)]
    frame = pd.concat(
        [nycflights.load().day("flights", day).assign(flight_date=day) for day in days]
    )
    frame["flight_id"] = (
        frame.flight_date.astype(str) + "_" + frame.carrier + frame.flight + "_" + frame.origin
    )
    frame["distance"] = pd.to_numeric(frame.distance)
    frame["hour"] = pd.to_numeric(frame.hour)
    frame = frame[["flight_id", "flight_date", "carrier", "origin", "distance", "hour"]]
    path = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("create table fct_flight_features as select * from frame")
        con.execute("create schema raw")
        con.execute("create table raw.flight_labels (flight_id varchar)")
    warehouse = DuckDBWarehouse(path=str(path))
    features = FeatureConfig(
        categorical=("carrier", "origin"), numeric=("distance", "hour"), label="is_late"
    )

    background = BaselinesInBackground(warehouse, Judged.of("flights"), features)
    try:
        for day in days:
            # The labels of the day before come in: 150 of its flights.
            labelled = frame[frame.flight_date == day - timedelta(days=1)].flight_id[:150]
            with duckdb.connect(str(path)) as con:
                for flight in labelled:
                    con.execute("insert into raw.flight_labels values (?)", [flight])
            background.played(day, None if day < date(2013, 1, 16) else date(2013, 1, 16))
        fitted = background.fits.results()
    finally:
        background.fits.close()
    weeks = [date(2013, 1, 14), date(2013, 1, 21)]
    assert sorted(fitted) == sorted(
        (week, name) for week in weeks for name in ("ceiling", "reference")
    )

    # Each is the fit the report would make on the flights and labels it reads, to the last
    # digit.
    flights = played_examples(warehouse, Judged.of("flights"), days[-1])
    assert len(flights) == len(frame) and flights.is_late.any() and not flights.is_late.all()
    played = PlayedExamples(flights, features, "flight_date")
    spend = labels_per_partition(warehouse, Judged.of("flights"))
    assert (spend == 150).all() and len(spend) == len(days) - 1
    sample = reference_sample(played.examples, spend, "flight_date").index.to_numpy()
    for week in weeks:
        for name, pool in (("ceiling", np.arange(len(flights))), ("reference", sample)):
            _, y, fit = played.fit(pool, week)
            assert fit is not None and fitted[(week, name)][0] == fingerprint(fit)
            assert fitted[(week, name)][1] == auroc(y, fit_predict(*fit, seed=0))


def test_the_plot_marks_alarms_and_promotions_not_scheduled_retrainings() -> None:
    from sim.judge.history import retraining_events

    runs = pd.DataFrame(
        {
            "event_day": ["2013-10-01", "2013-10-08", "2013-10-09", ""],
            "trigger": ["schedule", "excess_loss", "drift", "bootstrap"],
            "decision": ["promoted", "rejected", "promoted", "promoted"],
        }
    )
    events = retraining_events(runs)
    assert sorted(zip(events.day, events.kind, strict=True)) == [
        ("2013-10-01", "promotion"),
        ("2013-10-08", "alarm"),
        ("2013-10-09", "alarm"),
        ("2013-10-09", "promotion"),
    ]
    assert retraining_events(runs.iloc[:0]).empty
