"""The labeling protocol without Dagster: selection, Label Studio tasks, and reading exports."""

from __future__ import annotations

import hashlib
import json
from datetime import date

import duckdb
import numpy as np
import pandas as pd
import pytest

from pipelines.ingestion import ensure_raw_tables
from pipelines.labeling import (
    REJECTED_COLUMNS,
    accepted_columns,
    batch_manifest,
    label_studio_tasks,
    parse_label_studio_export,
    render_json,
    select_for_labeling,
)
from pipelines.labeling.annotations import MAX_NESTING
from pipelines.labeling.export_import import import_day
from pipelines.labeling.selection import importance_weights
from pipelines.labeling.spec import LabelBudget
from pipelines.lib.label_exchange import FileLabelExchange
from pipelines.lib.landing_zone import LocalLandingZone
from pipelines.lib.warehouse import DuckDBConnection
from pipelines.task import TASKS_DIR, load_task

KEY = "inbox/2013-01-03/b1.json"
LABELING = load_task("flights").labeling


def select(*args, **kwargs) -> pd.DataFrame:
    """The flights task's selection: examples by flight_id, its composite segments."""
    return select_for_labeling(
        *args, **kwargs, example_id=LABELING.example_id, segments=LABELING.segments
    )


def candidates(n: int = 40, scored: bool = True) -> pd.DataFrame:
    """`n` flights with scores spread over [0, 1] and a few segments to flag."""
    rng = np.random.default_rng(7)
    return pd.DataFrame(
        {
            "flight_id": [f"2013-01-01_UA{1000 + i}_EWR" for i in range(n)],
            "score": rng.uniform(0, 1, n) if scored else np.nan,
            "route": [f"EWR-{'ORD' if i % 4 == 0 else 'IAH'}" for i in range(n)],
            "carrier": ["UA"] * n,
            "origin": ["EWR"] * n,
            "scheduled_hour": [5 + i % 12 for i in range(n)],
        }
    )


def test_budget_and_audit_share_are_exact_and_nothing_is_chosen_twice():
    chosen = select(candidates(), budget=10, audit_share=0.3, seed=1)
    assert len(chosen) == 10
    assert (chosen["reason"] == "audit").sum() == 3
    assert chosen["flight_id"].is_unique
    assert chosen["priority"].tolist() == list(range(1, 11))
    assert len(select(candidates(5), budget=10, audit_share=0.5, seed=1)) == 5
    assert select(candidates(), budget=0, audit_share=0.5, seed=1).empty


def test_without_any_score_the_choice_is_uniformly_random_and_seeded():
    pool = candidates(scored=False)
    chosen = select(pool, budget=8, audit_share=0.25, seed=3)
    assert set(chosen["reason"]) == {"random"} and len(chosen) == 8
    again = select(pool.sample(frac=1, random_state=0), 8, 0.25, seed=3)
    pd.testing.assert_frame_equal(chosen, again)
    other = select(pool, budget=8, audit_share=0.25, seed=4)
    assert set(other["flight_id"]) != set(chosen["flight_id"])


def test_uncertainty_picks_the_scores_closest_to_one_half_ties_by_flight_id():
    pool = candidates(6).assign(score=[0.9, 0.45, 0.55, 0.1, 0.5, 0.7])
    chosen = select(pool, budget=4, audit_share=0.0, seed=0)
    assert chosen["reason"].tolist() == ["uncertainty"] * 4
    # 0.5 first; 0.45 and 0.55 tie on |score - 0.5|, so the smaller flight_id (UA1001) goes first
    assert chosen["score"].tolist() == [0.5, 0.45, 0.55, 0.7]


def test_with_each_class_probability_the_smallest_gap_between_the_two_likeliest_goes_first():
    pool = candidates(4).assign(
        p_0=[0.8, 0.4, 0.1, 0.34],
        p_1=[0.1, 0.35, 0.1, 0.33],
        p_2=[0.1, 0.25, 0.8, 0.33],
    )
    chosen = select(pool, budget=3, audit_share=0.0, seed=0)
    assert chosen["reason"].tolist() == ["uncertainty"] * 3
    # gaps: 0.7, 0.05, 0.7, 0.01 (whatever the scores); the 0.7 tie goes to the smaller id
    assert chosen["flight_id"].tolist() == [pool.flight_id[3], pool.flight_id[1], pool.flight_id[0]]


