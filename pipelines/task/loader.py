"""The task: one YAML file under `pipelines/tasks/` (or a path), read once into one typed object.

`load_task` is the only reader of a task's YAML. Each section has its own parser beside the code
that uses it (`contracts` for the feeds and partitions, `model_spec`, `labeling.spec`, `thresholds`
for monitoring and promotion, `feed_checks`); an unknown section is an error, so a misspelt one
is never silently ignored. The task the code location serves is `FLYWHEEL_TASK` (the settings).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from pipelines.labeling.spec import LabelingSpec, parse_labeling_spec
from pipelines.settings import TASK_NAME
from pipelines.task.contracts import TASKS_DIR, TaskSpec, default_task_name, read_contracts
from pipelines.task.feed_checks import FeedChecks, parse_feed_checks
from pipelines.task.model_spec import ModelSpec, parse_model_spec
from pipelines.task.thresholds import MonitoringSpec, PromotionSpec, parse_thresholds

SECTIONS = (
    "task",
    "default",
    "partitions",
    "null_values",
    "feeds",
    "labels",
    "model",
    "monitoring",
    "promotion",
    "checks",
    # How the simulator replays the task (its default span and windows): read by `sim` only.
    "replay",
)


@dataclass(frozen=True, kw_only=True)
class Task(TaskSpec):
    """A task: its landing contracts (the `TaskSpec` fields) and every other section, parsed."""

    model: ModelSpec
    labeling: LabelingSpec
    monitoring: MonitoringSpec
    promotion: PromotionSpec
    feed_checks: FeedChecks


def task_names() -> list[str]:
    """Every task: the files under `pipelines/tasks/`."""
    return sorted(path.stem for path in TASKS_DIR.glob("*.yaml"))


def task_name() -> str:
    """The task the settings name (FLYWHEEL_TASK), else the one file under `pipelines/tasks/`
    marked `default: true`."""
    return TASK_NAME.get() or default_task_name()


def load_task(name_or_path: str | Path | None = None) -> Task:
    """The task named (a file `pipelines/tasks/<name>.yaml`), or the YAML file at a path;
    default: the task the settings name. A section missing, unknown or wrong is a ValueError
    naming the file and the section."""
    contracts = read_contracts(name_or_path or task_name())
    if unknown := sorted(set(contracts.sections) - set(SECTIONS)):
        raise ValueError(f"{contracts.path}: unknown sections {unknown}; known: {list(SECTIONS)}")
    monitoring, promotion = parse_thresholds(contracts)
    return Task(
        **{f.name: getattr(contracts, f.name) for f in fields(TaskSpec)},
        model=parse_model_spec(contracts),
        labeling=parse_labeling_spec(contracts),
        monitoring=monitoring,
        promotion=promotion,
        feed_checks=parse_feed_checks(contracts),
    )
