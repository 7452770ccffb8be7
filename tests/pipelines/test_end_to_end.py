"""The whole flywheel over a short window: a planted drift makes it retrain and decide.

Every trigger requests here (FLYWHEEL_RETRAIN_ON), the drift sensor included.

Days land one by one and the driver ticks the real sensors and schedules against a test
instance. The first model trains after six days (small validation and test windows keep that
early); from day eight the weather feed reports temperatures in Celsius.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from ml.promotion import decide
from pipelines.defs.evaluation.assets import gate_inputs_from_metadata
from pipelines.lib.asset_keys import task_run_config
from pipelines.lib.registry import (
    _load_model,
    champion,
    record_decision,
    registered_name,
    rollback,
)
from pipelines.lib.registry import versions as model_versions
from pipelines.lib.runs import full_pool_holders
from pipelines.resources import label_store
from pipelines.task import load_task
from pipelines.task.thresholds import Trigger
from sim.driver.in_process import FlywheelDriver
from sim.world.annotators import LabelingService
from sim.world.drift import PlantedDrift
from sim.world.replay import land_days
from tests.pipelines.killing import (
    REPO,
    assert_same_warehouse,
    copy_world,
    kill_at_step,
    warehouse_snapshot,
)

START = date(2013, 9, 2)
DAYS = 10
BOOTSTRAP = 6
# The bootstrap model (day 6) passes the floor and is the first champion; Monday's schedule
# waits (the champion is two days old). The drift starts on day 8: detected that day, and
# retrained that day, on the labels that came in since the bootstrap.
DRIFT = PlantedDrift(START + timedelta(days=BOOTSTRAP + 1), "celsius")
RETRAINING = task_run_config(
    "flights",
    {
        "ops": {
            "training_dataset": {"config": {"validation_days": 2, "test_days": 2}},
            "challenger_model": {"config": {"n_trials": 1, "max_epochs": 2}},
        }
    },
)


def materializations(instance: dg.DagsterInstance, asset: str, run_id: str) -> list[dict]:
    records = instance.fetch_materializations(dg.AssetKey(["flights", asset]), limit=1000).records
    return [
        {k: v.value for k, v in r.asset_materialization.metadata.items()}
        for r in records
        if r.run_id == run_id
    ]


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """Play the window once for every assertion below."""
    tmp = tmp_path_factory.mktemp("e2e")
    with pytest.MonkeyPatch.context() as patch:
        yield from _play(tmp, patch)


def _play(tmp, patch):
    from tests.pipelines.conftest import flywheel_in, make_dvc_repo

    make_dvc_repo(tmp, patch)
    # The task's default has drift watch without requesting; this window plays it as a trigger,
    # beside the others.
    patch.setenv("FLYWHEEL_RETRAIN_ON", ",".join(Trigger))
    with flywheel_in(tmp, patch) as flywheel:
        annotators = LabelingService(label_store("local"), latency_days=1)
        driver = FlywheelDriver(
            flywheel.defs,
            flywheel.instance,
            flywheel.home / "sim",
            lambda day: land_days(flywheel.zone, [day], drift=DRIFT),
            annotators.deliver,
            {"retraining_job": RETRAINING},
        )
        for i in range(DAYS):
            day = START + timedelta(days=i)
            driver.day(day)
            if i + 1 == BOOTSTRAP:
                driver.retrain("bootstrap", day)
                driver.retraining = True
        yield flywheel


def retraining_runs(instance: dg.DagsterInstance, trigger: str) -> list[dg.DagsterRun]:
    records = instance.get_run_records(
        dg.RunsFilter(job_name="retraining_job", tags={"flywheel/trigger": trigger}),
        ascending=True,
    )
    return [r.dagster_run for r in records]


def test_planted_drift_fires_the_drift_sensor_and_retraining_runs(played) -> None:
    instance = played.instance
    (bootstrap,) = retraining_runs(instance, "bootstrap")
    assert bootstrap.status == dg.DagsterRunStatus.SUCCESS
    (decision,) = materializations(instance, "champion_model", bootstrap.run_id)
    assert decision["decision"] == "promoted"
    assert retraining_runs(instance, "schedule") == []
    drift_runs = retraining_runs(instance, "drift")
    assert drift_runs, "the drift sensor requested no retraining"
    first = drift_runs[0]
    # The drift is detected on its first day, and retrained on it: no cooldown runs yet.
    drifted = {
        r.asset_materialization.partition: r.asset_materialization.metadata["is_drifted"].value
        for r in instance.fetch_materializations(
            dg.AssetKey(["flights", "feature_drift"]), limit=100
        ).records
        if "is_drifted" in r.asset_materialization.metadata
    }
    assert drifted[DRIFT.start.isoformat()] is True
    assert first.tags["flywheel/event_day"] == DRIFT.start.isoformat()
    assert first.tags["dagster/sensor_name"] == "drift_sensor"
    assert len({r.tags["dagster/run_key"] for r in drift_runs}) == len(drift_runs)
    assert first.status == dg.DagsterRunStatus.SUCCESS
    event = next(
        r.asset_materialization
        for r in instance.fetch_materializations(
            dg.AssetKey(["flights", "feature_drift"]), limit=100
        ).records
        if r.asset_materialization.partition == first.tags["flywheel/event_day"]
    )
    assert event.metadata["is_drifted"].value is True
    assert {"temp", "dewp"} <= set(event.metadata["drifted_features"].value)


def test_every_gate_decision_follows_its_rule(played) -> None:
    instance = played.instance
    _, promotion = (load_task().monitoring, load_task().promotion)
    records = instance.get_run_records(dg.RunsFilter(job_name="retraining_job"), ascending=True)
    assert len(records) >= 2
    for record in records:
        run_id = record.dagster_run.run_id
        (evaluation,) = materializations(instance, "model_evaluation", run_id)
        (decision,) = materializations(instance, "champion_model", run_id)
        expected = decide(gate_inputs_from_metadata(evaluation["gate_inputs"]), promotion.gate)
        assert decision["decision"] == ("promoted" if expected.promote else "rejected")
        assert decision["reason"] == expected.reason
        if expected.promote:
            assert decision["champion_version"] == evaluation["challenger_version"]
        else:
            assert str(decision["champion_version"]) == str(evaluation["champion_version"])


def test_predictions_carry_the_champion_version(played) -> None:
    instance = played.instance
    # The champion after each retraining, by the day whose end it ran at.
    timeline = []
    for record in instance.get_run_records(
        dg.RunsFilter(job_name="retraining_job"), ascending=True
    ):
        run = record.dagster_run
        (decision,) = materializations(instance, "champion_model", run.run_id)
        timeline.append((run.tags["flywheel/event_day"], decision["champion_version"]))
    scored = played.sql(
        "select cast(flight_date as varchar), list(distinct model_version) "
        "from flight_predictions group by 1 order by 1"
    )
    promoted = [day for day, version in timeline if version != "none"]
    assert promoted, f"no model was ever promoted: {timeline}"
    assert scored[0][0] > promoted[0], "scored before the first champion"
    for day, versions in scored:
        expected = [v for event_day, v in timeline if event_day < day][-1]
        assert versions == [expected], (day, versions, timeline)
    last = (START + timedelta(days=DAYS - 1)).isoformat()
    assert scored[-1][0] == last
    current = champion(played.defs.resources["tracker"], registered_name("flights"))
    assert current is not None and current.version == timeline[-1][1]
    unscored = played.scalar(
        "select count(*) from fct_flight_features f where flight_date > "
        f"'{promoted[0]}' and not exists "
        "(select 1 from flight_predictions p where p.flight_id = f.flight_id)"
    )
    assert unscored == 0


def test_each_day_is_served_moved_to_the_late_rate_of_the_uniform_labels_before_it(played) -> None:
    from ml.calibration import logit

    served = pd.DataFrame(
        played.sql(
            "select cast(flight_date as varchar), probability, calibrated_probability "
            "from flight_predictions"
        ),
        columns=["day", "probability", "calibrated"],
    )
    # One shift of the log-odds a day: the ranking within a day is the model's.
    moved = pd.Series(logit(served.calibrated) - logit(served.probability)).groupby(served.day)
    assert (moved.max() - moved.min()).max() < 1e-6
    known = {
        day: played.scalar(
            "select count(distinct t.flight_id) from raw.label_tasks t "
            "join raw.flight_labels l using (task_id) where t.reason in ('audit', 'random') "
            f"and l._delivery_date < '{day}' "
            f"and l._delivery_date >= cast('{day}' as date) - interval 14 day"
        )
        for day in moved.groups
    }
    shifts = moved.mean()
    # Moved from the day enough uniform labels had come back, by the recorded shift.
    minimum = load_task().monitoring.recalibration_min_labels
    enough = [day for day, n in known.items() if n >= minimum]
    assert enough and (shifts[enough].abs() > 1e-3).all()
    assert (shifts.drop(enough).abs() < 1e-9).all()
    last = max(moved.groups)
    (record,) = played.instance.fetch_materializations(
        dg.AssetKey(["flights", "flight_predictions"]), limit=1
    ).records
    metadata = {k: v.value for k, v in record.asset_materialization.metadata.items()}
    assert record.asset_materialization.partition == last
    assert metadata["recalibration_labels"] == known[last]
    assert metadata["prior_shift"] == pytest.approx(shifts[last], abs=1e-4)
    assert 0.5 < metadata["expected_auroc"] < 1


def test_rescoring_a_day_replaces_it_exactly(played) -> None:
    day = (START + timedelta(days=DAYS - 1)).isoformat()
    query = (
        "select flight_id, probability, model_version from flight_predictions "
        f"where flight_date = '{day}' order by flight_id"
    )
    flights = played.sql(f"select flight_id from flight_predictions where flight_date = '{day}'")
    # A re-run scores with today's champion (a retraining may have run since) ...
    assert played.run("daily_warehouse_job", day, ["flight_predictions"]).success
    once = played.sql(query)
    current = champion(played.defs.resources["tracker"], registered_name("flights"))
    assert sorted(r[0] for r in once) == sorted(r[0] for r in flights)
    assert {r[2] for r in once} == {current.version}
    # ... and replaces the day exactly: the same again gives the same rows, no duplicates.
    assert played.run("daily_warehouse_job", day, ["flight_predictions"]).success
    assert played.sql(query) == once
    assert played.scalar("select count(*) from flight_predictions") == played.scalar(
        "select count(*) from (select distinct flight_id from flight_predictions)"
    )


def test_report_numbers_come_from_the_run(played, tmp_path) -> None:
    from sim.judge.alarms import Horizon
    from sim.judge.report import write_report

    first_scored = played.scalar("select cast(min(flight_date) as varchar) from flight_predictions")
    last = (START + timedelta(days=DAYS - 1)).isoformat()
    report = write_report(
        played.defs,
        played.instance,
        "flights",
        (date.fromisoformat(first_scored), date.fromisoformat(last)),
        1,
        tmp_path / "report",
        ["test header"],
        horizon=Horizon(3, 1, "days"),
    )
    runs = played.instance.get_run_records(dg.RunsFilter(job_name="retraining_job"))
    assert len(report.retrainings) == len(runs)
    assert {"bootstrap", "drift"} <= set(report.retrainings.trigger)
    assert report.weekly.examples.sum() == played.scalar("select count(*) from flight_predictions")
    assert report.weekly[["flywheel", "static"]].notna().all().all()
    # The same-budget reference learned, each week, from as many labels as the flywheel had for
    # the flights of the days before it. (An earlier test may have scored the first day again,
    # whose week has no day before it: no model that week.)
    for row in report.weekly.itertuples():
        before = played.scalar(
            "select count(distinct l.flight_id) from raw.flight_labels l join "
            f"fct_flight_features f using (flight_id) where f.flight_date < '{row.week}'"
        )
        assert row.labels_before == before
        assert pd.isna(row.reference) == pd.isna(row.ceiling) == (before == 0)
    assert report.weekly.labels_before.max() > 0
    assert report.labels.labelled.sum() == played.scalar("select count(*) from raw.flight_labels")
    assert report.plot.read_bytes().startswith(b"\x89PNG")
    # Each retraining after the first is judged against the champion that scored its event
    # day, on every flight scored in the 3 days after it (fewer at the end of the play).
    judged = report.retrainings[report.retrainings.gain.notna()]
    assert len(judged) > 0 and "bootstrap" not in set(judged.trigger)
    for row in judged.itertuples():
        assert row.champion == played.scalar(
            "select mode(model_version) from flight_predictions "
            f"where flight_date = '{row.event_day}'"
        )
        assert row.judged_examples == played.scalar(
            "select count(*) from flight_predictions where flight_date > "
            f"'{row.event_day}' and flight_date <= cast('{row.event_day}' as date) + 3"
        )
    alarms = report.retrainings[report.retrainings.trigger.isin(["drift", "performance"])]
    assert report.alarms.alarms == len(alarms[alarms.version.astype(str) != ""])
    assert report.alarms.judged == alarms.gain.notna().sum()
    text = report.markdown.read_text()
    assert "test header" in text and "## Retrainings" in text and "weekly_auc.png" in text
    assert report.alarms.describe() in text
    # The terminal's summary: the headline figures of these tables, and where they are.
    summary = "\n".join(report.summary())
    assert len(report.summary()) <= 8
    mean = report.weekly[["flywheel", "static"]].mean()
    assert f"flywheel {mean.flywheel:.3f}, static model {mean.static:.3f}" in summary
    promoted = (report.retrainings.decision == "promoted").sum()
    assert f"retrainings: {len(report.retrainings)} (" in summary
    assert f"{promoted} promoted" in summary
    assert f"labels: {int(report.labels.labelled.sum()):,} of" in summary
    assert f"report: {report.markdown}" in summary and f"plot:   {report.plot}" in summary
    assert "|" not in summary  # no table rows on the terminal


# --- A killed process never wedges the loop: SIGKILL of real run processes -------------------

# A driver of a copy of the played world, as the child process and the test both build it.
CHILD = """
import sys
from datetime import date
import dagster as dg
from tests.pipelines.test_end_to_end import world_driver
with dg.DagsterInstance.get() as instance:
    driver = world_driver(instance)
    day = date.fromisoformat(sys.argv[2])
    driver.day(day) if sys.argv[1] == "day" else driver.retrain("schedule", day)