def test_drift_segments_come_first_and_take_at_most_half_of_the_remaining_budget():
    pool = candidates(40)
    flagged = pd.DataFrame(
        {"segment_type": ["route", "origin_hour"], "segment_value": ["EWR-ORD", "EWR-6"]}
    )
    in_segment = (pool["route"] == "EWR-ORD") | (pool["scheduled_hour"] == 6)
    chosen = select(pool, budget=12, audit_share=0.25, seed=2, flagged_segments=flagged)
    drift = chosen[chosen["reason"] == "drift_segment"]
    assert len(drift) == (12 - 3) // 2
    assert set(drift["flight_id"]) <= set(pool.loc[in_segment, "flight_id"])
    audited = set(chosen.loc[chosen["reason"] == "audit", "flight_id"])
    untaken = pool[in_segment & ~pool["flight_id"].isin(audited)]
    expected = untaken.assign(m=(untaken["score"] - 0.5).abs()).sort_values("m")["flight_id"]
    assert drift["flight_id"].tolist() == expected.head(4).tolist()
    assert chosen["reason"].tolist() == ["audit"] * 3 + ["drift_segment"] * 4 + ["uncertainty"] * 5


def test_the_choice_is_deterministic_for_a_seed():
    pool = candidates()
    first = select(pool, budget=10, audit_share=0.5, seed=11)
    pd.testing.assert_frame_equal(first, select(pool, 10, 0.5, seed=11))
    assert set(first["flight_id"]) != set(select(pool, 10, 0.5, seed=12)["flight_id"])


@pytest.mark.parametrize(
    ("budget", "share", "message"),
    [(-1, 0.1, "budget must be >= 0"), (5, 1.5, "audit_share"), (5, -0.1, "audit_share")],
)
def test_invalid_arguments_are_refused(budget, share, message):
    with pytest.raises(ValueError, match=message):
        select(candidates(), budget=budget, audit_share=share, seed=0)


def test_duplicate_candidates_and_unknown_segment_types_are_refused():
    pool = candidates(4)
    with pytest.raises(ValueError, match="each flight_id once"):
        select(pd.concat([pool, pool]), budget=2, audit_share=0, seed=0)
    flagged = pd.DataFrame({"segment_type": ["tail"], "segment_value": ["N1"]})
    with pytest.raises(ValueError, match="unknown segment type 'tail'"):
        select(pool, budget=2, audit_share=0, seed=0, flagged_segments=flagged)


def test_importance_weights_stand_for_the_examples_of_each_day():
    first, second = date(2013, 3, 1), date(2013, 3, 2)
    reasons = pd.Series(["audit"] * 10 + ["uncertainty"] * 20 + ["random"] * 5)
    days = pd.Series([first] * 30 + [second] * 5)
    sizes = pd.Series({first: 100, second: 50})
    # 10 audit picks stand for the 100 - 20 examples no targeted pick took; 5 random for 50.
    expected = np.array([8.0] * 10 + [1.0] * 20 + [10.0] * 5)
    np.testing.assert_allclose(importance_weights(reasons, days, sizes, 1.0), expected)
    np.testing.assert_allclose(importance_weights(reasons, days, sizes, 0.5), expected**0.5)
    np.testing.assert_array_equal(importance_weights(reasons, days, sizes, 0.0), np.ones(35))
    # A day whose picks were all it had: each stands for itself, not less.
    all_taken = importance_weights(pd.Series(["audit", "uncertainty"]), days[:2], sizes * 0 + 1, 1)
    np.testing.assert_array_equal(all_taken, [1.0, 1.0])


