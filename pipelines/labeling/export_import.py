"""The warehouse side of labeling: choose and export a day's tasks, import what came back.

Both directions replace one partition in one transaction: a day's exported tasks (by landing day)
or a day's delivered labels (by delivery day), with the rejected items in `raw.quarantine`.
Where the tasks go and the annotations come from is the label exchange's business (files or a
Label Studio server); the labeling assets call these functions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd

from pipelines.ingestion import RAW_SCHEMA
from pipelines.labeling import (
    LabelingSpec,
    label_studio_tasks,
    parse_label_studio_export,
    select_for_labeling,
)
from pipelines.labeling.annotations import task_ids_named
from pipelines.labeling.outcomes import is_outcomes_file, parse_outcomes, task_ids_in_outcomes
from pipelines.lib.label_exchange import Delivery, LabelExchange
from pipelines.lib.warehouse import WarehouseConnection, replace_rows
from pipelines.task.contracts import TaskSpec
from pipelines.task.model_spec import ModelSpec

DRIFT_FLAGS = "drift_flagged_segments"  # written by drift monitoring; absent until it runs


@dataclass(frozen=True)
class ExportReport:
    """A day's exported batch: where it went and why each task was chosen."""

    batch_id: str
    where: str
    candidates: int
    scored: int
    flagged_segments: int
    reasons: dict[str, int]
    # The examples the budget allowed this partition.
    budget: int


@dataclass(frozen=True)
class ImportReport:
    """A delivery day's import: files read, labels accepted, items quarantined."""

    files: list[str]
    accepted: int
    rejected: int
    reasons: dict[str, int]


# Task ids per lookup query of a label import (PostgreSQL binds at most 65,535 parameters).
LOOKUP_CHUNK = 1000


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def export_candidates(
    con: WarehouseConnection, task: TaskSpec, spec: ModelSpec, day: str
) -> pd.DataFrame:
    """Features of the day's examples never exported on another day, with the champion's score
    (the predictions table is absent until a model exists)."""
    tasks = f"{RAW_SCHEMA}.{task.label_tasks_table}"
    predictions, key = spec.predictions_table, spec.example_id
    nulls = "".join(f"cast(null as double precision) as {c}, " for c in spec.class_columns)
    scores = (
        f"left join {predictions} p on p.{key} = f.{key}"
        if con.has_relation(predictions)
        else f"left join (select cast(null as varchar) as {key}, "
        f"cast(null as double precision) as probability, {nulls}"
        "cast(null as integer) as model_version) p on false"
    )
    # With several classes, each one's probability too: how uncertain a pick is.
    per_class = "".join(f"p.{c}, " for c in spec.class_columns)
    candidates = con.execute(
        f"select f.*, p.probability as score, {per_class}p.model_version "
        f"from {spec.features_table} f "
        f"{scores} where f.{spec.time_column} = ? and f.{key} not in "
        f"(select {key} from {tasks} where _landing_date <> ?)",
        [day, day],
    ).df()
    # Ordered here, not by the warehouse's collation: the same day draws the same sample on
    # every backend.
    return candidates.sort_values(key, ignore_index=True)


def flagged_segments(con: WarehouseConnection, day: str) -> pd.DataFrame | None:
    """Segments drift monitoring flagged before `day` (segment_type, segment_value), if any."""
    if not con.has_relation(DRIFT_FLAGS):
        return None
    return con.execute(
        f"select distinct segment_type, segment_value from {DRIFT_FLAGS} where flagged_at < ?",
        [day],
    ).df()


def export_day(
    con: WarehouseConnection,
    exchange: LabelExchange,
    task: TaskSpec,
    spec: ModelSpec,
    labeling: LabelingSpec,
    day: str,
    budget: int | None,
    audit_share: float,
    seed: int = 0,
) -> ExportReport:
    """Choose the day's examples to label (the day's samples drawn by `seed`), at most `budget`
    (None: the task's own budget, `labeling.budget`), publish the batch, record its tasks."""
    candidates = export_candidates(con, task, spec, day)
    if budget is None:
        budget = labeling.budget.for_partition(len(candidates))
    flagged = flagged_segments(con, day)
    drawn = f"{task.name}/{day}" if seed == 0 else f"{task.name}/{day}/{seed}"
    sampler_seed = int(hashlib.sha256(drawn.encode()).hexdigest()[:8], 16)
    chosen = select_for_labeling(
        candidates.drop(columns="model_version"),
        budget,
        audit_share,
        sampler_seed,
        flagged,
        example_id=labeling.example_id,
        segments=labeling.segments,
    )
    versions = candidates.model_version.dropna().unique()
    model_version = str(versions[0]) if len(versions) else None
    batch_id = f"{task.name}-{day}"
    tasks = label_studio_tasks(chosen, batch_id, model_version, labeling)
    # Published first: a crash before the warehouse records the batch leaves tasks that the
    # next attempt finds again, never recorded tasks that the annotators cannot see.
    external = exchange.publish(batch_id, tasks, labeling)
    now = _now()
    task_ids = [t["data"]["task_id"] for t in tasks]
    rows = pd.DataFrame(
        {
            "task_id": task_ids,
            "external_id": pd.array([external.get(t) for t in task_ids], dtype="string"),
            labeling.example_id: chosen[labeling.example_id].to_numpy(),
            "batch_id": batch_id,
            "reason": chosen.reason.to_numpy(),
            "score": chosen.score.to_numpy(dtype="float64"),
            "model_version": model_version,
            "exported_at": now,
            "_landing_date": pd.Timestamp(day).date(),
        }
    )
    replace_rows(con, f"{RAW_SCHEMA}.{task.label_tasks_table}", "_landing_date", day, rows)
    return ExportReport(
        batch_id=batch_id,
        where=exchange.where,
        candidates=len(candidates),
        scored=int(candidates.score.notna().sum()),
        flagged_segments=0 if flagged is None else len(flagged),
        reasons=chosen.reason.value_counts().to_dict(),
        budget=budget,
    )


