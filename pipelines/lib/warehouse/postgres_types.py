"""PostgreSQL's values as the warehouse's: column types both ways, rows read as DuckDB reads its
own, and rows written in COPY's text format."""

from __future__ import annotations

import io
from datetime import date
from typing import Any

import pandas as pd

# PostgreSQL's type OIDs of the columns the warehouse holds, as Arrow types; DuckDB then turns
# the Arrow table into pandas exactly as it turns its own tables (nullable integers as Int64,
# dates as datetime64, ...), so a frame read from either backend is the same frame.
ARROW_TYPES = {
    16: "bool_",
    20: "int64",
    21: "int16",
    23: "int32",
    700: "float32",
    701: "float64",
    1700: "float64",  # numeric: the models cast to double; a stray one is read as a double
    25: "string",
    1043: "string",
    1042: "string",
    1082: "date32",
    1114: "timestamp_us",
    1184: "timestamp_us_utc",
}
# DuckDB's names of column types (the contracts' and the Python side's tables), for PostgreSQL.
POSTGRES_TYPES = {
    "DOUBLE": "DOUBLE PRECISION",
    "VARCHAR": "TEXT",
    "HUGEINT": "NUMERIC",
    "UBIGINT": "NUMERIC",
}
# pandas dtypes (by kind) as PostgreSQL column types, for tables created like a frame.
DTYPE_TYPES = {"b": "BOOLEAN", "i": "BIGINT", "u": "BIGINT", "f": "DOUBLE PRECISION"}


def arrow_type(oid: int) -> Any:
    import pyarrow as pa

    name = ARROW_TYPES.get(oid)
    if name is None:
        return None
    if name == "timestamp_us":
        return pa.timestamp("us")
    if name == "timestamp_us_utc":
        return pa.timestamp("us", tz="UTC")
    return getattr(pa, name)()


COPY_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))


def copy_text(rows: pd.DataFrame) -> io.StringIO:
    """`rows` in COPY's text format: tab-separated, `\\N` for a null, escapes in values."""
    lines = None
    for name in rows.columns:
        column = rows[name]
        if pd.api.types.is_bool_dtype(column.dtype):
            column = column.map({True: "t", False: "f"})
        text = column.astype("string")
        if not (pd.api.types.is_numeric_dtype(rows[name].dtype)):
            for raw, escaped in COPY_ESCAPES:
                text = text.str.replace(raw, escaped, regex=False)
        text = text.fillna("\\N")
        lines = text if lines is None else lines + "\t" + text
    return io.StringIO("\n".join(lines.tolist()) + "\n")


def placeholders(sql: str) -> str:
    """`?` placeholders as psycopg2's `%s` (and a literal `%` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def column_type(column: pd.Series) -> str:
    if pd.api.types.is_datetime64_any_dtype(column):
        return "TIMESTAMP"
    kind = getattr(column.dtype, "kind", "O")
    if kind in DTYPE_TYPES:
        return DTYPE_TYPES[kind]
    values = column.dropna()
    if len(values) and all(isinstance(v, date) for v in values):
        return "DATE"
    if len(values) and all(isinstance(v, bool) for v in values):
        return "BOOLEAN"
    return "TEXT"
