"""`flywheel-sim compare`: the same days played under several retraining policies and seeds.

The first model trains after six days; from day eight the weather feed reports temperatures in
Celsius (the end-to-end test's window), so the drift policy retrains while the static one keeps
its first model.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.driver.cli import main
from sim.driver.executor import TickReport
from sim.driver.in_process import Driver
from sim.driver.policies import CADENCES, POLICIES, apply, check_applied
from sim.driver.simulation import RunOptions

ARGS = ["compare", "--start", "2013-09-02", "--days", "10", "--bootstrap-days", "6"]
ARGS += ["--trials", "1", "--max-epochs", "2", "--validation-days", "2", "--test-days", "2"]
ARGS += ["--drift", "celsius@2013-09-09", "--seeds", "1", "--jobs", "1"]


REPO = Path(__file__).resolve().parents[3]


def day_lines(output: str, policy: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(f"{policy}: [")]


def test_policies_play_on_their_own_state_and_a_killed_compare_resumes(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))
    out = tmp_path / "compare"
    args = [*ARGS, "--out", str(out)]
    killed_in_its_third_day([*args, "--policies", "static"], out)

    # The same comparison again with one more policy: static resumes, drift plays.
    assert main([*args, "--policies", "static,drift"]) == 0
    printed = capsys.readouterr().out
    assert "static: resuming after 2013-09-0" in printed
    assert "static: [1/10" not in printed and "static: [10/10" in printed
    assert len(day_lines(printed, "drift")) == 10

    static, drift = (
        pd.read_csv(out / policy / "seed-0" / "report" / "retrainings.csv")
        for policy in ("static", "drift")
    )
    assert static.trigger.tolist() == ["bootstrap"]
    assert drift.trigger.iloc[0] == "bootstrap" and "drift" in set(drift.trigger)
    assert set(drift.trigger) == {"bootstrap", "drift"}  # no schedule, no performance sensor
    # Each policy has its own warehouse and Dagster instance.
    for policy in ("static", "drift"):
        home = out / policy / "seed-0"
        assert (home / "warehouse.duckdb").exists()
        assert (home / "dagster" / "dagster.yaml").exists()
        assert list((home / "checkout" / "data" / "datasets").glob("*.dvc"))

    # The first model, trained on the same labels with the same seed, trained once: by static,
    # the first policy to ask; drift took it from the comparison's shared folder of models.
    static_models, drift_models = (
        pd.read_csv(out / policy / "seed-0" / "report" / "trainings.csv")
        for policy in ("static", "drift")
    )
    assert static_models.model_cache.tolist() == ["stored"]
    assert drift_models.model_cache.iloc[0] == "hit"
    assert drift_models.training_s.iloc[0] == static_models.training_s.iloc[0]
    assert drift.dataset.iloc[0] == static.dataset.iloc[0]

    own = pd.read_csv(out / "static" / "seed-0" / "report" / "weekly.csv")
    np.testing.assert_allclose(own.flywheel, own.static)  # its champion never changed
    weekly = pd.read_csv(out / "report" / "weekly.csv")
    assert list(weekly.columns) == [
        "week",
        "examples",
        "label_mean",
        "static",
        "drift",
        "reference",
        "ceiling",
    ]
    # The same first model scored the first production week in both.
    assert weekly.static.iloc[0] == pytest.approx(weekly.drift.iloc[0])
    assert weekly.reference.notna().any()
    # The baselines are trained once, in the first policy's report.
    assert pd.read_csv(out / "drift" / "seed-0" / "report" / "weekly.csv").reference.isna().all()

    text = (out / "report" / "compare_report.md").read_text()
    summary = text.split("## Summary")[1].split("\n## ")[0]
    assert "| static" in summary and "| drift" in summary
    rows = {line.split("|")[1].strip(): line for line in summary.splitlines() if "|" in line}
    assert f"drift {(drift.trigger == 'drift').sum()}" in rows["drift"]
    # Against the flywheel and a cadence alone the paired tables are made: neither played here.
    assert "## Paired differences" not in text
    scores = pd.read_csv(out / "report" / "scores.csv")
    assert set(scores.policy) == {"static", "drift"} and set(scores.seed) == {0}
    assert (out / "report" / "weekly_auc.png").read_bytes()[:4] == b"\x89PNG"
    # The planted break: the humidity check failed on its first day in both plays (the days
    # each play's checks failed on are in its report), the year's feed checks beside it.
    checks = pd.read_csv(out / "drift" / "seed-0" / "report" / "checks.csv")
    humidity = checks[checks.check == "humidity"]
    assert humidity.day.min() == "2013-09-09" and humidity.asset.iloc[0] == "flights/raw_weather"
    broken = pd.read_csv(out / "report" / "break.csv").set_index("policy")
    assert broken.loc[["static", "drift"], "caught"].tolist() == [1, 1]
    assert broken.loc["static", "worst_check_delay_days"] == 0
    assert broken.loc["static", "promoted"] == 0
    assert broken.loc["drift", "alarm_delay_days"] >= 0
    assert "the feeds' humidity check failed on 0 ordinary days" in text

    # Asked again: nothing is left to play.
    assert main([*args, "--policies", "static"]) == 0
    assert day_lines(capsys.readouterr().out, "static") == []
    # Other settings in the same folder are refused, never mixed in.
    with pytest.raises(SystemExit) as refused:
        main([*args[:4], "11", *args[5:], "--policies", "static"])
    assert refused.value.code == 2
    assert "holds a comparison of other settings" in capsys.readouterr().err


class Recorded(Driver):
    """A driver whose pipeline does nothing: it records what the schedule was asked, and what
    the calendar submitted."""

    def __init__(self, cadence_days=None):
        from pipelines.definitions import defs

        super().__init__(defs, None, lambda day: None, lambda day: None, cadence_days)
        self.asked = []
        self.submitted = []

        class Schedule:
            origin = None

            def due(_, start: datetime, end: datetime) -> list[datetime]:
                self.asked.append(start)
                return []

        self.schedule = Schedule()

    def react(self) -> TickReport:
        return TickReport()

    def submit(self, requests, origin) -> TickReport:
        self.submitted += [(request, origin) for request in requests]
        return TickReport()


def test_the_weekly_schedule_ticks_once_the_first_model_is_trained_whatever_the_policy() -> None:
    # Whether a tick requests is the schedule's own decision (monitoring.retrain_on), as deployed.
    driver = Recorded()
    driver.day(date(2013, 9, 1))
    assert driver.asked == []
    driver.retraining = True
    driver.day(date(2013, 9, 8))
    assert driver.asked == [datetime(2013, 9, 9, tzinfo=UTC)]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_policy_reaches_the_pipeline_as_its_retrain_on_setting_alone(policy, monkeypatch):
    from pipelines.task import load_task

    monkeypatch.setenv("FLYWHEEL_RETRAIN_ON", "")  # unset, and restored after `apply`
    deployed = load_task().monitoring.retrain_on
    apply(policy)
    check_applied(policy, daemon=False)
    triggers = POLICIES[policy].triggers
    assert load_task().monitoring.retrain_on == (deployed if triggers is None else triggers)
    if POLICIES[policy].cadence_days is not None:
        assert triggers == ()  # the calendar retrains, no trigger


def test_a_policy_the_code_location_was_not_set_up_with_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("FLYWHEEL_RETRAIN_ON", "")
    with pytest.raises(ValueError, match="FLYWHEEL_RETRAIN_ON=none before it loads"):
        check_applied("static", daemon=False)
    monkeypatch.setenv("FLYWHEEL_RETRAIN_ON", "drift")
    with pytest.raises(ValueError, match="retrain_on is \\['drift'\\]"):
        check_applied("weekly", daemon=False)
    # On a stack, the code server's own setting decides: only the deployed policies play there.
    monkeypatch.setenv("FLYWHEEL_RETRAIN_ON", "")
    check_applied("flywheel", daemon=True)
    with pytest.raises(ValueError, match="on a stack, the code server's own"):
        check_applied("every-7d", daemon=True)


@pytest.mark.parametrize("policy", list(CADENCES))
def test_a_fixed_cadence_retrains_every_n_days_of_production(policy) -> None:
    n = CADENCES[policy]
    driver = Recorded(n)
    driver.day(date(2013, 9, 1))  # before the first model: nothing
    driver.retraining, driver.production_start = True, date(2013, 9, 2)
    days = [date(2013, 9, 2) + timedelta(d) for d in range(60)]
    for day in days:
        driver.day(day)
    # The schedule ticks too: under a cadence's FLYWHEEL_RETRAIN_ON=none, it skips.
    assert len(driver.asked) == len(days)
    retrained = [request.tags["flywheel/event_day"] for request, _ in driver.submitted]
    assert retrained == [day.isoformat() for day in days[n - 1 :: n]]
    request, origin = driver.submitted[0]
    assert request.job_name == "retraining_job" and request.tags["flywheel/trigger"] == "cadence"
    # Keyed by its day, under its own origin: asked again after a kill, it runs once.
    assert request.run_key == f"cadence:{days[n - 1]}" and origin == {"flywheel/cadence": policy}


def test_a_seed_reaches_training_and_the_label_samples_and_the_jobs_accept_it(tmp_path) -> None:
    import dagster as dg

    from pipelines.definitions import defs
    from pipelines.lib.asset_keys import task_key
    from pipelines.task import load_task

    task = load_task()

    def op(name: str) -> str:
        return task_key(task, name).to_python_identifier()

    unseeded = RunOptions().run_configs(task)
    assert set(unseeded) == {"retraining_job"}  # seed 0: the draws of every play so far
    assert "seed" not in unseeded["retraining_job"]["ops"][op("challenger_model")]["config"]
    assert "model_cache" not in unseeded["retraining_job"]["ops"][op("challenger_model")]["config"]
    seeded = RunOptions(seed=2, model_cache=tmp_path / "models").run_configs(task)
    training = seeded["retraining_job"]["ops"][op("challenger_model")]["config"]
    assert training["seed"] == 2 and training["model_cache"] == str(tmp_path / "models")
    assert seeded["label_export_job"] == {
        "ops": {op(task.label_tasks_table): {"config": {"seed": 2}}}
    }
    for job, config in seeded.items():
        dg.validate_run_config(defs.resolve_job_def(job), config)  # raises if the job refuses it


def live_simulations(out: Path) -> list[int]:
    """The processes running a policy's simulation on `out` (zombies are dead)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
            status = (proc / "status").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            continue
        running = "State:\tZ" not in status
        if running and b"run" in command and any(str(out).encode() in c for c in command):
            pids.append(int(proc.name))
    return pids


