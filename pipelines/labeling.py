"""The labeling protocol: which flights to send to annotators, and how their answers come back.

Batches go out as Label Studio import JSON (one task per flight, with the model's prediction as a
pre-annotation) and come back as Label Studio JSON exports. Reading an export never raises on bad
content: every item or annotation ends up either accepted or rejected with a reason.

Several valid annotations on one task resolve deterministically: the annotation with the latest
`updated_at` wins, ties broken by the highest annotation id; the others are rejected as
"superseded by annotation <id>". A timestamp without a zone is read as UTC.
"""

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


def select_for_labeling(
    candidates: pd.DataFrame,
    budget: int,
    audit_share: float,
    seed: int,
    flagged_segments: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The candidates to label, at most `budget`, with a `reason` and a `priority` (1 = first).

    Without any score, a seeded uniform sample ("random"). Otherwise a uniform "audit" sample of
    round(budget * audit_share) from all candidates keeps estimates unbiased; then scored flights
    in drift-flagged segments, most uncertain first ("drift_segment", at most half of what is
    left); then scored flights by |score - 0.5| ascending, ties by flight_id ("uncertainty");
    budget still left goes to a uniform sample of unscored flights ("random").
    """
    _check_selection_args(candidates, budget, audit_share, flagged_segments)
    # Sorting first makes the choice independent of the order the candidates arrive in.
    pool = candidates.sort_values("flight_id", kind="stable").reset_index(drop=True)
    rng = np.random.default_rng(seed)
    picks: list[tuple[int, str]] = []
    scored = pool["score"].notna()
    if scored.any():
        n_audit = min(round(budget * audit_share), len(pool))
        picks += [(i, "audit") for i in rng.choice(len(pool), n_audit, replace=False)]
        left = _by_uncertainty(pool, scored, {i for i, _ in picks})
        drift = left[_in_flagged(pool.loc[left], flagged_segments)] if len(left) else left
        picks += [(i, "drift_segment") for i in drift[: (budget - len(picks)) // 2]]
        taken = {i for i, _ in picks}
        picks += [(i, "uncertainty") for i in left if i not in taken][: budget - len(picks)]
    taken = {i for i, _ in picks}
    unscored = np.array([i for i in range(len(pool)) if i not in taken and not scored[i]])
    n_random = min(budget - len(picks), len(unscored))
    picks += (
        [(i, "random") for i in rng.choice(unscored, n_random, replace=False)] if n_random else []
    )
    chosen = pool.loc[[i for i, _ in picks]].reset_index(drop=True)
    return chosen.assign(
        reason=[reason for _, reason in picks], priority=np.arange(1, len(picks) + 1)
    )


def _check_selection_args(
    candidates: pd.DataFrame, budget: int, audit_share: float, flagged: pd.DataFrame | None
) -> None:
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if not 0 <= audit_share <= 1:
        raise ValueError(f"audit_share must be within [0, 1], got {audit_share}")
    needed = {"flight_id", "score"}
    if flagged is not None and not flagged.empty:
        needed |= {"route", "carrier", "origin", "scheduled_hour"}
        if lacking := {"segment_type", "segment_value"} - set(flagged.columns):
            raise ValueError(f"flagged_segments lacks the columns {sorted(lacking)}")
        if unknown := set(flagged["segment_type"]) - set(SEGMENT_TYPES):
            raise ValueError(f"unknown segment types {sorted(unknown)}; expected {SEGMENT_TYPES}")
    if lacking := needed - set(candidates.columns):
        raise ValueError(f"candidates lack the columns {sorted(lacking)}")
    if candidates["flight_id"].duplicated().any():
        raise ValueError("candidates must hold each flight_id once")


def _by_uncertainty(pool: pd.DataFrame, scored: pd.Series, taken: set[int]) -> np.ndarray:
    """Positions of scored, untaken rows, most uncertain first, ties by flight_id."""
    margin = (pool["score"] - 0.5).abs()
    order = pd.DataFrame({"margin": margin, "flight_id": pool["flight_id"]})[scored]
    order = order.drop(index=list(taken), errors="ignore")
    return order.sort_values(["margin", "flight_id"], kind="stable").index.to_numpy()


def _in_flagged(rows: pd.DataFrame, flagged: pd.DataFrame | None) -> np.ndarray:
    """Whether each row lies in one of the drift-flagged segments."""
    if flagged is None or flagged.empty:
        return np.zeros(len(rows), dtype=bool)
    hour = rows["scheduled_hour"].map(lambda h: "" if pd.isna(h) else str(int(h)))
    values = {
        "route": rows["route"].astype(str),
        "carrier": rows["carrier"].astype(str),
        "origin_hour": rows["origin"].astype(str) + "-" + hour,
    }
    hit = np.zeros(len(rows), dtype=bool)
    for kind, group in flagged.groupby("segment_type"):
        hit |= values[str(kind)].isin(set(group["segment_value"].astype(str))).to_numpy()
    return hit


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


def parse_label_studio_export(
    key: str, data: bytes, awaiting: Mapping[str, str], already_labelled: Mapping[str, str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The accepted labels and the rejected items or annotations of one Label Studio export.

    `awaiting` maps the task_id of every exported, still unlabelled task to its flight_id;
    `already_labelled` maps a labelled task_id to where its label came from. Never raises on bad
    content: a file that is not a JSON list becomes one rejected row with `item` null.
    """
    items, problem = _load_items(data)
    if problem is not None:
        record = data[:2000].decode("utf-8", errors="replace")
        return _frames([], [_rejection(key, None, None, problem, record)])
    accepted: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    labelled_here: dict[str, str] = {}
    for index, item in enumerate(items):
        task_id, problem = _check_item(item, awaiting, already_labelled, labelled_here)
        if problem is not None:
            rejected.append(_rejection(key, index, task_id, problem, _dumps(item)))
            continue
        winner, losers = _resolve_annotations(item["annotations"])
        for annotation, reason in losers:
            rejected.append(_rejection(key, index, task_id, reason, _dumps(annotation)))
        if winner is not None:
            label, known_at, annotation_id = winner
            labelled_here[task_id] = f"annotation {annotation_id} in item {index} of {key}"
            accepted.append(
                {
                    "task_id": task_id,
                    "flight_id": awaiting[task_id],
                    "is_late": label == LABEL_CHOICES[0],
                    "known_at": known_at,
                    "annotation_id": annotation_id,
                    "source_file": key,
                }
            )
    return _frames(accepted, rejected)


def _load_items(data: bytes) -> tuple[list[Any], str | None]:
    """The items of an export file, or why the whole file is unreadable and where."""
    try:
        items = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        return [], f"not UTF-8 at byte {e.start}"
    except json.JSONDecodeError as e:
        return [], f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}"
    if not isinstance(items, list):
        return [], f"not a JSON list of tasks but a JSON {type(items).__name__}"
    return items, None


