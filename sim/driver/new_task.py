"""`flywheel-sim new-task NAME --from FILE --time COLUMN --label COLUMN`: a task from a sample file.

Reads a CSV or Parquet sample and writes everything a task is, then checks that it fits:

- `pipelines/tasks/NAME.yaml`: the feed's contract inferred from the file (each column's type,
  whether it may be empty, the example id), the label and its choices, the model's features,
  the partitions spanning the file, and the replay of the file itself (`replay.source`);
- `dbt_project/models/NAME/`: staging views, the features table with trailing-window label
  histories, the examples table (sim.driver.task_sql);
- the task's tag block in `dbt_project/dbt_project.yml` and its entry in `workspace.yaml`;
- then `dbt parse` and the wiring check (pipelines.lib.wiring).

The label is binary (two values; `--positive` names the one that is true, else the rarer) or
numeric classes (at most MAX_CLASSES values). Nothing is overwritten unless `--force`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd
import yaml

from pipelines.task.contracts import next_start, partition_start
from sim.driver.simulation import UsageError
from sim.driver.task_sql import TaskModels, files
from sim.world.file_source import column_name, day_of, read_table

NAME = re.compile(r"^[a-z][a-z_]*[a-z]$")
MAX_CLASSES = 20
# A text column with at most this many distinct values in the sample is a categorical feature
# (names, free text and ids have more); at most MAX_HISTORIES of them get label histories.
MAX_CATEGORIES = 50
MAX_HISTORIES = 3
WINDOW_DAYS = {"daily": 28, "weekly": 84, "monthly": 365}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # the contract's: integer, float, string, timestamp
    nullable: bool
    distinct: int


def infer(values: pd.Series, name: str) -> Column:
    """A column's contract type from its text values."""
    present = values[values != ""]
    for kind, parse in (("integer", _integers), ("float", _floats)):
        if len(present) and parse(present):
            return Column(name, kind, len(present) < len(values), present.nunique())
    return Column(name, "string", len(present) < len(values), present.nunique())


def _integers(values: pd.Series) -> bool:
    return bool(values.str.fullmatch(r"-?\d{1,15}").all())


def _floats(values: pd.Series) -> bool:
    return bool(pd.to_numeric(values, errors="coerce").notna().all())


def label_choices(values: pd.Series, positive: str | None, where: str) -> tuple[dict, object]:
    """The label's choices (shown text -> value) and the replay's positive outcome (binary)."""
    present = values[values != ""]
    distinct = sorted(present.unique(), key=lambda v: (-(present == v).sum(), v))
    if len(distinct) == 2:
        chosen = positive if positive is not None else distinct[-1]  # the rarer one
        if chosen not in distinct:
            raise UsageError(f"{where}: --positive {chosen!r} is none of its values {distinct}")
        other = next(v for v in distinct if v != chosen)
        return {_choice(chosen): True, _choice(other): False}, _scalar(chosen)
    numbers = pd.to_numeric(pd.Series(distinct), errors="coerce")
    if 2 < len(distinct) <= MAX_CLASSES and numbers.notna().all():
        return {_choice(v): float(v) for v in sorted(distinct, key=float)}, None
    raise UsageError(
        f"{where}: a label needs two values (binary) or at most {MAX_CLASSES} numeric classes; "
        f"it has {len(distinct)} values, e.g. {distinct[:5]}"
    )