def killed_in_its_third_day(args: list[str], out: Path) -> None:
    """Run compare in a process of its own and SIGKILL it once its policy played two days: its
    simulation must die with it, at once."""
    command = [sys.executable, "-m", "sim", *args]
    with subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as compare:
        assert compare.stdout is not None
        for line in compare.stdout:
            if line.startswith("static: [2/"):
                break
        else:
            raise AssertionError("compare ended before its second day")
        # The simulation dies with compare through Linux's prctl, and is found through /proc.
        linux = sys.platform == "linux"
        assert not linux or live_simulations(out), "no simulation ran under compare"
        compare.kill()
    if not linux:
        return
    # At once: left running, it would die only when it next prints to the closed pipe (the
    # next day's line, seconds later; minutes inside a retraining), meanwhile a second compare
    # could start a second simulation on the same state.
    deadline = time.monotonic() + 1.0
    while live_simulations(out):
        assert time.monotonic() < deadline, "the simulation outlived the compare that started it"
        time.sleep(0.05)


def test_plays_at_once_share_the_cores_and_a_seeds_first_model_trains_once() -> None:
    from sim.driver.compare import core_slots, order_of_play

    assert core_slots(1, [0, 1]) == [[0, 1]]
    assert core_slots(2, [0, 1]) == [[0], [1]]
    assert core_slots(2, [0, 1, 2, 3, 4]) == [[0, 1, 2], [3, 4]]
    assert core_slots(3, [4, 5]) == [[4], [5], [4]]  # more plays than cores: they share
    # Side by side, plays hold different seeds: no two train the same first model at once.
    order = order_of_play(["static", "flywheel"], [0, 1, 2])
    assert order[:3] == [("static", 0), ("static", 1), ("static", 2)]
    assert sorted(order) == sorted((p, s) for p in ("static", "flywheel") for s in (0, 1, 2))