def test_importance_weights_refuse_unknown_days_and_exponents():
    reasons, days = pd.Series(["audit"]), pd.Series([date(2013, 3, 1)])
    with pytest.raises(ValueError, match="no example count for 1 labelled days"):
        importance_weights(reasons, days, pd.Series({date(2013, 3, 2): 10}), 1.0)
    with pytest.raises(ValueError, match=r"within \[0, 1\], got 1.5"):
        importance_weights(reasons, days, pd.Series({date(2013, 3, 1): 10}), 1.5)


def test_weighted_labels_estimate_the_late_rate_of_every_flight():
    """Uncertainty picks favour flights near one half, so the labels' plain mean overstates a
    low late rate; weighted by importance (exponent 1), the labels estimate the rate of every
    flight of their days."""
    rng = np.random.default_rng(3)
    picked, everything = [], []
    for day in range(20):
        pool = candidates(400).assign(score=rng.beta(2, 5, 400))
        pool["late"] = rng.random(400) < pool.score
        pool["day"] = day
        everything.append(pool)
        picked.append(select(pool, budget=60, audit_share=0.4, seed=day))
    labels, flights = pd.concat(picked), pd.concat(everything)
    sizes = flights.groupby("day").size()
    weights = importance_weights(labels.reason, labels.day, sizes, 1.0)
    truth = flights.late.mean()
    assert labels.late.mean() - truth > 0.08
    assert abs(np.average(labels.late, weights=weights) - truth) < 0.03