def _check_item(
    item: Any,
    awaiting: Mapping[str, str],
    already_labelled: Mapping[str, str],
    labelled_here: Mapping[str, str],
) -> tuple[str | None, str | None]:
    """The item's task_id and what makes the whole item unusable (None if nothing)."""
    data = item.get("data") if isinstance(item, dict) else None
    task_id = data.get("task_id") if isinstance(data, dict) else None
    if not isinstance(task_id, str):
        return None, "unknown task: the item has no data.task_id"
    if task_id in already_labelled or task_id in labelled_here:
        where = already_labelled[task_id] if task_id in already_labelled else labelled_here[task_id]
        return task_id, f"task already labelled ({where})"
    if task_id not in awaiting:
        return task_id, f"unknown task {task_id!r}"
    if data.get("flight_id") != awaiting[task_id]:
        flight = data.get("flight_id")
        return task_id, f"flight_id {flight!r} is not the task's flight {awaiting[task_id]!r}"
    if not isinstance(item.get("annotations"), list) or not item["annotations"]:
        return task_id, "no annotations"
    return task_id, None


Valid = tuple[str, pd.Timestamp, int]  # label, known_at (naive UTC), annotation id


def _resolve_annotations(
    annotations: list[Any],
) -> tuple[Valid | None, list[tuple[Any, str]]]:
    """The winning valid annotation of one task, and every other annotation with its reason."""
    valid: list[tuple[Valid, Any]] = []
    losers: list[tuple[Any, str]] = []
    for annotation in annotations:
        parsed = _check_annotation(annotation)
        if isinstance(parsed, str):
            losers.append((annotation, parsed))
        else:
            valid.append((parsed, annotation))
    if not valid:
        return None, losers
    # The documented rule: the latest updated_at wins, then the highest annotation id.
    valid.sort(key=lambda v: (v[0][1], v[0][2]))
    winner = valid[-1][0]
    losers += [(a, f"superseded by annotation {winner[2]}") for _, a in valid[:-1]]
    return winner, losers


def _check_annotation(annotation: Any) -> Valid | str:
    """The label, known_at and id of a valid annotation, or why it is not valid."""
    if not isinstance(annotation, dict):
        return "annotation is not a JSON object"
    if annotation.get("was_cancelled") is True:
        return "annotation cancelled"
    annotation_id = annotation.get("id")
    if not isinstance(annotation_id, int) or isinstance(annotation_id, bool):
        return f"annotation id {annotation_id!r} is not an integer"
    choices = [
        r.get("value", {}).get("choices") if isinstance(r.get("value"), dict) else None
        for r in annotation.get("result") or []
        if isinstance(r, dict) and r.get("from_name") == FROM_NAME and r.get("to_name") == TO_NAME
    ]
    if len(choices) != 1 or not isinstance(choices[0], list) or len(choices[0]) != 1:
        return f"label {choices!r} not in {LABEL_CHOICES}"
    label = choices[0][0]
    if label not in LABEL_CHOICES:
        return f"label {label!r} not in {LABEL_CHOICES}"
    known_at = _utc(annotation.get("updated_at"))
    if known_at is None:
        return f"updated_at {annotation.get('updated_at')!r} is not an ISO timestamp"
    return label, known_at, annotation_id


def _utc(text: Any) -> pd.Timestamp | None:
    """A naive UTC timestamp from ISO text (no zone means UTC), None if it is not one."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    stamp = pd.Timestamp(moment)
    return stamp.tz_convert("UTC").tz_localize(None) if stamp.tzinfo else stamp


def _rejection(key: str, item: int | None, task_id: str | None, reason: str, record: str) -> dict:
    return {
        "source_file": key,
        "item": item,
        "task_id": task_id,
        "reason": reason,
        "record": record,
    }


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _frames(accepted: list[dict], rejected: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    good = pd.DataFrame(accepted, columns=list(ACCEPTED_COLUMNS)).astype(
        {"is_late": bool, "annotation_id": "int64", "known_at": "datetime64[us]"}
    )
    bad = pd.DataFrame(rejected, columns=list(REJECTED_COLUMNS)).astype({"item": "Int64"})
    return good, bad
