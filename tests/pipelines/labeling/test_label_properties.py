"""No bad delivery stops the label import: properties of import_day on any inbox file.

Each example delivers two files on one day: a fuzzed one and a good one for other tasks. The
import never raises; the good file's labels are always imported; every item or annotation of
the fuzzed file is accepted or quarantined with a reason (exactly as an oracle predicts, for
deliveries built item by item); importing the same day again changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import duckdb
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.ingestion import RAW_SCHEMA, ensure_raw_tables
from pipelines.labeling.annotations import MAX_NESTING
from pipelines.labeling.export_import import import_day
from pipelines.lib.label_exchange import FileLabelExchange
from pipelines.lib.landing_zone import LocalLandingZone
from pipelines.lib.warehouse import DuckDBConnection
from pipelines.task import load_task
from tests.pipelines.fuzzing import LONG, QUICK, mutate_bytes

TASK = load_task()
LABELING = TASK.labeling
DELIVERY = "2013-01-03"
FLIGHTS = [f"2013-01-01_UA{1000 + i}_EWR" for i in range(8)]
FUZZED, GOOD = FLIGHTS[:5], FLIGHTS[5:]  # the tasks each file answers
FUZZED_KEY, GOOD_KEY = f"inbox/{DELIVERY}/a.json", f"inbox/{DELIVERY}/z-good.json"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

SURROGATES = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=10),
    SURROGATES,
    st.sampled_from(["\x00", "late", "on_time", LABELING.from_name, LABELING.to_name]),
)
JSON = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def task_id(flight: str) -> str:
    return f"T-{flight}"


def depth(value: Any) -> int:
    """How many lists or objects deep `value` nests (0 for a scalar)."""
    if isinstance(value, dict | list):
        children = value.values() if isinstance(value, dict) else value
        return 1 + max((depth(c) for c in children), default=0)
    return 0


def annotation(ann_id: int, label: str, updated_at: str) -> dict:
    """A valid Label Studio annotation, as the labeling service exports it."""
    result = {"from_name": LABELING.from_name, "to_name": LABELING.to_name, "type": "choices"}
    return {
        "id": ann_id,
        "result": [{**result, "value": {"choices": [label]}}],
        "was_cancelled": False,
        "updated_at": updated_at,
    }


def item(flight: str, annotations: list) -> dict:
    return {
        "id": 1,
        "data": {"task_id": task_id(flight), "flight_id": flight},
        "annotations": annotations,
    }


def good_delivery() -> bytes:
    """Valid answers for the GOOD tasks: the labels that must survive any neighbouring file."""
    items = [
        item(f, [annotation(100 + i, "late", "2013-01-03T08:00:00Z")]) for i, f in enumerate(GOOD)
    ]
    return json.dumps(items).encode()


GOOD_LABELS = {(task_id(f), 100 + i, True, datetime(2013, 1, 3, 8)) for i, f in enumerate(GOOD)}


@dataclass
class Expected:
    """What the import must make of one item: rejected whole, or its annotations judged."""

    flight: str | None  # None: the item is rejected whole
    valid: list[tuple[datetime, int, bool]]  # known_at, id, is_late of each valid annotation
    invalid: int  # annotations that must be rejected


# Where an annotation can break: each one key of the export format.
ANNOTATION_DEFECTS = [
    *("object", "cancelled", "cancelled-type", "id", "id-range", "result", "no-match"),
    *("two-matches", "value", "choices", "label", "updated-type", "updated-text"),
    "updated-range",
]
NOT_TIMESTAMPS = [
    *("", "yesterday", "2013-13-01T00:00:00", "2013-01-03T25:00", "2013-01-03T09:00:00+25:00"),
    *("\ud800", "2013-01-03\x00"),
]


def not_(kinds: tuple[type, ...]) -> st.SearchStrategy:
    """Any JSON value that is none of `kinds` (a bool is an int)."""
    return JSON.filter(lambda v: not isinstance(v, kinds))


@st.composite
def valid_annotation(draw: st.DrawFn, ann_id: int) -> tuple[dict, tuple[datetime, int, bool]]:
    """A valid annotation, with extra keys and results, and what it must be read as."""
    label = draw(st.sampled_from(tuple(LABELING.choices)))
    moment = draw(st.datetimes(datetime(2000, 1, 1), datetime(2030, 1, 1)))
    offset = draw(st.none() | st.integers(-14 * 60, 14 * 60))
    if offset is None:
        updated_at = draw(st.sampled_from([moment.isoformat(), moment.isoformat() + "Z"]))
        known_at = moment
    else:
        zone = timezone(timedelta(minutes=offset))
        updated_at = moment.replace(tzinfo=zone).isoformat()
        known_at = moment - timedelta(minutes=offset)
    ann = annotation(ann_id, label, updated_at)
    cancelled = draw(st.sampled_from(["absent", None, False]))
    if cancelled == "absent":
        del ann["was_cancelled"]
    else:
        ann["was_cancelled"] = cancelled
    other = {
        "from_name": draw(st.text(max_size=5)),
        "to_name": LABELING.to_name,
        "value": draw(JSON),
    }
    ann["result"] += [other] if other["from_name"] != LABELING.from_name else []
    extra = draw(st.dictionaries(st.sampled_from(["lead_time", "created_at", "x"]), JSON))
    return {**extra, **ann}, (known_at, ann_id, LABELING.value_of(label))


def broken_annotation(draw: st.DrawFn, ann: dict) -> Any:
    """`ann` made invalid at one key of the export format."""
    kind = draw(st.sampled_from(ANNOTATION_DEFECTS))
    match kind:
        case "object":
            return draw(not_((dict,)))
        case "cancelled":
            ann["was_cancelled"] = True
        case "cancelled-type":
            ann["was_cancelled"] = draw(not_((bool,)).filter(lambda v: v is not None))
        case "id":
            ann["id"] = draw(not_((int,)) | st.booleans())
        case "id-range":
            ann["id"] = draw(st.integers(max_value=INT64_MIN - 1) | st.integers(INT64_MAX + 1))
        case "result":
            ann["result"] = draw(not_((list,)))
        case "no-match":
            ann["result"] = [r for r in ann["result"] if r.get("from_name") != LABELING.from_name]
        case "two-matches":
            ann["result"] = [*ann["result"], ann["result"][0]]
        case "value":
            ann["result"][0]["value"] = draw(not_((dict,)))
        case "choices":
            choices = draw(
                not_((list,))
                | st.lists(st.sampled_from(tuple(LABELING.choices))).filter(lambda c: len(c) != 1)
            )
            ann["result"][0]["value"]["choices"] = choices
        case "label":
            ann["result"][0]["value"]["choices"] = [
                draw(JSON.filter(lambda v: v not in tuple(LABELING.choices)))
            ]
        case "updated-type":
            ann["updated_at"] = draw(not_((str,)))
        case "updated-text":
            ann["updated_at"] = draw(st.sampled_from(NOT_TIMESTAMPS))
        case "updated-range":
            ann["updated_at"] = draw(
                st.sampled_from(["0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00"])
            )
    return ann


@st.composite
def item_case(draw: st.DrawFn) -> tuple[Any, Expected]:
    """An item for one of the FUZZED tasks, valid or broken at one key, and what it must give."""
    flight = draw(st.sampled_from(FUZZED))
    n = draw(st.integers(0, 4))
    ids = draw(st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=n, max_size=n, unique=True))
    annotations, valid, invalid = [], [], 0
    for ann_id in ids:
        ann, parsed = draw(valid_annotation(ann_id))
        if draw(st.integers(0, 2)) == 0:
            annotations.append(broken_annotation(draw, ann))
            invalid += 1
        else:
            annotations.append(ann)
            valid.append(parsed)
    it = item(flight, annotations)
    it["data"] |= draw(st.dictionaries(st.sampled_from(["distance", "deep"]), JSON))
    if draw(st.integers(0, 4)) == 0:
        it["data"]["deep"] = nested(draw(st.integers(MAX_NESTING - 5, MAX_NESTING + 20)))
    if depth(it) > MAX_NESTING or not annotations or draw(st.integers(0, 5)) == 0:
        return broken_item(draw, it), Expected(None, [], 0)
    return it, Expected(flight, valid, invalid)


def nested(levels: int) -> Any:
    value: Any = "bottom"
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


def broken_item(draw: st.DrawFn, it: dict) -> Any:
    """`it` made unusable as a whole (if it is not already: too deep, or no annotations)."""
    if depth(it) > MAX_NESTING or not it["annotations"]:
        return it
    kind = draw(
        st.sampled_from(["object", "data", "task-type", "unknown", "flight", "annotations"])
    )
    match kind:
        case "object":
            return draw(not_((dict,)))
        case "data":
            it["data"] = draw(not_((dict,)))
        case "task-type":
            it["data"]["task_id"] = draw(not_((str,)))
        case "unknown":
            known = {task_id(f) for f in FLIGHTS}
            it["data"]["task_id"] = draw(
                (st.text(max_size=10) | SURROGATES).filter(lambda t: t not in known)
            )
        case "flight":
            it["data"]["flight_id"] = draw(JSON.filter(lambda v: v != it["data"]["flight_id"]))
        case "annotations":
            it["annotations"] = draw(not_((list,)) | st.just([]))
    return it


def expected_outcome(cases: list[Expected]) -> tuple[set[tuple], int]:
    """The labels a file of these items must give, and how many rows it must quarantine: the
    first item of a task with a valid annotation labels it, with its latest, then highest-id one."""
    labelled: dict[str, tuple] = {}
    rejected = 0
    for case in cases:
        if case.flight is None or task_id(case.flight) in labelled:
            rejected += 1
            continue
        rejected += case.invalid + max(len(case.valid) - 1, 0)
        if case.valid:
            known_at, ann_id, is_late = max(case.valid)
            labelled[task_id(case.flight)] = (task_id(case.flight), ann_id, is_late, known_at)
    return set(labelled.values()), rejected


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[bytes, set[tuple], int]:
    """A delivery built item by item, its bytes, and the labels and rejections it must give."""
    cases = draw(st.lists(item_case(), max_size=6))
    items = [it for it, _ in cases]
    try:
        text = json.dumps(
            items, ensure_ascii=draw(st.booleans()), indent=draw(st.none() | st.just(2))
        )
        data = text.encode()
    except UnicodeEncodeError:  # lone surrogates only travel as JSON escapes
        data = json.dumps(items).encode()
    bom = draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))
    return bom + data, *expected_outcome([e for _, e in cases])


@pytest.fixture(scope="module")
def inbox(tmp_path_factory) -> Iterator[tuple[DuckDBConnection, LocalLandingZone]]:
    """A warehouse whose label tasks await answers for FLIGHTS, and a label store."""
    con = DuckDBConnection(duckdb.connect())
    ensure_raw_tables(con, TASK)
    tasks = pd.DataFrame(
        {
            "task_id": [task_id(f) for f in FLIGHTS],
            "flight_id": FLIGHTS,
            "batch_id": "flights-2013-01-01",
            "reason": "random",
            "_landing_date": pd.Timestamp("2013-01-01").date(),
        }
    )
    con.insert_rows(f"{RAW_SCHEMA}.{TASK.label_tasks_table}", tasks)
    store = LocalLandingZone(root=str(tmp_path_factory.mktemp("labels")))
    store.write_bytes(GOOD_KEY, good_delivery())
    yield con, store
    con.raw.close()


def tables(con: DuckDBConnection) -> tuple[list[tuple], list[tuple]]:
    """The labels and the labels' quarantine, without load timestamps."""
    labels = con.execute(
        f"select task_id, annotation_id, is_late, known_at, source_file "
        f"from {RAW_SCHEMA}.{TASK.labels_table} order by all"
    ).fetchall()
    quarantine = con.execute(
        f"select * exclude (quarantined_at) from {RAW_SCHEMA}.quarantine where feed = ? "
        "order by all",
        [TASK.labels_table],
    ).fetchall()
    return labels, quarantine


