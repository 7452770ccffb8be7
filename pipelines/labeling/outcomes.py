"""Ground truth from a file: outcomes a team already gets (a chargeback, a return, a delivery
time) delivered to the labeling inbox instead of annotations.

An outcomes file is CSV (UTF-8, a header) or Parquet, named `<anything>.csv` or `.parquet`, in
the inbox folder of the day it is delivered, like an annotators' export. It has three columns:

    <example id column>   the example, as the features table names it (flights: flight_id)
    <label column>        the outcome: a choice's name or its value (`late` or `true`)
    known_at              when the outcome became known (ISO 8601, no zone meaning UTC)

An outcome answers the example's label task: only an example the export sent to labeling and
not yet labelled is taken, so the labels keep the selection's meaning (its audit and random
picks stay a uniform sample). Every other row is rejected with its reason and kept in
quarantine, as an annotation is: an example never sent, one labelled already (the first answer
stands), a value none of the choices, a time that is no timestamp or later than the delivery.
Reading a file never raises on bad content.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pandas as pd

from pipelines.labeling.annotations import label_frames, rejection, utc_timestamp
from pipelines.labeling.spec import LabelingSpec

SUFFIXES = (".csv", ".parquet")
KNOWN_AT = "known_at"


def is_outcomes_file(key: str) -> bool:
    return key.endswith(SUFFIXES)


def text_table(source: Any, parquet: bool) -> pd.DataFrame:
    """A CSV or Parquet file (a path or a file object), every value as text, missing ones empty:
    read the same whatever types a writer gave its columns."""
    if parquet:
        frame = pd.read_parquet(source)
        return frame.astype(object).where(frame.notna(), "").astype(str)
    return pd.read_csv(source, dtype=str, keep_default_na=False)


def read_outcomes(key: str, data: bytes) -> tuple[pd.DataFrame | None, str | None]:
    """The file's rows, every value as text; or why it cannot be read."""
    try:
        return text_table(io.BytesIO(data), parquet=key.endswith(".parquet")), None
    except Exception as e:  # a file that is no CSV or Parquet: one rejected row names it
        return None, f"is not a readable {key.rsplit('.', 1)[-1]} file ({type(e).__name__})"


def task_ids_in_outcomes(key: str, data: bytes, spec: LabelingSpec) -> set[str]:
    """The label tasks the file's rows answer (for the import's lookup); none if unreadable."""
    frame, _ = read_outcomes(key, data)
    if frame is None or spec.example_id not in frame.columns:
        return set()
    return {spec.task_id(e) for e in frame[spec.example_id] if e}


def _value(text: str, spec: LabelingSpec) -> tuple[bool, Any]:
    """The label's value a cell names: a choice's name, or a value's text (`true`, `4.5`)."""
    if text in spec.choices:
        return True, spec.choices[text]
    for value in spec.choices.values():
        if text.strip().lower() == str(value).lower():
            return True, value
    return False, None


def parse_outcomes(
    key: str,
    data: bytes,
    awaiting: dict[str, str],
    already_labelled: dict[str, str],
    spec: LabelingSpec,
    delivered_at: pd.Timestamp | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The accepted labels and the rejected rows of one outcomes file, in the frames an
    export's parse gives (`annotation_id` is the row's line in the file)."""
    frame, problem = read_outcomes(key, data)
    columns = (spec.example_id, spec.label, KNOWN_AT)
    if frame is not None and (missing := [c for c in columns if c not in frame.columns]):
        problem = f"has no columns {missing} (it needs {list(columns)})"
    if problem is not None:
        record = data[:2000].decode("utf-8", errors="replace")
        return label_frames([], [rejection(key, None, None, problem, record)], spec)
    accepted, rejected, here = [], [], {}
    for index, row in enumerate(frame[list(columns)].to_dict("records")):
        line = index + 2  # the header is line 1
        record = json.dumps(row, ensure_ascii=False)
        task_id = spec.task_id(row[spec.example_id]) if row[spec.example_id] else None
        known, value = _value(row[spec.label], spec)
        moment = utc_timestamp(row[KNOWN_AT])
        reason = None
        if task_id is None:
            reason = f"has no {spec.example_id}"
        elif task_id in here:
            reason = f"already answered on line {here[task_id]} of this file"
        elif task_id in already_labelled:
            reason = f"already labelled ({already_labelled[task_id]})"
        elif task_id not in awaiting:
            reason = "was never sent to labeling"
        elif not known:
            reason = f"{spec.label} {row[spec.label]!r} is none of {list(spec.choices)}"
        elif isinstance(moment, str):
            reason = f"known_at {row[KNOWN_AT]!r} {moment}"
        elif delivered_at is not None and moment > delivered_at:
            reason = f"known_at {moment} is after the delivery ({delivered_at})"
        if reason is not None:
            rejected.append(rejection(key, line, task_id, reason, record))
            continue
        here[task_id] = line
        accepted.append(
            {
                "task_id": task_id,
                spec.example_id: awaiting[task_id],
                spec.label: value,
                "known_at": moment,
                "annotation_id": line,
                "source_file": key,
            }
        )
    return label_frames(accepted, rejected, spec)
