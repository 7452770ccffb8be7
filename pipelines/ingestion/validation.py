"""Parse a landing file and check every row against its feed contract.

A file that cannot be parsed at all raises LandingFileError naming the file and the position.
Rows that parse but break the contract are returned apart, each with its line and reason, so
ingestion can quarantine them and load the rest: no value, however long, large or odd, raises.
Pure pandas, no Dagster.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

import numpy as np
import pandas as pd

from pipelines.task.contracts import ColumnSpec, FeedSpec

# A decimal number in plain or scientific notation, blanks around it allowed; no inf, nan, hex,
# digit separators or non-ASCII digits (which Python's own int() and float() would accept).
_NUMBER = re.compile(r"[ \t]*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[ \t]*")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # what the CSV reader counts as one
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DATETIME_MIN, DATETIME_MAX = pd.Timestamp(datetime.min), pd.Timestamp(datetime.max)


class LandingFileError(ValueError):
    """A landing file that cannot be parsed at all; the message names the file and position."""


@dataclass(frozen=True)
class ValidatedFile:
    """The typed rows that passed the contract and the rows that did not, with reasons."""

    key: str
    rows: pd.DataFrame  # contract columns, typed, plus _source_line
    rejected: pd.DataFrame  # source_line, reason, record (the raw fields as JSON)
    ignored_columns: tuple[str, ...]

    @property
    def rows_read(self) -> int:
        return len(self.rows) + len(self.rejected)

    def quarantined(self, reason: str) -> ValidatedFile:
        """The file with every row that passed the contract quarantined too, for `reason` (a
        verdict on the file as a whole); each record holds the row's contract fields."""
        fields = self.rows.drop(columns="_source_line")
        records = [
            json.dumps({k: _plain(v) for k, v in row.items()})
            for row in fields.to_dict(orient="records")
        ]
        moved = pd.DataFrame(
            {"source_line": self.rows["_source_line"], "reason": reason, "record": records}
        )
        rejected = pd.concat([self.rejected, moved]).sort_values("source_line", kind="stable")
        return ValidatedFile(
            self.key, self.rows.iloc[:0], rejected.reset_index(drop=True), self.ignored_columns
        )


def _plain(value: object) -> object:
    """A typed field as JSON holds it: missing as null, numbers as numbers, the rest as text."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else float(value)
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    return str(value)


def parse_csv(key: str, data: bytes) -> tuple[list[str], list[list[str]], list[int]]:
    """Split a CSV file into header, rows and line numbers; raise LandingFileError if malformed."""
    text = decode_utf8(key, data)
    if not text.strip():
        raise LandingFileError(f"{key}: file is empty (expected at least a header line)")
    if not text.endswith(("\n", "\r")):
        # Producers end every file with a newline; one that does not was cut short in transit.
        raise LandingFileError(
            f"{key}: truncated at line {len(_LINE_BREAK.findall(text)) + 1} (no final newline)"
        )
    # The whole file is in memory already, so a field may be as long as the file: the reader's
    # default limit (128 KiB) would reject the file for one long value instead of its row.
    csv.field_size_limit(max(csv.field_size_limit(), len(text)))
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader)
        rows, lines = [], []
        for fields in reader:
            if len(fields) != len(header):
                raise LandingFileError(
                    f"{key}: line {reader.line_num} has {len(fields)} fields, header has "
                    f"{len(header)} (truncated or malformed row)"
                )
            rows.append(fields)
            lines.append(reader.line_num)
    except csv.Error as e:
        start = (lines[-1] if lines else 1) + 1
        raise LandingFileError(
            f"{key}: unparseable CSV record starting at line {start} "
            f"(reader stopped at line {reader.line_num}): {e}"
        ) from e
    return header, rows, lines


def decode_utf8(key: str, data: bytes) -> str:
    """The text of a UTF-8 file without its byte-order mark; LandingFileError if not UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        utf16 = data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
        hint = " (it starts with a UTF-16 byte-order mark)" if utf16 else ""
        raise LandingFileError(f"{key}: not UTF-8 at byte {e.start}{hint}") from e
    # Spreadsheet exports often start with a UTF-8 byte-order mark; it is not part of the header.
    return text.removeprefix("\ufeff")