"""
NEXT = START + timedelta(days=DAYS)


def world_driver(instance: dg.DagsterInstance) -> FlywheelDriver:
    """A driver of the world that the environment names, retraining triggers off."""
    from pipelines.definitions import build_definitions
    from pipelines.resources import landing_zone

    return FlywheelDriver(
        build_definitions(env="local"),
        instance,
        Path(os.environ["FLYWHEEL_HOME"]) / "sim",
        lambda day: land_days(landing_zone("local"), [day], drift=DRIFT),
        LabelingService(label_store("local"), latency_days=1).deliver,
        {"retraining_job": RETRAINING},
    )


@contextmanager
def world(played, target: Path) -> Iterator[tuple[dict[str, str], dg.DagsterInstance]]:
    """A copy of the played world under `target`, its environment set, and its instance."""
    env = copy_world(played.home.parent, target)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        with dg.DagsterInstance.get() as instance:
            yield env, instance


def play(instance: dg.DagsterInstance, *days: date) -> None:
    driver = world_driver(instance)
    for day in days:
        driver.day(day)


@pytest.fixture(scope="module")
def uninterrupted(played, tmp_path_factory) -> dict[str, list[tuple]]:
    """The warehouse after the next two days played without a kill."""
    target = tmp_path_factory.mktemp("uninterrupted")
    with world(played, target) as (env, instance):
        play(instance, NEXT, NEXT + timedelta(days=1))
    return warehouse_snapshot(Path(env["FLYWHEEL_WAREHOUSE_PATH"]))


@pytest.mark.slow  # each case kills a run, then plays two days on a world copy: `make test-all`
# Step keys: an asset's op is named after its key (`flights__raw_weather`); dbt's is its own.
@pytest.mark.parametrize(
    "step", ["flights__raw_weather", "daily_dbt_models", "flights__flight_predictions"], ids=str
)
def test_a_daily_run_killed_mid_step_is_failed_retried_and_leaves_the_warehouse_whole(
    played, uninterrupted, tmp_path, step
) -> None:
    with world(played, tmp_path) as (env, instance):
        killed = kill_at_step(CHILD, ["day", NEXT.isoformat()], env, "daily_warehouse_job", step)
        assert killed.status == dg.DagsterRunStatus.STARTED
        assert full_pool_holders(instance) == {"warehouse": {killed.run_id}}
        # The driver's start-up fails the dead run, frees its slot and retries it; then the
        # day is played again and the next one after it.
        play(instance, NEXT, NEXT + timedelta(days=1))
        killed = instance.get_run_by_id(killed.run_id)
        assert killed.status == dg.DagsterRunStatus.FAILURE
        failure = instance.all_logs(killed.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert "run worker gone: process" in failure[0].message
        (retry,) = [
            r.dagster_run
            for r in instance.get_run_records(
                dg.RunsFilter(tags={"dagster/parent_run_id": killed.run_id})
            )
        ]
        assert retry.status == dg.DagsterRunStatus.SUCCESS
        assert retry.tags["dagster/run_key"] == killed.tags["dagster/run_key"]
        assert full_pool_holders(instance) == {}
        found = warehouse_snapshot(Path(env["FLYWHEEL_WAREHOUSE_PATH"]))
        assert_same_warehouse(found, uninterrupted)


@pytest.mark.slow
def test_a_retraining_killed_mid_training_does_not_stop_the_next_one(played, tmp_path) -> None:
    with world(played, tmp_path) as (env, instance):
        killed = kill_at_step(
            CHILD,
            ["retrain", NEXT.isoformat()],
            env,
            "retraining_job",
            "flights__challenger_model",
            3.0,
        )
        assert killed.status == dg.DagsterRunStatus.STARTED
        driver = world_driver(instance)  # start-up: failed, freed, retried once
        assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
        retries = instance.get_run_records(
            dg.RunsFilter(tags={"dagster/parent_run_id": killed.run_id})
        )
        assert [r.dagster_run.status for r in retries] == [dg.DagsterRunStatus.SUCCESS]
        # Once a day's labels came in, the next trigger (Monday's schedule, the first past the
        # retried run's cooldown) still requests a retraining, which completes.
        driver.day(NEXT)
        monday = datetime.combine(NEXT + timedelta(days=7 + (7 - NEXT.weekday()) % 7), time(4))
        tick = driver.submit(
            driver.schedule.requests(monday.replace(tzinfo=UTC)), driver.schedule.origin
        )
        assert [job for job, *_ in tick.runs] == ["retraining_job"]
        (run_id,) = [run_id for *_, run_id in tick.runs]
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS


SIMULATION = "import sys; from sim.driver.cli import main; sys.exit(main(sys.argv[1:]))"


def report_figures(report: Path) -> dict[str, str]:
    """The report's sections that hold figures (production AUC by week, labels spent)."""
    sections = {s.split("\n", 1)[0]: s for s in report.read_text().split("\n## ")[1:]}
    return {k: v for k, v in sections.items() if k in ("Production AUC by week", "Labels spent")}


