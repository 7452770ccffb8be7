"""Benchmark: wall time from a drift landing to a promoted model, and production AUC.

    python -m bench.drift_to_promotion --start 2013-09-01 --days 45 --drift celsius@2013-09-29

Plays the simulation (the same code as `make flywheel`) in a fresh FLYWHEEL_HOME with a planted
drift, then reads the Dagster instance: when the drifted day's landing run started, which days
failed `raw_weather`'s humidity check (the feed's units) and when, when the drift sensor's
retraining ran, and when the first promotion after the drift was recorded. It
also prints the report's weekly production AUC of the flywheel beside the static model.
The device is whatever Lightning picks (a GPU when there is one).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import date
from pathlib import Path

import dagster as dg

from pipelines.task.thresholds import ALARMS

REPO = Path(__file__).resolve().parents[1]


def fresh_home(home: Path, code: Path = REPO) -> None:
    """This process's environment for a simulation with a fresh state of its own under `home`
    (`own_state`), its Dagster instance with the settings of the code under `code`."""
    from sim.driver.simulation import STATE_PATHS, own_state

    (home / "dagster").mkdir(parents=True)  # fresh: an existing instance is an error
    for name in STATE_PATHS:
        os.environ.pop(name, None)
    os.environ.update(own_state(home, code))


def figures(instance: dg.DagsterInstance, drift_day: date) -> None:
    """Print the drift-to-promotion figures read from the instance's runs and events."""
    landing = instance.get_run_records(
        dg.RunsFilter(job_name="daily_warehouse_job", tags={"dagster/partition": str(drift_day)})
    )
    if not landing:
        print(f"the drifted day {drift_day} was never ingested")
        return
    landed_at = min(r.start_time for r in landing)
    humidity_figures(instance, drift_day, landed_at)
    retrainings = instance.get_run_records(dg.RunsFilter(job_name="retraining_job"), ascending=True)
    decisions = {
        r.run_id: r
        for r in instance.fetch_materializations(
            dg.AssetKey(["flights", "champion_model"]), limit=1000
        ).records
    }
    first_sensor = None
    for record in retrainings:
        run = record.dagster_run
        if record.start_time < landed_at:
            continue
        trigger, day = run.tags.get("flywheel/trigger"), run.tags.get("flywheel/event_day")
        if first_sensor is None and trigger in ALARMS:
            first_sensor = record
            print(
                f"first sensor retraining: {trigger} on {day}, requested "
                f"{record.create_timestamp.timestamp() - landed_at:.0f} s after the drifted day's "
                "landing run"
            )
        event = decisions.get(run.run_id)
        if event and event.asset_materialization.metadata["decision"].value == "promoted":
            version = event.asset_materialization.metadata["challenger_version"].value
            print(
                f"first promotion after the drift: version {version} ({trigger} on {day}), "
                f"{event.timestamp - landed_at:.0f} s wall after the drifted day's landing run, "
                f"{(date.fromisoformat(day) - drift_day).days} simulated days later; "
                f"the retraining run itself took {record.end_time - record.start_time:.0f} s"
            )
            return
    print("no model was promoted after the drift within the simulated period")


def humidity_figures(instance: dg.DagsterInstance, drift_day: date, landed_at: float) -> None:
    """Print the days raw_weather's humidity check failed on, and how soon after the drifted
    day's landing run started its own failure was recorded."""
    from pipelines.task import task_name
    from sim.judge.history import failed_checks

    failed = failed_checks(instance, task_name())
    failed = failed[(failed.asset == "flights/raw_weather") & (failed.check == "humidity")]
    at = dict(zip(failed.day, failed.at, strict=True))
    before = sorted(d for d in at if d < str(drift_day))
    print(
        f"humidity check: failed on {len(at)} days; before the drift: {', '.join(before) or 'none'}"
    )
    if str(drift_day) in at:
        print(
            f"humidity check failed on the drifted day {drift_day}, "
            f"{at[str(drift_day)] - landed_at:.1f} s after its landing run started"
        )
    else:
        print(f"the humidity check did not fail on the drifted day {drift_day}")


def main() -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--start", type=date.fromisoformat, default=date(2013, 9, 1))
    parser.add_argument("--days", type=int, default=45)
    parser.add_argument("--bootstrap-days", type=int, default=21)
    parser.add_argument("--drift", default="celsius@2013-09-29")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--max-epochs", type=int, default=12)
    parser.add_argument("--home", type=Path, help="default: a temporary folder")
    parser.add_argument(
        "--figures-only", action="store_true", help="only read the figures of the run in --home"
    )
    args = parser.parse_args()
    from sim.world.drift import parse_drift

    drift = parse_drift(args.drift)
    if args.figures_only:
        if args.home is None:
            parser.error("--figures-only reads an earlier run: name its --home")
        os.environ["DAGSTER_HOME"] = str(args.home / "dagster")
    else:
        home = args.home or Path(tempfile.mkdtemp(prefix="flywheel-bench-"))
        fresh_home(home)
        from sim.driver.simulation import RunOptions, run

        report = home / "report"
        options = RunOptions(
            bootstrap_days=args.bootstrap_days,
            trials=args.trials,
            max_epochs=args.max_epochs,
            drift=drift,
            report_dir=report,
        )
        run(args.days, args.start, options)
        print(f"state and report under {home}")
    with dg.DagsterInstance.get() as instance:
        figures(instance, drift.start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