def _coerce(col: ColumnSpec, raw: pd.Series, present: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Typed values of one column, and per row why a present value fails to coerce ('' if not)."""
    if col.type in ("integer", "float"):
        parse = _parse_integer if col.type == "integer" else _parse_float
        # Values repeat a lot within a file (year, month, carrier...): parse each distinct one once.
        parsed = {text: parse(text) for text in raw[present].unique()}
        results = [
            parsed[text] if ok else (None, "") for text, ok in zip(raw, present, strict=True)
        ]
        dtype = "Int64" if col.type == "integer" else "float64"
        values = pd.Series([v for v, _ in results], index=raw.index, dtype=dtype)
        return values, pd.Series([w for _, w in results], index=raw.index, dtype="object")
    if col.type == "timestamp":
        values = pd.to_datetime(raw.where(present), errors="coerce", utc=True, format="ISO8601")
        values = values.dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[us]")
        # Python's datetime (and every client fetching one) stops at years 1 and 9999.
        outside = (values < DATETIME_MIN) | (values > DATETIME_MAX)
        why = pd.Series("", index=raw.index, dtype="object")
        _set(why, present & values.isna(), "not a valid timestamp")
        _set(
            why, present & outside.fillna(False), "not a valid timestamp (outside years 1 to 9999)"
        )
        return values, why
    values = raw.where(present).astype("string")
    return values, pd.Series("", index=raw.index, dtype="object")


def _parse_integer(text: str) -> tuple[int | None, str]:
    """The 64-bit integer `text` spells exactly (digits, or a number without a fraction), or why
    it is not one; exact where float64 is not (beyond 2**53)."""
    if not _NUMBER.fullmatch(text):
        return None, "not a valid integer"
    try:
        number = Decimal(text)
    except InvalidOperation:
        # Only an exponent beyond 10**18 gets here: the value is astronomically large or small.
        return None, "not a valid integer (out of the 64-bit range)"
    if not INT64_MIN <= number <= INT64_MAX:
        return None, "not a valid integer (out of the 64-bit range)"
    if number != number.to_integral_value():
        return None, "not a valid integer (it has a fraction)"
    return int(number), ""


def _parse_float(text: str) -> tuple[float | None, str]:
    """The finite float `text` spells, or why it is not one."""
    if not _NUMBER.fullmatch(text):
        return None, "not a valid float"
    number = float(text)
    if not math.isfinite(number):
        return None, "not a valid float (beyond the float64 range)"
    return number, ""


def _column_problems(col: ColumnSpec, values: pd.Series, present: pd.Series) -> pd.Series:
    """Per row, the reason this column breaks the contract, or '' if it does not."""
    reasons = pd.Series("", index=values.index, dtype="object")
    if not col.nullable:
        _set(reasons, ~present, f"{col.name} is missing")
    if col.min is not None:
        _set(reasons, present & (values < col.min).fillna(False), f"{col.name} below {col.min:g}")
    if col.max is not None:
        _set(reasons, present & (values > col.max).fillna(False), f"{col.name} above {col.max:g}")
    if col.format == "hhmm":
        ok = (values >= 0) & (values <= 2359) & (values % 100 < 60)
        _set(reasons, present & ~ok.fillna(True), f"{col.name} is not a time of day (hhmm)")
    if col.pattern is not None:
        ok = values.str.fullmatch(col.pattern)
        _set(
            reasons,
            present & ~ok.fillna(True).astype(bool),
            f"{col.name} does not match {col.pattern}",
        )
    return reasons


def validate_file(
    feed: FeedSpec,
    key: str,
    data: bytes,
    null_values: tuple[str, ...],
    landing_day: str | None,
    partition_end: str | None = None,
) -> ValidatedFile:
    """Parse `data`; split its rows into those that obey `feed`'s contract and those that don't.
    A row of a daily feed must be dated within its partition: the day `landing_day`, or from it
    up to `partition_end` (exclusive) for a partition of several days."""
    header, rows, lines = parse_csv(key, data)
    if len(set(header)) != len(header):
        raise LandingFileError(f"{key}: header repeats a column: {header}")
    missing = [c for c in feed.column_names if c not in header]
    if missing:
        raise LandingFileError(f"{key}: header lacks contract columns {missing}")
    raw = pd.DataFrame(rows, columns=header, dtype="object")
    typed = pd.DataFrame(index=raw.index)
    reasons = pd.Series("", index=raw.index, dtype="object")
    for col in feed.columns:
        present = ~raw[col.name].isin(null_values)
        typed[col.name], why = _coerce(col, raw[col.name], present)
        bad = why != ""
        problems = _column_problems(col, typed[col.name], present & ~bad)
        if bad.any():
            problems[bad] = f"{col.name}: " + why[bad]
        reasons = _append(reasons, problems)
    if feed.partition_date and landing_day is not None:
        reasons = _append(reasons, _outside_partition(feed, typed, landing_day, partition_end))
    reasons = _append(reasons, _duplicate_reasons(typed, feed.key, reasons == "", lines))
    good = reasons == ""
    typed["_source_line"] = np.asarray(lines, dtype="int64")
    rejected = pd.DataFrame(
        {
            "source_line": typed.loc[~good, "_source_line"],
            "reason": reasons[~good],
            "record": [json.dumps(dict(zip(header, r, strict=True))) for r in raw[~good].values],
        }
    )
    ignored = tuple(c for c in header if c not in feed.column_names)
    return ValidatedFile(
        key, typed[good].reset_index(drop=True), rejected.reset_index(drop=True), ignored
    )


def _outside_partition(
    feed: FeedSpec, typed: pd.DataFrame, first: str, end: str | None
) -> pd.Series:
    """Why each row's date (from `feed.partition_date`) falls outside the partition starting on
    `first`: the day itself, or up to `end` (exclusive) when given."""
    if len(feed.partition_date) == 3:
        y, m, d = (typed[c] for c in feed.partition_date)
        row_day = y.astype("string") + "-" + m.astype("string").str.zfill(2) + "-"
        row_day += d.astype("string").str.zfill(2)
    else:
        (column,) = feed.partition_date
        row_day = typed[column].dt.strftime("%Y-%m-%d").astype("string")
    if end is None:
        off = (row_day != first).fillna(False).astype(bool)
        return ("dated " + row_day + f", not landing day {first}").astype("object").where(off, "")
    off = ((row_day < first) | (row_day >= end)).fillna(False).astype(bool)
    dated = "dated " + row_day + f", outside the partition {first} to {end} (exclusive)"
    return dated.astype("object").where(off, "")


def _set(reasons: pd.Series, rows: pd.Series, reason: str) -> None:
    """`reasons[rows] = reason`, skipped where no row is selected: most columns of most files
    break nothing, and an assignment costs about the same however few rows it sets."""
    if rows.any():
        reasons[rows] = reason


def _append(reasons: pd.Series, more: pd.Series) -> pd.Series:
    more = more.reindex(reasons.index).fillna("")
    if not (more != "").any():
        return reasons
    both = (reasons != "") & (more != "")
    return reasons.where(~both, reasons + "; " + more).where(reasons != "", more)


def _duplicate_reasons(
    typed: pd.DataFrame, key: tuple[str, ...], valid: pd.Series, lines: list[int]
) -> pd.Series:
    """'duplicate key' for every valid row whose key an earlier valid row already holds."""
    reasons = pd.Series("", index=typed.index, dtype="object")
    keys = typed.loc[valid, list(key)]
    dup = keys.duplicated(keep="first")
    if dup.any():
        first_line = (
            pd.Series(lines, index=typed.index)[valid]
            .groupby([keys[c] for c in key], dropna=False)
            .transform("first")
        )
        reasons[dup[dup].index] = [
            f"duplicate key ({', '.join(key)}) first seen at line {n}" for n in first_line[dup]
        ]
    return reasons