def import_day(
    con: WarehouseConnection,
    exchange: LabelExchange,
    task: TaskSpec,
    labeling: LabelingSpec,
    day: str,
) -> ImportReport:
    """Validate every document delivered on `day` and replace that day's labels and quarantine.

    Only the tasks the deliveries name are read from the warehouse (their export and any label
    from another delivery day): a day's import costs what it delivered, not every task ever
    exported."""
    labels = f"{RAW_SCHEMA}.{task.labels_table}"
    tasks = f"{RAW_SCHEMA}.{task.label_tasks_table}"
    # Only the newest delivery day may still receive deliveries; an older day's are final.
    newest = con.execute(f"select max(_landing_date) from {tasks}").fetchone()
    newest = newest[0] if newest else None
    today = newest is None or pd.isna(newest) or pd.Timestamp(day) >= pd.Timestamp(newest)
    deliveries = exchange.deliveries(day, today=today)
    named = sorted(set().union(*(_named(d, labeling) for d in deliveries)))
    already: dict[str, str] = {}
    exported: dict[str, str] = {}
    for start in range(0, len(named), LOOKUP_CHUNK):
        chunk = named[start : start + LOOKUP_CHUNK]
        marks = ", ".join("?" * len(chunk))
        elsewhere = con.execute(
            f"select task_id, 'annotation ' || annotation_id || ' in ' || source_file as origin "
            f"from {labels} where _delivery_date <> ? and task_id in ({marks})",
            [day, *chunk],
        ).df()
        already.update(zip(elsewhere.task_id, elsewhere.origin, strict=True))
        found = con.execute(
            f"select task_id, {labeling.example_id} as example_id from {tasks} "
            f"where task_id in ({marks})",
            chunk,
        ).df()
        exported.update(zip(found.task_id, found.example_id, strict=True))
    awaiting = {t: e for t, e in exported.items() if t not in already}
    accepted, rejected = [], []
    for delivery in deliveries:
        key = delivery.key
        if is_outcomes_file(key):
            # Outcomes known by the end of the delivery's day at the latest.
            delivered = delivery.known_at or pd.Timestamp(day) + pd.Timedelta(days=1)
            good, bad = parse_outcomes(key, delivery.data, awaiting, already, labeling, delivered)
        else:
            good, bad = parse_label_studio_export(
                key, delivery.data, awaiting, already, labeling, delivery.known_at
            )
        accepted.append(good)
        rejected.append(bad)
        for task_id, annotation_id in zip(good.task_id, good.annotation_id, strict=True):
            already[task_id] = f"annotation {annotation_id} in {key}"
            awaiting.pop(task_id, None)
    files = [d.key for d in deliveries]
    now = _now()
    good = pd.concat(accepted, ignore_index=True) if accepted else pd.DataFrame()
    bad = pd.concat(rejected, ignore_index=True) if rejected else pd.DataFrame()
    good = good.assign(_delivery_date=pd.Timestamp(day).date(), _ingested_at=now)
    bad = bad.rename(columns={"item": "source_line"}).drop(columns="task_id", errors="ignore")
    bad = bad.assign(
        feed=task.labels_table, landing_date=pd.Timestamp(day).date(), quarantined_at=now
    )
    with con.transaction():
        replace_rows(con, labels, "_delivery_date", day, good)
        con.execute(
            f"delete from {RAW_SCHEMA}.quarantine where feed = ? and landing_date = ?",
            [task.labels_table, day],
        )
        if len(bad):
            con.insert_rows(f"{RAW_SCHEMA}.quarantine", bad)
    con.refresh_statistics(labels)
    reasons = bad.reason.str.split(" \\(").str[0].value_counts().to_dict() if len(bad) else {}
    return ImportReport(files, len(good), len(bad), reasons)


def _named(delivery: Delivery, labeling: LabelingSpec) -> set[str]:
    """The label tasks a delivery answers: an export's items, or an outcomes file's rows."""
    if is_outcomes_file(delivery.key):
        return task_ids_in_outcomes(delivery.key, delivery.data, labeling)
    return task_ids_named(delivery.data)
