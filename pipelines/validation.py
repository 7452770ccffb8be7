"""Parse a landing file and check every row against its feed contract.

A file that cannot be parsed at all raises LandingFileError naming the file and the position.
Rows that parse but break the contract are returned apart, each with its line and reason, so
ingestion can quarantine them and load the rest. Pure pandas, no Dagster.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipelines.contracts import ColumnSpec, FeedSpec


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


def parse_csv(key: str, data: bytes) -> tuple[list[str], list[list[str]], list[int]]:
    """Split a CSV file into header, rows and line numbers; raise LandingFileError if malformed."""
    if not data.strip():
        raise LandingFileError(f"{key}: file is empty (expected at least a header line)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LandingFileError(f"{key}: not UTF-8 at byte {e.start}") from e
    if not text.endswith("\n"):
        # Producers end every file with a newline; one that does not was cut short in transit.
        raise LandingFileError(
            f"{key}: truncated at line {text.count(chr(10)) + 1} (no final newline)"
        )
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


def _coerce(col: ColumnSpec, raw: pd.Series, present: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Typed values of one column and a mask of present values that fail to coerce."""
    if col.type in ("integer", "float"):
        values = pd.to_numeric(raw.where(present), errors="coerce")
        bad = present & values.isna()
        if col.type == "integer":
            bad |= present & values.notna() & (values % 1 != 0)
            return values.where(~bad).astype("Int64"), bad
        return values.astype("float64"), bad
    if col.type == "timestamp":
        values = pd.to_datetime(raw.where(present), errors="coerce", utc=True, format="ISO8601")
        values = values.dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[us]")
        return values, present & values.isna()
    values = raw.where(present).astype("string")
    return values, pd.Series(False, index=raw.index)


def _column_problems(col: ColumnSpec, values: pd.Series, present: pd.Series) -> pd.Series:
    """Per row, the reason this column breaks the contract, or '' if it does not."""
    reasons = pd.Series("", index=values.index, dtype="object")
    if not col.nullable:
        reasons[~present] = f"{col.name} is missing"
    if col.min is not None:
        reasons[present & (values < col.min).fillna(False)] = f"{col.name} below {col.min:g}"
    if col.max is not None:
        reasons[present & (values > col.max).fillna(False)] = f"{col.name} above {col.max:g}"
    if col.format == "hhmm":
        ok = (values >= 0) & (values <= 2359) & (values % 100 < 60)
        reasons[present & ~ok.fillna(True)] = f"{col.name} is not a time of day (hhmm)"
    if col.pattern is not None:
        ok = values.str.fullmatch(col.pattern)
        reasons[present & ~ok.fillna(True).astype(bool)] = (
            f"{col.name} does not match {col.pattern}"
        )
    return reasons


def validate_file(
    feed: FeedSpec, key: str, data: bytes, null_values: tuple[str, ...], landing_day: str | None
) -> ValidatedFile:
    """Parse `data`; split its rows into those that obey `feed`'s contract and those that don't."""
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
        typed[col.name], bad = _coerce(col, raw[col.name], present)
        problems = _column_problems(col, typed[col.name], present & ~bad)
        problems[bad] = f"{col.name}: not a valid {col.type}"
        reasons = _append(reasons, problems)
    if feed.partition_date and landing_day is not None:
        y, m, d = (typed[c] for c in feed.partition_date)
        row_day = y.astype("string") + "-" + m.astype("string").str.zfill(2) + "-"
        row_day += d.astype("string").str.zfill(2)
        off = (row_day != landing_day).fillna(False).astype(bool)
        dated = ("dated " + row_day + f", not landing day {landing_day}").astype("object")
        reasons = _append(reasons, dated.where(off, ""))
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


def _append(reasons: pd.Series, more: pd.Series) -> pd.Series:
    more = more.reindex(reasons.index).fillna("")
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