def test_tasks_carry_a_prediction_only_when_scored_and_the_manifest_hashes_the_bytes():
    chosen = candidates(2).assign(
        score=[0.2, np.nan],
        reason=["uncertainty", "audit"],
        priority=[1, 2],
        scheduled_departure_at=pd.Timestamp("2013-01-01 10:15"),
        distance=[np.int64(1400), np.nan],
    )
    tasks = label_studio_tasks(chosen, "b1", "v3", LABELING)
    scored, unscored = tasks
    assert scored["data"]["task_id"] == "T-2013-01-01_UA1000_EWR"
    assert scored["data"]["scheduled_departure_at"] == "2013-01-01T10:15:00"
    assert scored["data"]["distance"] == 1400 and "distance" not in unscored["data"]
    assert "score" not in scored["data"] and "reason" not in scored["data"]
    assert scored["meta"] == {"batch_id": "b1", "reason": "uncertainty", "priority": 1}
    (prediction,) = scored["predictions"]
    assert prediction["model_version"] == "v3" and prediction["score"] == pytest.approx(0.8)
    assert prediction["result"][0]["value"] == {"choices": ["on_time"]}
    assert unscored["predictions"] == []
    data = render_json(tasks)
    assert data.endswith(b"\n") and json.loads(data) == tasks
    manifest = batch_manifest("b1", tasks, "2013-01-02T00:00:00Z")
    assert manifest["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["task_count"] == 2 and manifest["reasons"] == {"audit": 1, "uncertainty": 1}


def annotation(ann_id: int, label: str = "late", updated_at: str = "2013-01-03T09:00:00Z", **extra):
    """A Label Studio annotation choosing `label`."""
    result = {"from_name": "is_late", "to_name": LABELING.to_name, "type": "choices"}
    return {
        "id": ann_id,
        "result": [{**result, "value": {"choices": [label]}}],
        "was_cancelled": False,
        "created_at": updated_at,
        "updated_at": updated_at,
        "completed_by": 1,
        **extra,
    }


def item(flight: str, *annotations: dict, flight_id: str | None = None) -> dict:
    """A Label Studio export item of the task of `flight`."""
    data = {"task_id": f"T-{flight}", "flight_id": flight_id or flight, "distance": 1400}
    return {"id": 1, "data": data, "annotations": list(annotations)}


A, B, C = "2013-01-01_UA1545_EWR", "2013-01-01_AA1141_JFK", "2013-01-01_B6725_JFK"
AWAITING = {f"T-{f}": f for f in (A, B, C)}


def parse(items, already: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    data = render_json(items) if isinstance(items, list) else items
    accepted, rejected = parse_label_studio_export(KEY, data, AWAITING, already or {}, LABELING)
    assert list(accepted.columns) == list(accepted_columns(LABELING))
    assert list(rejected.columns) == list(REJECTED_COLUMNS)
    return accepted, rejected


def test_a_valid_export_is_accepted_with_its_known_at():
    accepted, rejected = parse(
        [
            item(A, annotation(7, "late", "2013-01-03T09:30:00+01:00")),
            item(B, annotation(8, "on_time")),
        ]
    )
    assert rejected.empty
    assert accepted.to_dict("records") == [
        {
            "task_id": f"T-{A}",
            "flight_id": A,
            "is_late": True,
            "known_at": pd.Timestamp("2013-01-03 08:30:00"),
            "annotation_id": 7,
            "source_file": KEY,
        },
        {
            "task_id": f"T-{B}",
            "flight_id": B,
            "is_late": False,
            "known_at": pd.Timestamp("2013-01-03 09:00:00"),
            "annotation_id": 8,
            "source_file": KEY,
        },
    ]
    assert accepted["known_at"].dt.tz is None


@pytest.mark.parametrize(
    ("data", "position"),
    [
        (b'[{"id": 1,\n  "data": {"task_id": "T-x"}', "line 2 column"),
        (b"", "line 1 column 1"),
        (b'{"id": 1}', "not a JSON list"),
        (b"\xff\xfe[]", "not UTF-8 at byte 0"),
    ],
)
def test_a_file_that_is_not_a_json_list_is_one_rejected_row(data, position):
    accepted, rejected = parse(data)
    assert accepted.empty
    (row,) = rejected.to_dict("records")
    assert position in row["reason"] and row["source_file"] == KEY
    assert pd.isna(row["item"]) and row["task_id"] is None


def test_unknown_tasks_wrong_flights_and_labels_outside_the_set_are_rejected():
    bad_result = annotation(3)
    bad_result["result"][0]["value"]["choices"] = ["maybe"]
    items = [
        {"id": 1, "data": {"flight_id": A}, "annotations": [annotation(1)]},
        item("2013-01-09_XX1_LGA", annotation(2)),
        item(A, bad_result),
        item(B, annotation(4), flight_id=C),
        item(C, annotation(5, "late", "yesterday")),
    ]
    accepted, rejected = parse(items)
    assert accepted.empty
    reasons = rejected["reason"].tolist()
    assert reasons[0] == "unknown task: the item has no data.task_id"
    assert reasons[1] == "unknown task 'T-2013-01-09_XX1_LGA'"
    assert reasons[2] == "label 'maybe' not in ('late', 'on_time')"
    assert reasons[3].startswith(f"flight_id '{C}' is not the task's flight_id")
    assert reasons[4] == "updated_at 'yesterday' is not an ISO timestamp"
    assert rejected["item"].tolist() == [0, 1, 2, 3, 4]
    assert json.loads(rejected["record"][2]) == bad_result


def test_several_annotations_resolve_to_the_latest_update_then_the_highest_id():
    late = annotation(5, "on_time", "2013-01-03T12:00:00Z")
    tie_low, tie_high = (annotation(i, "late", "2013-01-03T15:00:00Z") for i in (8, 9))
    accepted, rejected = parse([item(A, late, tie_high, tie_low)])
    assert accepted[["annotation_id", "is_late"]].values.tolist() == [[9, True]]
    assert sorted(rejected["reason"]) == ["superseded by annotation 9"] * 2
    assert sorted(json.loads(r)["id"] for r in rejected["record"]) == [5, 8]


def test_a_task_is_labelled_once_whether_earlier_or_in_the_same_file():
    already = {f"T-{A}": "annotation 3 in inbox/2013-01-02/b0.json"}
    accepted, rejected = parse(
        [item(A, annotation(1)), item(B, annotation(2)), item(B, annotation(4))], already
    )
    assert accepted["task_id"].tolist() == [f"T-{B}"]
    assert rejected["reason"].tolist() == [
        "task already labelled (annotation 3 in inbox/2013-01-02/b0.json)",
        f"task already labelled (annotation 2 in item 1 of {KEY})",
    ]


def test_cancelled_annotations_are_rejected_and_the_valid_one_kept():
    accepted, rejected = parse(
        [item(A, annotation(1, was_cancelled=True), annotation(2, "on_time"))]
    )
    assert accepted["annotation_id"].tolist() == [2]
    assert rejected[["item", "reason"]].values.tolist() == [[0, "annotation cancelled"]]


def test_nothing_valid_is_lost_every_annotation_is_accepted_or_rejected():
    items = [
        item(A, annotation(1), annotation(2, "late", "2013-01-03T10:00:00Z")),
        item(B, annotation(3, was_cancelled=True)),
        item(C, annotation(4, "on_time"), annotation(5, "sometimes")),
    ]
    accepted, rejected = parse(items)
    assert len(accepted) + len(rejected) == 5
    assert accepted["annotation_id"].tolist() == [2, 4]
    assert set(rejected["task_id"]) == {f"T-{A}", f"T-{B}", f"T-{C}"}


def test_a_delivery_nested_too_deeply_is_one_rejected_row_and_its_neighbours_import(tmp_path):
    con = DuckDBConnection(duckdb.connect())
    task = load_task()
    ensure_raw_tables(con, task)
    exported = pd.DataFrame({"task_id": list(AWAITING), "flight_id": list(AWAITING.values())})
    con.insert_rows(f"raw.{task.label_tasks_table}", exported)
    store = LocalLandingZone(root=str(tmp_path))
    day = "2013-01-03"
    levels = 200_000  # json.loads: RecursionError
    store.write_bytes(f"inbox/{day}/a-deep.json", b"[" * levels + b"]" * levels)
    store.write_bytes(
        f"inbox/{day}/b.json", render_json([item(A, annotation(1)), item(B, annotation(2))])
    )
    report = import_day(con, FileLabelExchange(store=store), task, LABELING, day)
    assert (report.accepted, report.rejected) == (2, 1)
    (row,) = con.execute("select source_file, source_line, reason from raw.quarantine").fetchall()
    assert row == (
        f"inbox/{day}/a-deep.json",
        None,
        "JSON nested too deeply to parse (beyond Python's recursion limit)",
    )
    labels = con.execute(
        "select task_id, annotation_id from raw.flight_labels order by 2"
    ).fetchall()
    assert labels == [(f"T-{A}", 1), (f"T-{B}", 2)]


def test_an_item_nested_deeper_than_the_limit_is_rejected_and_the_others_accepted():
    deep: object = "bottom"
    for _ in range(MAX_NESTING):
        deep = [deep]
    accepted, rejected = parse([item(A, annotation(1), deep), item(B, annotation(2))])
    assert accepted["annotation_id"].tolist() == [2]
    assert rejected[["item", "reason"]].values.tolist() == [
        [0, f"item nested deeper than {MAX_NESTING} levels"]
    ]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"result": 5}, "result 5 is not a list"),  # was: TypeError, 'int' is not iterable
        ({"id": 2**64}, "annotation id 18446744073709551616 is out of the 64-bit range"),
        ({"id": True}, "annotation id True is not an integer"),
        ({"was_cancelled": "no"}, "was_cancelled 'no' is not a boolean"),
        (
            {"updated_at": "9999-12-31T23:00:00-05:00"},
            "updated_at '9999-12-31T23:00:00-05:00' is outside years 1 to 9999 in UTC",
        ),
        ({"updated_at": 20130103}, "updated_at 20130103 is not an ISO timestamp"),
    ],
    ids=[
        "result-int",
        "id-uint64",
        "id-bool",
        "cancelled-text",
        "updated-year-10000",
        "updated-int",
    ],
)
def test_an_annotation_wrong_at_one_key_is_rejected_and_the_valid_one_kept(change, reason):
    accepted, rejected = parse([item(A, annotation(1, **change), annotation(2, "on_time"))])
    assert accepted["annotation_id"].tolist() == [2]
    assert rejected[["item", "reason"]].values.tolist() == [[0, reason]]