def test_two_plays_at_once_run_on_cores_of_their_own(tmp_path) -> None:
    from sim.driver.compare import _die_with_parent, environment

    env = environment(tmp_path / "home", [0])
    assert env["OMP_NUM_THREADS"] == "1" and env["FLYWHEEL_HOME"] == str(tmp_path / "home")
    script = "import os; print(sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'])"
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=_die_with_parent(os.getpid(), [0]),
        check=True,
    )
    assert done.stdout.split() == ["[0]", "1"]


def test_a_policy_turns_on_its_triggers_and_the_flywheel_plays_the_tasks() -> None:
    def retrain_on(name: str) -> str | None:
        return POLICIES[name].retrain_on

    assert retrain_on("drift") == "drift" and retrain_on("weekly") == "schedule"
    assert retrain_on("excess-loss") == "excess_loss"
    assert retrain_on("static") == "none" and retrain_on("every-7d") == "none"
    assert retrain_on("flywheel") is None  # the task's monitoring.retrain_on, as deployed
    assert POLICIES["every-7d"].describe() == "a retraining every 7 days"
    assert POLICIES["static"].describe() == "no retraining"
    assert POLICIES["drift"].describe() == "drift_sensor"


def test_the_targeted_labels_policy_targets_part_of_the_budget_the_flywheel_none() -> None:
    from pipelines.defs.labeling.assets import LabelSelectionConfig
    from pipelines.task import load_task

    task = load_task("flights")
    config = RunOptions(policy="targeted-labels", seed=2).run_configs(task)["label_export_job"]
    (op,) = config["ops"].values()  # the task's label export asset's op
    assert op["config"] == {"seed": 2, "audit_share": 0.4}
    # The flywheel spends the whole budget on the uniform sample: the export's default.
    assert "label_export_job" not in RunOptions(policy="flywheel").run_configs(task)
    assert LabelSelectionConfig().audit_share == 1.0
    assert POLICIES["targeted-labels"].retrain_on is None  # the flywheel's, as deployed
    assert POLICIES["targeted-labels"].describe().endswith("labels 40% audit, the rest targeted")


def test_a_bootstrap_too_short_for_the_held_out_days_is_refused_before_any_play(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))
    short = ["--days", "30", "--bootstrap-days", "14"]  # 7 validation and 7 test days
    for command in (
        ["run", *short],
        ["compare", "--start", "2013-11-09", *short, "--out", str(tmp_path)],
    ):
        with pytest.raises(SystemExit) as refused:
            main(command)
        assert refused.value.code == 2
        said = capsys.readouterr().err
        assert "--bootstrap-days 14 leaves the first model 13 labelled days" in said
        assert "at least 16 bootstrap days" in said
    assert not (tmp_path / "compare.json").exists()


def test_the_label_budget_flag_reaches_the_label_export() -> None:
    from pipelines.task import load_task
    from sim.driver.budget import play_options
    from sim.driver.cli import build_parser

    task = load_task("flights")
    args = build_parser().parse_args(
        ["run", "--days", "30", "--label-budget", "40", "--bootstrap-days", "21"]
    )
    config = play_options(args).run_configs(task)["label_export_job"]
    (op,) = config["ops"].values()
    assert op["config"] == {"budget": 40}
    unset = build_parser().parse_args(["run", "--days", "30"])
    assert "label_export_job" not in play_options(unset).run_configs(task)
