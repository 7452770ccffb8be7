"""The report's production figures when nothing was scored."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace

import numpy as np

from pipelines.lib.warehouse import DuckDBWarehouse
from sim.report import production_flights, weekly_auc


def test_a_span_without_a_promoted_model_has_no_weekly_figures(tmp_path) -> None:
    # No champion was ever promoted, so no scoring run created the predictions table.
    warehouse = DuckDBWarehouse(path=str(tmp_path / "warehouse.duckdb"))
    with warehouse.connect() as con:
        con.execute("create table fct_flight_features (flight_id bigint, flight_date date)")
    defs = SimpleNamespace(resources={"warehouse": warehouse, "tracker": None})
    flights = production_flights(defs, date(2013, 1, 1), date(2013, 1, 31))
    assert flights.empty
    weekly = weekly_auc(flights, np.array([]))
    assert weekly.empty and "flywheel" in weekly.columns
