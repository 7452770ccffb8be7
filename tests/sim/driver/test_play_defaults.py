"""A task's own play (its YAML's `replay:` section): what `flywheel-sim run` and `make flywheel`
play when the command line does not say, and the refusal that names where to say it."""

from __future__ import annotations

import argparse
from datetime import date

import pytest
import yaml

from pipelines.task import load_task
from sim.driver.cli import main
from sim.driver.play_defaults import (
    PlayDefaults,
    fill_budget_defaults,
    fill_span_defaults,
    play_defaults,
)
from sim.driver.simulation import UsageError


def task_with_replay(tmp_path, replay) -> str:
    """A copy of the flights task whose `replay:` section is `replay` (None: no section)."""
    raw = yaml.safe_load(load_task("flights").path.read_text())
    raw.pop("replay", None)
    if replay is not None:
        raw["replay"] = replay
    path = tmp_path / "flights.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def flags(**given) -> argparse.Namespace:
    names = ("start", "days", "bootstrap_days", "validation_days", "test_days")
    return argparse.Namespace(**{name: given.get(name) for name in names})


def test_each_shipped_task_declares_its_play() -> None:
    assert play_defaults(load_task("flights")) == PlayDefaults(date(2013, 4, 1), 275, 21)
    assert play_defaults(load_task("movielens")) == PlayDefaults(date(1996, 3, 1), 248, 12, 1, 1)


@pytest.mark.parametrize(
    ("replay", "message"),
    [
        ({"begin": "2013-04-01"}, "unknown keys ['begin']"),
        ({"days": 0}, "replay.days: expected a whole number >= 1, got 0"),
        ({"days": "ten"}, "replay.days: expected a whole number >= 1"),
        ({"start": "2014-02-01"}, "replay.start: 2014-02-01 is outside the task"),
        ({"start": "April"}, "replay.start: expected a date as YYYY-MM-DD"),
        (["2013-04-01"], "replay: expected a mapping"),
    ],
)
def test_a_wrong_section_is_named(tmp_path, replay, message) -> None:
    with pytest.raises(ValueError, match="replay") as refused:
        play_defaults(load_task(task_with_replay(tmp_path, replay)))
    assert message in str(refused.value)


def test_without_flags_a_play_is_the_tasks_span_and_flags_replace_it() -> None:
    task = load_task("movielens")
    defaults = play_defaults(task)
    args = flags()
    fill_span_defaults(args, defaults, task)
    fill_budget_defaults(args, defaults)
    assert (args.start, args.days, args.bootstrap_days) == (date(1996, 3, 1), 248, 12)
    assert (args.validation_days, args.test_days) == (1, 1)
    args = flags(start=date(1999, 1, 1), bootstrap_days=5, test_days=2)
    fill_span_defaults(args, defaults, task)
    fill_budget_defaults(args, defaults)
    assert (args.start, args.days, args.bootstrap_days) == (date(1999, 1, 1), 248, 5)
    assert (args.validation_days, args.test_days) == (1, 2)


def test_days_alone_play_from_the_tasks_start_so_the_same_command_resumes_its_span() -> None:
    task = load_task("flights")
    args = flags(days=3)
    fill_span_defaults(args, play_defaults(task), task)
    assert (args.start, args.days) == (date(2013, 4, 1), 3)
    bare = flags(days=3)  # a task without replay.start: the day after the clock, as before
    fill_span_defaults(bare, PlayDefaults(), task)
    assert (bare.start, bare.days) == (None, 3)


def test_a_task_with_no_play_declared_needs_days_and_says_where_to_declare_them(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLYWHEEL_TASK", task_with_replay(tmp_path, None))
    task = load_task()
    with pytest.raises(UsageError, match=r"declares no replay\.days") as refused:
        fill_span_defaults(flags(), play_defaults(task), task)
    assert "make flywheel DAYS=N" in str(refused.value)
    with pytest.raises(SystemExit) as exit_info:
        main(["run"])
    assert exit_info.value.code == 2
    assert "declares no replay.days" in capsys.readouterr().err
    assert not (tmp_path / "home" / "landing").exists()
