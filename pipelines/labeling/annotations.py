"""Label Studio exports coming back: every item or annotation is accepted or rejected with a reason.

Reading an export never raises on bad content. Several valid annotations on one task resolve
deterministically: the annotation with the latest `updated_at` wins, ties broken by the highest
annotation id; the others are rejected as "superseded by annotation <id>". A task already
labelled (earlier, or earlier in the same file) is rejected: the first answer stands. A timestamp
without a zone is read as UTC. An item nested deeper than MAX_NESTING levels is rejected whole:
the export format needs seven, and Python's JSON codec fails near a thousand.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from pipelines.labeling.spec import LabelingSpec
from pipelines.lib.label_studio import REJECTED_COLUMNS, accepted_columns

MAX_NESTING = 100
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _quote(value: Any) -> str:
    """`value`'s repr cut short: a reason names the problem, the record holds the whole value."""
    short = reprlib.Repr()  # Python 3.11's Repr takes no keyword arguments
    short.maxlevel, short.maxstring, short.maxlong, short.maxother = 3, 80, 40, 80
    return short.repr(value)


def parse_label_studio_export(
    key: str,
    data: bytes,
    awaiting: Mapping[str, str],
    already_labelled: Mapping[str, str],
    spec: LabelingSpec,
    known_at: pd.Timestamp | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The accepted labels and the rejected items or annotations of one Label Studio export.

    `awaiting` maps the task_id of every exported, still unlabelled task to its example id;
    `already_labelled` maps a labelled task_id to where its label came from. A label is known
    from its annotation's `updated_at`, or from `known_at` when the delivery sets it (the moment
    the pipeline received it). Never raises on bad content: a file that is not a JSON list
    becomes one rejected row with `item` null.
    """
    items, problem = _load_items(data)
    if problem is not None:
        record = data[:2000].decode("utf-8", errors="replace")
        return label_frames([], [rejection(key, None, None, problem, record)], spec)
    accepted: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    labelled_here: dict[str, str] = {}
    for index, item in enumerate(items):
        if _nested_deeper(item, MAX_NESTING):
            # Its JSON text could not be rebuilt within Python's recursion limit: no record.
            problem = f"item nested deeper than {MAX_NESTING} levels"
            rejected.append(rejection(key, index, None, problem, None))
            continue
        task_id, problem = _check_item(item, awaiting, already_labelled, labelled_here, spec)
        if problem is not None:
            rejected.append(rejection(key, index, task_id, problem, _dumps(item)))
            continue
        winner, losers = _resolve_annotations(item["annotations"], spec)
        for annotation, reason in losers:
            rejected.append(rejection(key, index, task_id, reason, _dumps(annotation)))
        if winner is not None:
            label, annotated_at, annotation_id = winner
            labelled_here[task_id] = f"annotation {annotation_id} in item {index} of {key}"
            accepted.append(
                {
                    "task_id": task_id,
                    spec.example_id: awaiting[task_id],
                    spec.label: spec.value_of(label),
                    "known_at": annotated_at if known_at is None else known_at,
                    "annotation_id": annotation_id,
                    "source_file": key,
                }
            )
    return label_frames(accepted, rejected, spec)


def task_ids_named(data: bytes) -> set[str]:
    """The task ids an export's items name (``data.task_id`` strings) that a warehouse could
    hold: the tasks whose state its import looks up. An unreadable file or item names none, nor
    does a string no warehouse stores (a lone surrogate, a NUL character); parsing reports those
    as unknown tasks. Never raises on bad content."""
    items, _ = _load_items(data)
    named = set()
    for item in items:
        fields = item.get("data") if isinstance(item, dict) else None
        task_id = fields.get("task_id") if isinstance(fields, dict) else None
        if isinstance(task_id, str) and _storable(task_id):
            named.add(task_id)
    return named


def _storable(text: str) -> bool:
    """Whether every warehouse backend can store and compare `text` (UTF-8, no NUL)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _load_items(data: bytes) -> tuple[list[Any], str | None]:
    """The items of an export file, or why the whole file is unreadable and where."""
    try:
        # A byte-order mark is not JSON, but some tools write one before UTF-8 text.
        items = json.loads(data.decode("utf-8").removeprefix("\ufeff"))
    except UnicodeDecodeError as e:
        return [], f"not UTF-8 at byte {e.start}"
    except json.JSONDecodeError as e:
        return [], f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}"
    except RecursionError:
        return [], "JSON nested too deeply to parse (beyond Python's recursion limit)"
    except ValueError as e:
        # The codec's own limits on valid JSON, e.g. an integer of more than 4300 digits.
        return [], f"unreadable JSON: {e}"
    if not isinstance(items, list):
        return [], f"not a JSON list of tasks but a JSON {type(items).__name__}"
    return items, None


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether JSON `value` nests lists or objects more than `limit` levels deep (no recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return False


def _check_item(
    item: Any,
    awaiting: Mapping[str, str],
    already_labelled: Mapping[str, str],
    labelled_here: Mapping[str, str],
    spec: LabelingSpec,
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
        return task_id, f"unknown task {_quote(task_id)}"
    if data.get(spec.example_id) != awaiting[task_id]:
        given, expected = _quote(data.get(spec.example_id)), awaiting[task_id]
        name = spec.example_id
        return task_id, f"{name} {given} is not the task's {name} {expected!r}"
    if not isinstance(item.get("annotations"), list) or not item["annotations"]:
        return task_id, "no annotations"
    return task_id, None


Valid = tuple[str, pd.Timestamp, int]  # label, known_at (naive UTC), annotation id


def _resolve_annotations(
    annotations: list[Any], spec: LabelingSpec
) -> tuple[Valid | None, list[tuple[Any, str]]]:
    """The winning valid annotation of one task, and every other annotation with its reason."""
    valid: list[tuple[Valid, Any]] = []
    losers: list[tuple[Any, str]] = []
    for annotation in annotations:
        parsed = _check_annotation(annotation, spec)
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


def _check_annotation(annotation: Any, spec: LabelingSpec) -> Valid | str:
    """The label, known_at and id of a valid annotation, or why it is not valid."""
    if not isinstance(annotation, dict):
        return "annotation is not a JSON object"
    cancelled = annotation.get("was_cancelled")
    if cancelled is not None and not isinstance(cancelled, bool):
        return f"was_cancelled {_quote(cancelled)} is not a boolean"
    if cancelled:
        return "annotation cancelled"
    annotation_id = annotation.get("id")
    if not isinstance(annotation_id, int) or isinstance(annotation_id, bool):
        return f"annotation id {_quote(annotation_id)} is not an integer"
    if not INT64_MIN <= annotation_id <= INT64_MAX:
        return f"annotation id {_quote(annotation_id)} is out of the 64-bit range"
    result = annotation.get("result")
    if not isinstance(result, list):
        return f"result {_quote(result)} is not a list"
    choices = [
        r["value"].get("choices") if isinstance(r.get("value"), dict) else None
        for r in result
        if isinstance(r, dict)
        and r.get("from_name") == spec.from_name
        and r.get("to_name") == spec.to_name
    ]
    allowed = tuple(spec.choices)
    if len(choices) != 1 or not isinstance(choices[0], list) or len(choices[0]) != 1:
        return f"label {_quote(choices)} not in {allowed}"
    label = choices[0][0]
    if not isinstance(label, str) or label not in spec.choices:
        return f"label {_quote(label)} not in {allowed}"
    known_at = utc_timestamp(annotation.get("updated_at"))
    if isinstance(known_at, str):
        return f"updated_at {_quote(annotation.get('updated_at'))} {known_at}"
    return label, known_at, annotation_id


def utc_timestamp(text: Any) -> pd.Timestamp | str:
    """A naive UTC timestamp from ISO text (no zone means UTC), or why it is not one."""
    if not isinstance(text, str):
        return "is not an ISO timestamp"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return "is not an ISO timestamp"
    if moment.tzinfo is not None:
        try:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:
            return "is outside years 1 to 9999 in UTC"
    return pd.Timestamp(moment)


def rejection(
    key: str, item: int | None, task_id: str | None, reason: str, record: str | None
) -> dict:
    if task_id is not None:
        # JSON escapes can spell lone surrogates ("\\ud800"), which no UTF-8 text can hold.
        task_id = task_id.encode("utf-8", "backslashreplace").decode()
    return {
        "source_file": key,
        "item": item,
        "task_id": task_id,
        "reason": reason,
        "record": record,
    }


def _dumps(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates again: escaped, the record stays the same JSON.
        text = json.dumps(value, sort_keys=True, ensure_ascii=True, default=str)
    return text


def label_frames(
    accepted: list[dict], rejected: list[dict], spec: LabelingSpec
) -> tuple[pd.DataFrame, pd.DataFrame]:
    good = pd.DataFrame(accepted, columns=list(accepted_columns(spec))).astype(
        {"annotation_id": "int64", "known_at": "datetime64[us]"}
    )
    if all(isinstance(v, bool) for v in spec.choices.values()):
        good = good.astype({spec.label: bool})
    bad = pd.DataFrame(rejected, columns=list(REJECTED_COLUMNS)).astype({"item": "Int64"})
    return good, bad
