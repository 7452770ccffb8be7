"""Label Studio batches going out: one task per flight, the model's prediction pre-annotated."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

import numpy as np
import pandas as pd

LABEL_CHOICES = ("late", "on_time")
FROM_NAME = "is_late"
TO_NAME = "flight"
SEGMENT_TYPES = ("route", "carrier", "origin_hour")
ACCEPTED_COLUMNS = ("task_id", "flight_id", "is_late", "known_at", "annotation_id", "source_file")
REJECTED_COLUMNS = ("source_file", "item", "task_id", "reason", "record")
# Columns of a selection that travel in a task's meta or prediction, not in its data.
_NOT_DATA = {"flight_id", "score", "reason", "priority"}


def label_studio_tasks(
    chosen: pd.DataFrame, batch_id: str, model_version: str | None
) -> list[dict[str, Any]]:
    """Label Studio import tasks for selected rows, with the model's guess as a prediction."""
    tasks = []
    for row in chosen.to_dict("records"):
        data = {"task_id": f"T-{row['flight_id']}", "flight_id": row["flight_id"]}
        for name, value in row.items():
            if name not in _NOT_DATA and (safe := _json_safe(value)) is not None:
                data[name] = safe
        meta = {"batch_id": batch_id, "reason": row["reason"]}
        if "priority" in row:
            meta["priority"] = int(row["priority"])
        tasks.append({"data": data, "meta": meta, "predictions": _prediction(row, model_version)})
    return tasks


def _prediction(row: Mapping[str, Any], model_version: str | None) -> list[dict[str, Any]]:
    score = row.get("score")
    if score is None or pd.isna(score):
        return []
    if model_version is None:
        raise ValueError(f"flight {row['flight_id']} has a score but no model_version was given")
    late = float(score) >= 0.5
    # Label Studio's prediction score is the confidence in the suggested choice.
    result = {"from_name": FROM_NAME, "to_name": TO_NAME, "type": "choices"}
    result["value"] = {"choices": [LABEL_CHOICES[0] if late else LABEL_CHOICES[1]]}
    confidence = float(score) if late else 1.0 - float(score)
    return [{"model_version": model_version, "score": confidence, "result": [result]}]


def _json_safe(value: Any) -> Any:
    """A JSON value for one cell; None for a missing one."""
    if value is None or (pd.api.types.is_scalar(value) and pd.isna(value)):
        return None
    if isinstance(value, pd.Timestamp | datetime | date):
        return value.isoformat()
    if isinstance(value, np.generic):
        return value.item()
    return value


def render_json(obj: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, UTF-8, two-space indent, a trailing newline."""
    return (
        json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=2, allow_nan=False) + "\n"
    ).encode()


def batch_manifest(batch_id: str, tasks: list[dict[str, Any]], created_at: datetime | str) -> dict:
    """The manifest of a batch: its size, reasons and the sha256 of its tasks file's bytes."""
    reasons = Counter(task["meta"]["reason"] for task in tasks)
    return {
        "batch_id": batch_id,
        "created_at": created_at if isinstance(created_at, str) else created_at.isoformat(),
        "task_count": len(tasks),
        "reasons": dict(sorted(reasons.items())),
        "sha256": hashlib.sha256(render_json(tasks)).hexdigest(),
    }