def test_timestamps_beyond_pandas_nanoseconds_are_read_exactly():
    accepted, rejected = parse([item(A, annotation(1, updated_at="3000-01-01T01:00:00+01:00"))])
    assert rejected.empty
    assert accepted["known_at"].tolist() == [pd.Timestamp("3000-01-01 00:00:00")]


def test_lone_surrogates_and_a_byte_order_mark_do_not_break_the_import():
    items = [item(A, annotation(1)), {"data": {"task_id": "\ud800"}, "annotations": []}]
    data = b"\xef\xbb\xbf" + json.dumps(items).encode()  # ASCII: the surrogate as an escape
    accepted, rejected = parse(data)
    assert accepted["annotation_id"].tolist() == [1]
    (row,) = rejected.to_dict("records")
    assert row["task_id"] == "\\ud800" and row["reason"] == "unknown task '\\ud800'"
    row["record"].encode("utf-8")  # storable as UTF-8 text...
    assert json.loads(row["record"]) == items[1]  # ...and still the same JSON


def test_an_integer_beyond_the_json_codec_limit_is_one_rejected_row():
    accepted, rejected = parse(b'[{"id": ' + b"1" * 5000 + b"}]")
    assert accepted.empty
    (reason,) = rejected["reason"]
    assert reason.startswith("unreadable JSON: Exceeds the limit (4300 digits)")