def check_import(inbox, data: bytes) -> tuple[set[tuple], list[tuple]]:
    """Import a day holding `data` beside the good file; the invariants that hold for any bytes.
    The fuzzed file's labels and quarantine rows."""
    con, store = inbox
    store.write_bytes(FUZZED_KEY, data)
    report = import_day(con, FileLabelExchange(store=store), TASK, LABELING, DELIVERY)
    assert report.files == [FUZZED_KEY, GOOD_KEY]
    labels, quarantine = tables(con)
    assert {r[:4] for r in labels if r[4] == GOOD_KEY} == GOOD_LABELS
    assert all(r[2] == FUZZED_KEY and r[4] for r in quarantine)  # source_file, reason
    fuzzed = {r[:4] for r in labels if r[4] == FUZZED_KEY}
    assert {t for t, *_ in fuzzed} <= {task_id(f) for f in FUZZED}
    assert report.accepted == len(labels) and report.rejected == len(quarantine)
    import_day(con, FileLabelExchange(store=store), TASK, LABELING, DELIVERY)
    assert tables(con) == (labels, quarantine)
    return fuzzed, quarantine


def check_delivery(inbox, case: tuple[bytes, set[tuple], int]) -> None:
    data, labels, rejected = case
    fuzzed, quarantine = check_import(inbox, data)
    assert fuzzed == labels
    assert len(quarantine) == rejected


