"""A task's wiring checked when its code location loads: each mistake a newcomer makes (models
without the task's tag, a features table outside the daily build, a missing model, a task left
out of the workspace) is refused with the fix, not found later at label export."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

from pipelines.definitions import build_definitions
from pipelines.lib.dbt import DBT_PROJECT_DIR, dbt_project
from pipelines.lib.wiring import WORKSPACE, WiringError, check_wiring, wiring_problems
from pipelines.task import load_task, task_names


@cache
def manifest() -> dict:
    return json.loads(Path(dbt_project.manifest_path).read_text())


def edited(edit) -> dict:
    """A copy of the project's manifest with `edit(models by alias)` applied."""
    changed = copy.deepcopy(manifest())
    edit({n["alias"]: n for n in changed["nodes"].values() if n["resource_type"] == "model"})
    return changed


def renamed_task(tmp_path: Path, name: str) -> Path:
    """A copy of the movielens task under another name, outside `pipelines/tasks/`."""
    raw = yaml.safe_load(load_task("movielens").path.read_text())
    raw["task"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("name", task_names())
def test_the_shipped_tasks_are_wired(name) -> None:
    assert wiring_problems(load_task(name)) == []


def test_a_task_folder_without_its_tag_block_is_named_with_the_block_to_add(tmp_path) -> None:
    """The mistake as a newcomer makes it: the project parsed with the task's `+tags` line
    forgotten. Before the check, dbt only warned and the daily job built nothing."""
    project = tmp_path / "dbt_project"
    shutil.copytree(DBT_PROJECT_DIR, project, ignore=shutil.ignore_patterns("target", "logs"))
    config = project / "dbt_project.yml"
    text = config.read_text()
    assert '      +tags: ["movielens"]\n' in text
    config.write_text(text.replace('      +tags: ["movielens"]\n', ""))
    dbt = Path(sys.executable).parent / "dbt"
    subprocess.run(
        [str(dbt), "parse", "--quiet", "--profiles-dir", ".", "--target-path", "target"],
        cwd=project,
        check=True,
        env={"PATH": "/usr/bin:/bin", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"},
    )
    parsed = json.loads((project / "target" / "manifest.json").read_text())
    with pytest.raises(WiringError) as refused:
        check_wiring(load_task("movielens"), parsed)
    message = str(refused.value)
    assert "dbt_project/models/movielens/ carry no tag 'movielens'" in message
    assert 'movielens:\n        +tags: ["movielens"]' in message
    assert "dbt_project/dbt_project.yml" in message and "dbt parse" in message


def test_a_features_table_outside_the_daily_build_is_named(tmp_path) -> None:
    task = load_task("movielens")
    table = task.model.features_table
    parsed = edited(lambda models: models[table]["tags"].remove("daily"))
    (problem,) = wiring_problems(task, parsed)
    assert f"model.features_table {table!r} is not built by the daily job" in problem
    assert "config(tags=['daily'])" in problem and f"{table}.sql" in problem


def test_an_examples_table_outside_the_training_build_is_named() -> None:
    task = load_task("flights")
    table = task.model.examples_table
    parsed = edited(lambda models: models[table]["tags"].remove("training"))
    (problem,) = wiring_problems(task, parsed)
    assert f"{table!r} is not built by the retraining job" in problem


def test_a_table_no_model_builds_is_named_with_where_to_write_it() -> None:
    task = load_task("flights")
    parsed = copy.deepcopy(manifest())
    parsed["nodes"] = {
        k: n for k, n in parsed["nodes"].items() if n["alias"] != task.model.features_table
    }
    (problem,) = wiring_problems(task, parsed)
    assert f"{task.model.features_table!r} is no dbt model" in problem
    assert f"dbt_project/models/flights/marts/{task.model.features_table}.sql" in problem


def test_a_task_with_no_models_at_all_is_refused_when_its_location_loads(tmp_path) -> None:
    """Through the code location itself: `dagster definitions validate` shows this."""
    with pytest.raises(WiringError) as refused:
        build_definitions(env="local", task_name=str(renamed_task(tmp_path, "orders")))
    message = str(refused.value)
    assert "task 'orders'" in message and "no dbt model is tagged 'orders'" in message
    assert "dbt_project/models/orders/" in message


def test_a_task_left_out_of_the_workspace_is_named_and_the_entry_given_fits(tmp_path) -> None:
    workspace = tmp_path / "workspace.yaml"
    text = WORKSPACE.read_text()
    entry = text.index(
        "  - python_module:\n      module_name: pipelines.definitions\n      attribute: movielens"
    )
    workspace.write_text(text[:entry])
    task = load_task("movielens")
    (problem,) = wiring_problems(task, manifest(), workspace)
    assert "task 'movielens' has no code location in workspace.yaml" in problem
    entry = problem.split("add under `load_from:`\n", 1)[1]
    workspace.write_text(workspace.read_text() + entry + "\n")
    assert wiring_problems(task, manifest(), workspace) == []
    assert load_task("flights").name in str(yaml.safe_load(workspace.read_text()))


def test_a_task_given_as_a_path_is_not_asked_for_a_workspace_entry(tmp_path) -> None:
    empty = tmp_path / "workspace.yaml"
    empty.write_text("load_from: []\n")
    path = tmp_path / "flights.yaml"
    path.write_text(load_task("flights").path.read_text())
    assert wiring_problems(load_task(path), manifest(), empty) == []
    assert wiring_problems(load_task("flights"), manifest(), empty) != []
