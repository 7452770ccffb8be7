"""A task's wiring, checked when its code location loads: each mistake named with its fix.

A task is its YAML file, its dbt models and its entry in `workspace.yaml`. Forgetting one of
them used to fail late and elsewhere: models without the task's tag gave only a dbt warning,
the daily job "succeeded" having built nothing, and the first play failed at label export on a
missing table; a task missing from the workspace was silently absent from `dagster definitions
validate`. `wiring_problems` finds each of these from the parsed dbt project (its manifest) and
the workspace file, and says what to add where; `check_wiring` raises them all at once.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import yaml

from pipelines.lib.dbt import dbt_project
from pipelines.settings import REPO_ROOT
from pipelines.task.contracts import TASKS_DIR

WORKSPACE = REPO_ROOT / "workspace.yaml"
# The dbt tags that put a model in the daily build (every landing partition) and in the
# retraining's build (pipelines/defs/warehouse/assets.py).
DAILY_TAG, TRAINING_TAG = "daily", "training"
# Run after writing or changing a model: the code location reads the parsed project.
PARSE = "make setup (or: cd dbt_project && dbt parse)"


class WiringError(ValueError):
    """A task whose YAML, dbt models and workspace do not fit together; the message lists each
    problem with its fix."""


def models_of(manifest: dict) -> dict[str, dict]:
    """The manifest's models by relation name (their alias)."""
    return {
        node["alias"]: node
        for node in manifest["nodes"].values()
        if node["resource_type"] == "model"
    }


def dbt_problems(task, manifest: dict) -> list[str]:
    """What is missing between `task`'s model section and the dbt project: its models in their
    folder, the task's tag on them, the features table in the daily build, the examples table
    in the training build."""
    models = models_of(manifest)
    own = {name: m for name, m in models.items() if task.name in m["tags"]}
    folder = {name: m for name, m in models.items() if m["fqn"][1:2] == [task.name]}
    project_yml = "dbt_project/dbt_project.yml"
    if not own and folder:
        return [
            f"the {len(folder)} dbt models under dbt_project/models/{task.name}/ carry no tag "
            f"{task.name!r}, so no job of the task builds them: add to {project_yml}, under "
            f"`models: flywheel:`, the block\n      {task.name}:\n        +tags: "
            f'["{task.name}"]\n    then run {PARSE}'
        ]
    if not own:
        return [
            f"no dbt model is tagged {task.name!r}: write the task's models under "
            f"dbt_project/models/{task.name}/ (docs/your-own-task.md, section 3), give the "
            f'folder the tag in {project_yml} (`{task.name}: +tags: ["{task.name}"]`), '
            f"then run {PARSE}"
        ]
    problems = []
    wanted = (
        ("features_table", task.model.features_table, DAILY_TAG, "the daily job"),
        ("examples_table", task.model.examples_table, TRAINING_TAG, "the retraining job"),
    )
    for field, table, tag, job in wanted:
        node = models.get(table)
        where = f"{task.path.name}: model.{field} {table!r}"
        if node is None:
            problems.append(
                f"{where} is no dbt model: write dbt_project/models/{task.name}/marts/"
                f"{table}.sql (or name the model that holds it), then run {PARSE}"
            )
        elif task.name not in node["tags"]:
            problems.append(
                f"{where} ({node['original_file_path']}) is not tagged {task.name!r}: move it "
                f"under dbt_project/models/{task.name}/, whose folder carries the tag"
            )
        elif tag not in node["tags"]:
            problems.append(
                f"{where} is not built by {job}: add {tag!r} to its tags "
                f"(`{{{{ config(tags=['{tag}']) }}}}` in {node['original_file_path']}), "
                f"then run {PARSE}"
            )
    return problems


def workspace_problems(task, workspace: Path = WORKSPACE) -> list[str]:
    """A task file under `pipelines/tasks/` without its code location in `workspace`, with the
    entry to add. A task given as a path elsewhere (tests, a one-off) has no location to name."""
    if task.path.resolve().parent != TASKS_DIR.resolve():
        return []
    entries = (yaml.safe_load(workspace.read_text()) or {}).get("load_from") or []
    served = {
        e["python_module"].get("attribute")
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("python_module"), dict)
    }
    if task.name in served:
        return []
    return [
        f"task {task.name!r} has no code location in {workspace.name}, so `dagster dev` and "
        f"`dagster definitions validate` leave it out: add under `load_from:`\n"
        f"  - python_module:\n      module_name: pipelines.definitions\n"
        f"      attribute: {task.name}\n      location_name: {task.name}"
    ]


def parsed_manifest() -> dict:
    """The parsed dbt project's manifest, read once per version of the file (each task's code
    location reads it to check its wiring and to find its incremental models)."""
    path = Path(dbt_project.manifest_path)
    return _manifest_at(path, path.stat().st_mtime_ns)


@cache
def _manifest_at(path: Path, modified_ns: int) -> dict:
    return json.loads(path.read_text())


def wiring_problems(task, manifest: dict | None = None, workspace: Path = WORKSPACE) -> list[str]:
    """Every wiring problem of `task` (a `pipelines.task.Task`), each naming its fix."""
    if manifest is None:
        if not Path(dbt_project.manifest_path).exists():
            missing = dbt_project.manifest_path
            return [f"the dbt project is not parsed ({missing} is missing): run {PARSE}"]
        manifest = parsed_manifest()
    return dbt_problems(task, manifest) + workspace_problems(task, workspace)


def check_wiring(task, manifest: dict | None = None, workspace: Path = WORKSPACE) -> None:
    """Raise a WiringError listing every problem of `wiring_problems`, if any."""
    if problems := wiring_problems(task, manifest, workspace):
        listed = "\n".join(f"  - {p}" for p in problems)
        raise WiringError(f"task {task.name!r} ({task.path}) is not wired up:\n{listed}")