@QUICK
@given(deliveries())
def test_every_item_and_annotation_is_accepted_or_rejected_as_the_oracle_says(inbox, case):
    check_delivery(inbox, case)


@pytest.mark.slow
@pytest.mark.fuzz
@LONG
@given(deliveries())
def test_fuzz_deliveries_against_the_oracle(inbox, case):
    check_delivery(inbox, case)


@st.composite
def any_delivery(draw: st.DrawFn) -> bytes:
    """Any bytes in an inbox: a valid delivery mutated byte by byte, a random JSON tree, very deep
    nesting, or noise."""
    kind = draw(st.sampled_from(["mutated", "tree", "deep", "noise"]))
    if kind == "mutated":
        data = draw(deliveries())[0]
        for _ in range(draw(st.integers(1, 3))):
            data = draw(mutate_bytes(data))
        return data
    if kind == "tree":
        return json.dumps(draw(JSON)).encode()
    if kind == "deep":
        levels = draw(st.integers(1, 300_000))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        return opener * levels + b"1" + closer * levels
    return draw(st.binary(max_size=200))


@QUICK
@given(any_delivery())
def test_any_bytes_in_the_inbox_never_fail_the_import(inbox, data):
    check_import(inbox, data)


@pytest.mark.slow
@pytest.mark.fuzz
@LONG
@given(any_delivery())
def test_fuzz_any_bytes_in_the_inbox(inbox, data):
    check_import(inbox, data)
