"""Ground truth from a file: outcomes a team already has, delivered to the labeling inbox as
CSV or Parquet, answer the examples sent to labeling; every other row is rejected, named."""

from __future__ import annotations

import io
from datetime import date

import pandas as pd
import pytest

from pipelines.labeling.outcomes import parse_outcomes, task_ids_in_outcomes
from pipelines.task import load_task
from sim.world.replay import land_days
from tests.pipelines.defs.test_labeling_flow import DAY, NEXT, expected_late, materialize

SPEC = load_task("flights").labeling
AWAITING = {SPEC.task_id(e): e for e in ("2013-01-01_AA1_JFK", "2013-01-01_B62_EWR")}


def outcomes(rows: list[tuple[str, str, str]]) -> bytes:
    return (
        pd.DataFrame(rows, columns=["flight_id", "is_late", "known_at"])
        .to_csv(index=False)
        .encode()
    )


def test_each_row_answers_its_example_or_is_rejected_with_its_reason() -> None:
    data = outcomes(
        [
            ("2013-01-01_AA1_JFK", "late", "2013-01-02T08:00:00Z"),  # a choice's name
            ("2013-01-01_AA1_JFK", "on_time", "2013-01-02T09:00:00Z"),  # answered above
            ("2013-01-01_B62_EWR", "maybe", "2013-01-02T08:00:00Z"),
            ("2013-01-01_ZZ9_LGA", "true", "2013-01-02T08:00:00Z"),
            ("", "true", "2013-01-02T08:00:00Z"),
        ]
    )
    delivered = pd.Timestamp("2013-01-03")
    good, bad = parse_outcomes("inbox/x.csv", data, AWAITING, {}, SPEC, delivered)
    assert good[["flight_id", "is_late", "annotation_id"]].values.tolist() == [
        ["2013-01-01_AA1_JFK", True, 2]
    ]
    assert good.known_at.tolist() == [pd.Timestamp("2013-01-02 08:00:00")]
    reasons = dict(zip(bad["item"], bad.reason, strict=True))
    assert reasons == {
        3: "already answered on line 2 of this file",
        4: "is_late 'maybe' is none of ['late', 'on_time']",
        5: "was never sent to labeling",
        6: "has no flight_id",
    }
    assert task_ids_in_outcomes("x.csv", data, SPEC) >= set(AWAITING)


def test_a_value_a_time_or_a_file_that_does_not_fit_is_rejected_not_raised() -> None:
    late = outcomes(
        [
            ("2013-01-01_AA1_JFK", "false", "yesterday"),
            ("2013-01-01_B62_EWR", "TRUE", "2013-01-09T00:00:00"),
        ]
    )
    delivered = pd.Timestamp("2013-01-03")
    good, bad = parse_outcomes("x.csv", late, AWAITING, {}, SPEC, delivered)
    assert good.empty
    assert bad.reason.str.startswith("known_at 'yesterday' is not an ISO timestamp").any()
    assert bad.reason.str.contains("is after the delivery").any()
    for key, data, reason in (
        ("x.csv", b"flight_id,label\n1,2\n", "has no columns ['is_late', 'known_at']"),
        ("x.parquet", b"not parquet", "is not a readable parquet file"),
    ):
        good, bad = parse_outcomes(key, data, AWAITING, {}, SPEC, delivered)
        assert good.empty and bad.reason.tolist()[0].startswith(reason)
    already = {SPEC.task_id("2013-01-01_AA1_JFK"): "annotation 7 in inbox/a.json"}
    parquet = io.BytesIO()
    pd.DataFrame(
        {"flight_id": ["2013-01-01_AA1_JFK"], "is_late": ["true"], "known_at": ["2013-01-02"]}
    ).to_parquet(parquet)
    good, bad = parse_outcomes("x.parquet", parquet.getvalue(), AWAITING, already, SPEC)
    assert good.empty and bad.reason.tolist() == ["already labelled (annotation 7 in inbox/a.json)"]


@pytest.mark.integration  # materializes whole days through Dagster
def test_an_outcomes_file_in_the_inbox_is_imported_with_the_annotations(flywheel) -> None:
    """Through the label import of the definitions: a team's outcomes for some of the exported
    flights, beside nothing from annotators; one row names a flight never exported."""
    land_days(flywheel.zone, [date(2013, 1, 1)])
    flywheel.run("dimension_warehouse_job")
    flywheel.run("daily_warehouse_job", DAY)
    materialize(flywheel, "label_tasks", DAY, {"budget": 10, "audit_share": 0.0})
    exported = [f for (f,) in flywheel.sql("select flight_id from raw.label_tasks order by 1")]
    truth = expected_late(exported[:6])
    rows = [(f, "true" if late else "false", "2013-01-02T07:30:00Z") for f, late in truth.items()]
    rows.append(("2013-01-01_ZZ9_LGA", "true", "2013-01-02T07:30:00Z"))
    store = flywheel.defs.resources["label_store"]
    store.write_bytes(f"inbox/{NEXT}/chargebacks.csv", outcomes(rows))
    materialize(flywheel, "flight_labels", NEXT)
    labels = dict(flywheel.sql("select flight_id, is_late from raw.flight_labels"))
    assert labels == truth
    reasons = [r for (r,) in flywheel.sql("select reason from raw.quarantine")]
    assert reasons == ["was never sent to labeling"]
    sources = flywheel.sql("select distinct source_file from raw.flight_labels")
    assert sources == [(f"inbox/{NEXT}/chargebacks.csv",)]