def _choice(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", value) or "empty"


def _scalar(text: str) -> object:
    """A YAML scalar for a value read as text: an integer stays one (the file's `1`)."""
    return int(text) if re.fullmatch(r"-?\d+", text) else text


@dataclass(frozen=True)
class NewTask:
    """What `new-task` was asked for."""

    name: str
    file: Path
    time: str
    label: str
    id: str | None = None
    positive: str | None = None
    cadence: str = "daily"
    budget: str = "30%"
    force: bool = False


def plan(request: NewTask, root: Path) -> tuple[dict, TaskModels]:
    """The task's YAML (as data) and its models, from the sample file."""
    if not NAME.fullmatch(request.name):
        raise UsageError(f"task name {request.name!r}: lower-case letters and _ (e.g. emails)")
    sample = read_table(request.file)
    where = str(request.file)
    flags = (("--time", request.time), ("--label", request.label), ("--id", request.id))
    for flag, column in flags:
        if column is not None and column not in sample.columns:
            raise UsageError(f"{where}: {flag} {column!r} is no column; it has {list(sample)}")
    days = day_of(sample[request.time], f"{where}, column {request.time!r}").map(date.fromisoformat)
    choices, positive = label_choices(sample[request.label], request.positive, where)
    renamed = {c: column_name(c) for c in sample.columns}
    if len(set(renamed.values())) < len(renamed):
        raise UsageError(f"{where}: two columns have one name once made plain: {renamed}")
    first = partition_start(days.min(), request.cadence, days.min())
    end = next_start(partition_start(days.max(), request.cadence, first), request.cadence)
    example_id, time, label = "example_id", renamed[request.time], renamed[request.label]
    others = [
        infer(sample[c], renamed[c])
        for c in sample.columns
        if c not in (request.time, request.label, request.id)
    ]
    numeric = [c.name for c in others if c.type in ("integer", "float")]
    categorical = [c.name for c in others if c.type == "string" and c.distinct <= MAX_CATEGORIES]
    models = TaskModels(
        task=request.name,
        example_id=example_id,
        time=time,
        time_column="partition_date",
        label=label,
        binary=positive is not None,
        columns=tuple(c.name for c in others),
        categorical=tuple(categorical[:MAX_HISTORIES]),
        window_days=WINDOW_DAYS[request.cadence],
    )
    histories = [n for c in models.categorical for n in models.history_columns(c)]
    counts = [models.history_columns(c)[1] for c in models.categorical]
    columns = {
        example_id: {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}_.+$"},
        time: {"type": "timestamp"},
        **{c.name: {"type": c.type, **({"nullable": True} if c.nullable else {})} for c in others},
    }
    source = {"file": _relative(request.file, root), "time": request.time}
    source |= {"outcome": request.label} | ({"id": request.id} if request.id else {})
    if positive is not None:
        source["positive"] = positive
    label_type = "BOOLEAN" if positive is not None else "DOUBLE"
    n = models.names
    spec = {
        "task": request.name,
        "partitions": {"start_date": first.isoformat(), "end_date": end.isoformat(),
                       "cadence": request.cadence},
        "feeds": {request.name: {
            "description": f"The examples of one partition of {request.file.name}.",
            "kind": "daily", "key": [example_id], "partition_date": [time], "columns": columns}},
        "labels": {
            "example_id": example_id, "label": label,
            "question": f"What is this example's {label}?",
            "choices": choices, "shown": [time, *[c.name for c in others][:4]],
            "budget": request.budget,
            "tasks_table": f"{request.name}_label_tasks",
            "tasks_columns": {"task_id": "VARCHAR", "external_id": "VARCHAR",
                              example_id: "VARCHAR", "batch_id": "VARCHAR", "reason": "VARCHAR",
                              "score": "DOUBLE", "model_version": "VARCHAR",
                              "exported_at": "TIMESTAMP", "_landing_date": "DATE"},
            "table": f"{request.name}_labels",
            "columns": {example_id: "VARCHAR", label: label_type, "known_at": "TIMESTAMP",
                        "task_id": "VARCHAR", "annotation_id": "BIGINT", "source_file": "VARCHAR",
                        "_delivery_date": "DATE", "_ingested_at": "TIMESTAMP"}},
        "model": {
            "features_table": n["features"], "examples_table": n["examples"],
            "labels_view": n["labels"], "predictions_table": f"{request.name}_predictions",
            "time_column": models.time_column, "categorical": categorical,
            "numeric": [*numeric, f"{time}_hour", f"{time}_weekday", *histories],
            "label_features": histories,
            "slices": {c: c for c in categorical[:1]}},
        "monitoring": {"min_labels": 50, "exclude_features": counts},
        # How much a partition's volume may vary is the traffic's own: a low day shows as an
        # ERROR in the UI without holding anything back until the task's owner sets it blocking.
        "checks": {"volume": {"blocking": False}},
        # Non-inferiority, as the flights task: a challenger of newer labels replaces the
        # champion unless its log loss is likely worse by more than 0.03 (docs/concepts.md).
        "promotion": {"min_improvement": -0.03},
        "replay": {"source": source, **_span(days, request.cadence, first)},
    }  # fmt: skip
    return spec, models


def _span(days: pd.Series, cadence: str, first: date) -> dict:
    """The default play: every partition of the file; the first model after a fifth of them,
    at least its held-out windows (one partition each) and two more to train on."""
    partitions = sorted({partition_start(d, cadence, first) for d in days})
    bootstrap = max(len(partitions) // 5, 2 + 2 * (7 if cadence == "daily" else 1))
    windows = {} if cadence == "daily" else {"validation_days": 1, "test_days": 1}
    return {"start": partitions[0].isoformat(), "days": len(partitions),
            "bootstrap_days": bootstrap, **windows}  # fmt: skip


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path.resolve())


def tag_block(name: str) -> str:
    return f'    {name}:\n      +tags: ["{name}"]\n'


def workspace_entry(name: str) -> str:
    return (
        f"  - python_module:\n      module_name: pipelines.definitions\n"
        f"      attribute: {name}\n      location_name: {name}\n"
    )


def write(request: NewTask, root: Path) -> list[Path]:
    """Write the task's files under `root` (the repository); the paths written."""
    spec, models = plan(request, root)
    task_file = root / "pipelines" / "tasks" / f"{request.name}.yaml"
    folder = root / "dbt_project" / "models" / request.name
    if not request.force and (task_file.exists() or folder.exists()):
        raise UsageError(f"task {request.name!r} exists ({task_file}, {folder}): --force rewrites")
    header = (
        f"# Written by `flywheel-sim new-task` from {request.file.name}: edit freely. The\n"
        "# tutorial (docs/your-own-task.md) says what each section means.\n"
    )
    task_file.write_text(header + yaml.safe_dump(spec, sort_keys=False, width=100))
    written = [task_file]
    for relative, text in files(models).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    project = root / "dbt_project" / "dbt_project.yml"
    text = project.read_text()
    if f"\n    {request.name}:\n" not in text:
        anchor = "\ndata_tests:"
        block = tag_block(request.name)
        project.write_text(
            text.replace(anchor, "\n" + block + anchor, 1) if anchor in text else text + block
        )
        written.append(project)
    workspace = root / "workspace.yaml"
    if f"attribute: {request.name}\n" not in workspace.read_text():
        with workspace.open("a") as out:
            out.write(workspace_entry(request.name))
        written.append(workspace)
    return written


def parse_and_check(name: str, root: Path) -> None:
    """`dbt parse` the project, then the wiring check, in a fresh interpreter of `root`'s code
    (this one has the task list of before)."""
    dbt = Path(sys.executable).parent / "dbt"
    subprocess.run(
        [str(dbt), "parse", "--quiet", "--profiles-dir", "."], cwd=root / "dbt_project", check=True
    )
    check = (
        "from pipelines.task import load_task; from pipelines.lib.wiring import check_wiring; "
        f"check_wiring(load_task({name!r}))"
    )
    subprocess.run([sys.executable, "-c", check], cwd=root, check=True)
