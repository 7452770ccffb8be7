"""Asset keys: every asset of a task lives under the task's name.

One Dagster instance serves several tasks, a code location each (`workspace.yaml`), and asset keys
are global to the instance: `<one task>/champion_model` and `<another>/champion_model` are two
assets with their own history, checks and lineage.
"""

from __future__ import annotations

import dagster as dg

from pipelines.task.contracts import TaskSpec


def task_prefix(task: TaskSpec | str) -> list[str]:
    """The key prefix of a task's assets: its name."""
    return [task if isinstance(task, str) else task.name]


def task_key(task: TaskSpec | str, name: str) -> dg.AssetKey:
    """The key of the asset `name` (a table's or a model's) of `task`."""
    return dg.AssetKey([*task_prefix(task), name])


def task_run_config(task: TaskSpec | str, run_config: dict) -> dict:
    """`run_config` keyed by asset name (`{"ops": {"challenger_model": ...}}`) as the run config of
    `task`'s jobs: the op of asset `<task>/<name>` is Dagster's `<task>__<name>`."""
    ops = run_config.get("ops", {})
    return {
        **run_config,
        "ops": {task_key(task, name).to_python_identifier(): value for name, value in ops.items()},
    }
