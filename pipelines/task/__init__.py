"""What the task YAML says: the floor below every other in `pipelines/`, with no Dagster.

- `loader`: `load_task`, the only reader of a task's YAML, and the `Task` it returns;
- `contracts` (the feeds and partitions) and `cadence` (a day, a week or a month);
- `model_spec` (what the model reads), `thresholds` (monitoring and the gate),
  `feed_checks` (the feed checks' settings and rules). The labels section's parser is
  `pipelines.labeling.spec`.

`from pipelines.task import load_task` (and `Task`, `task_name`, `task_names`, `SECTIONS`,
`TASKS_DIR`) reads the loader when first asked for: the sections' parsers import the contracts,
so importing the loader with the package would go round in a circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.task.loader import SECTIONS, TASKS_DIR, Task, load_task, task_name, task_names

__all__ = ["SECTIONS", "TASKS_DIR", "Task", "load_task", "task_name", "task_names"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from pipelines.task import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