@pytest.mark.slow
def test_the_simulation_killed_mid_day_resumes_to_the_same_report(played, tmp_path) -> None:
    args = ["run", "--start", NEXT.isoformat(), "--days", "2", "--trials", "1"]
    args += ["--max-epochs", "1", "--drift", f"celsius@{DRIFT.start.isoformat()}"]
    args += ["--validation-days", "2", "--test-days", "2"]  # the world has ten labelled days
    figures = []
    for name, kill in (("uninterrupted", False), ("killed", True)):
        env = copy_world(played.home.parent, tmp_path / name)
        command = [*args, "--report-dir", str(tmp_path / name / "report")]
        if kill:
            # Killed while the second day's daily run builds its models, then started again.
            second = (NEXT + timedelta(days=1)).isoformat()
            kill_at_step(
                SIMULATION, command, env, "daily_warehouse_job", "daily_dbt_models", 0, second
            )
        done = subprocess.run(
            [sys.executable, "-c", SIMULATION, *command],
            cwd=REPO,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        if kill:
            assert f"resuming after {NEXT}, the last day played: 1 of 2 to play" in done.stdout
            assert "[1/2" not in done.stdout and "[2/2" in done.stdout
        figures.append(report_figures(tmp_path / name / "report" / "flywheel_report.md"))
    assert figures[0] and figures[0] == figures[1]


def test_the_excess_loss_alarm_measures_each_day_and_waits_for_its_reference(played) -> None:
    instance = played.instance
    records = instance.fetch_materializations(
        dg.AssetKey(["flights", "excess_loss"]), limit=100
    ).records
    measured = {
        r.asset_materialization.partition: {
            k: v.value for k, v in r.asset_materialization.metadata.items()
        }
        for r in records
        if "excess_loss" in r.asset_materialization.metadata
    }
    # Each import day once a champion exists: the uniform labels of the day before, scored by
    # whichever champion served them; none on the first (its flights were never scored).
    days = sorted(measured)
    first_scored = (START + timedelta(days=BOOTSTRAP)).isoformat()
    assert days[0] == first_scored and measured[first_scored]["labels"] == 0
    later = [measured[d] for d in days[1:]]
    assert len(later) == DAYS - BOOTSTRAP - 1, measured
    assert all(m["labels"] > 0 and abs(m["excess_loss"]) < 1 for m in later), measured
    # Ten days hold no 28 reference days: measured, not armed, no alarm, no request.
    assert all(m["status"].startswith("not armed") and not m["is_alarm"] for m in measured.values())
    assert retraining_runs(instance, "excess_loss") == []
    with played.resource.connect() as con:  # the table the alarm reads its history from
        stored = con.df("select * from monitoring_excess_loss order by monitored_on")
    assert [d.isoformat() for d in pd.to_datetime(stored.monitored_on).dt.date] == days


def test_a_tampered_champion_is_refused_and_the_one_before_it_serves(played) -> None:
    tracker = played.defs.resources["tracker"]
    name = registered_name("flights")
    client = tracker.client()
    current = champion(tracker, name)
    promoted = None
    if not current.tags.get("flywheel.previous_champion"):  # give the champion one before it
        others = [v.version for v in model_versions(tracker, name) if v.version != current.version]
        promoted = max(others)
        record_decision(tracker, name, promoted, "promoted", "for this test", promote=True)
        current = champion(tracker, name)
    before = int(current.tags["flywheel.previous_champion"])
    model_id = client.get_model_version(name, str(current.version)).source.rsplit("/", 1)[1]
    (checkpoint,) = (played.home / "mlflow" / "artifacts" / "models" / model_id).rglob("*.ckpt")
    good = checkpoint.read_bytes()
    day = (START + timedelta(days=DAYS - 1)).isoformat()
    try:
        checkpoint.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
        _load_model.cache_clear()  # as a new run's process would: nothing loaded yet
        result = played.run("daily_warehouse_job", day, ["flight_predictions"])
        served = played.sql(
            f"select distinct model_version from flight_predictions where flight_date = '{day}'"
        )
        assert served == [(before,)]
        (metadata,) = materializations(played.instance, "flight_predictions", result.run_id)
        assert metadata["model_version"] == before
        assert metadata["refused_champion"] == current.version
        errors = [
            e.user_message
            for e in played.instance.all_logs(result.run_id)
            if e.level == logging.ERROR and "refused to score" in e.user_message
        ]
        assert len(errors) == 1 and f"models:/{name}/{current.version}: " in errors[0]
    finally:
        checkpoint.write_bytes(good)
        _load_model.cache_clear()
        if promoted is not None:
            rollback(tracker, name)
    # Its files restored, the champion serves again.
    assert played.run("daily_warehouse_job", day, ["flight_predictions"]).success
    restored = played.sql(
        f"select distinct model_version from flight_predictions where flight_date = '{day}'"
    )
    assert restored == [(champion(tracker, name).version,)]
