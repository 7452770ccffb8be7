"""Which task a code location serves: FLYWHEEL_TASK, else the one task file marked default."""

from __future__ import annotations

import pytest

from pipelines.task import contracts, load_task, task_name


def test_the_setting_names_the_task_else_the_file_marked_default(monkeypatch) -> None:
    monkeypatch.delenv("FLYWHEEL_TASK", raising=False)
    assert task_name() == "flights" and load_task().name == "flights"
    monkeypatch.setenv("FLYWHEEL_TASK", "movielens")
    assert task_name() == "movielens" and load_task().cadence == "monthly"


@pytest.mark.parametrize("marked", [0, 2])
def test_no_default_or_two_is_a_named_error(tmp_path, monkeypatch, marked) -> None:
    for n in range(2):
        flag = "default: true\n" if n < marked else ""
        (tmp_path / f"task{n}.yaml").write_text(f"task: task{n}\n{flag}")
    monkeypatch.delenv("FLYWHEEL_TASK", raising=False)
    monkeypatch.setattr(contracts, "TASKS_DIR", tmp_path)
    contracts.default_task_name.cache_clear()
    try:
        with pytest.raises(ValueError, match=f"{marked} task files .* marked `default: true`"):
            task_name()
    finally:
        contracts.default_task_name.cache_clear()
