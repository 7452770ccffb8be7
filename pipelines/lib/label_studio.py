"""Label Studio batches going out: one task per example, the model's prediction pre-annotated."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import date, datetime
from typing import Any

import numpy as np
import pandas as pd

from pipelines.labeling.spec import LabelingSpec

REJECTED_COLUMNS = ("source_file", "item", "task_id", "reason", "record")
# Columns of a selection that travel in a task's meta or prediction, not in its data.
_NOT_DATA = {"score", "reason", "priority"}


def accepted_columns(spec: LabelingSpec) -> tuple[str, ...]:
    """The columns of accepted labels, before the import adds its own."""
    return ("task_id", spec.example_id, spec.label, "known_at", "annotation_id", "source_file")


def label_studio_tasks(
    chosen: pd.DataFrame, batch_id: str, model_version: str | None, spec: LabelingSpec
) -> list[dict[str, Any]]:
    """Label Studio import tasks for selected rows, with the model's guess as a prediction."""
    tasks = []
    key = spec.example_id
    for row in chosen.to_dict("records"):
        data = {"task_id": spec.task_id(row[key]), key: row[key]}
        for name, value in row.items():
            if name not in _NOT_DATA and name != key and (safe := _json_safe(value)) is not None:
                data[name] = safe
        meta = {"batch_id": batch_id, "reason": row["reason"]}
        if "priority" in row:
            meta["priority"] = int(row["priority"])
        tasks.append(
            {"data": data, "meta": meta, "predictions": _prediction(row, model_version, spec)}
        )
    return tasks


def _prediction(
    row: dict[str, Any], model_version: str | None, spec: LabelingSpec
) -> list[dict[str, Any]]:
    score = row.get("score")
    if score is None or pd.isna(score):
        return []
    if model_version is None:
        example = row[spec.example_id]
        raise ValueError(f"example {example} has a score but no model_version was given")
    # Label Studio's prediction score is the confidence in the suggested choice.
    confidence = max(float(score), 1.0 - float(score))
    result = spec.result(spec.choice_for_score(float(score)))
    return [{"model_version": model_version, "score": confidence, "result": result}]


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