def test_an_export_names_only_the_task_ids_a_warehouse_can_hold() -> None:
    """What a label import looks up in the warehouse: never raises, whatever the bytes."""
    from pipelines.labeling.annotations import task_ids_named

    export = json.dumps(
        [
            {"data": {"task_id": "t1"}},
            {"data": {"task_id": "t2"}, "annotations": []},
            {"data": {"task_id": "\ud800"}},  # a lone surrogate: no UTF-8 text holds it
            {"data": {"task_id": "t\x003"}},  # PostgreSQL's text holds no NUL
            {"data": {"task_id": 4}},
            {"data": ["t5"]},
            "t6",
        ]
    ).encode()
    assert task_ids_named(export) == {"t1", "t2"}
    for unreadable in (b"", b"{", b"\xff\xfe", b'{"data": {"task_id": "t1"}}', b"[" * 100_000):
        assert task_ids_named(unreadable) == set()


def test_the_pre_annotation_is_the_scores_choice_binary_or_the_nearest_star() -> None:
    from pipelines.task import load_task

    flights = load_task("flights").labeling
    assert [flights.choice_for_score(s) for s in (0.2, 0.5, 0.9)] == ["on_time", "late", "late"]
    stars = load_task("movielens").labeling
    # The score is the expected class over 9: 0 is half a star, 1 five stars.
    picks = [stars.choice_for_score(s) for s in (0.0, 0.05, 0.06, 0.5, 7 / 9, 1.0, 1.2)]
    assert picks == ["0.5", "0.5", "1", "3", "4", "5", "5"]


@pytest.mark.parametrize(
    ("raw", "examples", "expected"), [(150, 900, 150), ("5%", 900, 45), ("100%", 7, 7), (0, 9, 0)]
)
def test_a_label_budget_is_a_count_or_a_share_of_the_partition(raw, examples, expected) -> None:
    assert LabelBudget.parse(raw).for_partition(examples) == expected


@pytest.mark.parametrize("raw", [-1, "0%", "150%", "five", 1.5, True, "%"])
def test_a_label_budget_neither_a_count_nor_a_share_is_refused(raw) -> None:
    with pytest.raises(ValueError, match="neither a whole number of examples per partition"):
        LabelBudget.parse(raw)


def test_the_task_file_names_its_budget(tmp_path) -> None:
    text = (TASKS_DIR / "flights.yaml").read_text()
    assert "  budget: 150\n" in text
    assert load_task("flights").labeling.budget == LabelBudget(count=150)
    shared = tmp_path / "flights.yaml"
    shared.write_text(text.replace("  budget: 150\n", "  budget: 12%\n"))
    assert load_task(shared).labeling.budget.for_partition(1000) == 120
    shared.write_text(text.replace("  budget: 150\n", "  budget: lots\n"))
    with pytest.raises(ValueError, match=r"flights\.yaml: labels: budget 'lots' is neither"):
        load_task(shared)
