"""The main job: advance the world day by day and let the pipeline react as in production.

Each simulated day lands its files; `landing_sensor` is ticked against the real Dagster instance
(DAGSTER_HOME) and the runs it requests are executed there; the day's label export runs as
`label_export_schedule` launches it; the annotators answer; `inbox_sensor` imports the labels.
Runs carry the tags a daemon-launched run would, so they show in the Dagster UI as such.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg

from sim.executor import RunExecutor, RunSummary, TickReport


class SensorTicker:
    """Ticks one sensor of a code location and executes its run requests in process."""

    def __init__(self, executor: RunExecutor, name: str, state: Path):
        self.executor, self.name = executor, name
        self.defs, self.instance = executor.defs, executor.instance
        self.sensor = self.defs.resolve_sensor_def(name)
        self.cursor_path = state / f"{name}.cursor.json"

    def tick(self) -> TickReport:
        """Evaluate the sensor once, execute what it requests, then store its new cursor."""
        cursor = self.cursor_path.read_text() if self.cursor_path.exists() else None
        # Closing the context tears its resources down.
        with dg.build_sensor_context(
            instance=self.instance,
            cursor=cursor,
            definitions=self.defs,
            resources=self.defs.resources,
            sensor_name=self.name,
        ) as context:
            result = self.sensor.evaluate_tick(context)
        # What the sensor reports outside any run (check evaluations), stored as the daemon does.
        for event in result.asset_events:
            self.instance.report_runless_asset_event(event)
        report = self.executor.execute_once(
            result.run_requests, lambda: self.sensor.job_name, {"dagster/sensor_name": self.name}
        )
        if result.cursor is not None:
            self.cursor_path.parent.mkdir(parents=True, exist_ok=True)
            self.cursor_path.write_text(result.cursor)
        return report


class ScheduleTicker:
    """Ticks one schedule at given simulated times and executes what it requests in process."""

    def __init__(self, executor: RunExecutor, name: str):
        self.executor, self.name = executor, name
        self.defs, self.instance = executor.defs, executor.instance
        self.schedule = self.defs.resolve_schedule_def(name)

    def due(self, start: datetime, end: datetime) -> list[datetime]:
        """The schedule's tick times in [start, end)."""
        # Dagster's own cron iteration (what its daemon uses); not part of the public API.
        from dagster._utils.schedules import schedule_execution_time_iterator

        ticks = schedule_execution_time_iterator(
            start.timestamp(), self.schedule.cron_schedule, self.schedule.execution_timezone
        )
        due = []
        for moment in ticks:
            if moment >= end:
                break
            if moment >= start:
                due.append(moment)
        return due

    def tick(self, moment: datetime) -> TickReport:
        """Evaluate the schedule as at `moment` and execute its requests (each run key once)."""
        # The context opens its own instance from ours; closing it disposes of that instance
        # (left open, its eventual garbage collection would reset Dagster's current-instance
        # state in whatever code runs at that moment).
        with dg.build_schedule_context(
            instance=self.instance, scheduled_execution_time=moment, resources=self.defs.resources
        ) as context:
            data = self.schedule.evaluate_tick(context)
        return self.executor.execute_once(
            data.run_requests or [],
            lambda: self.schedule.job_name,
            {"dagster/schedule_name": self.name},
        )


RETRAINING_JOB = "retraining_job"
MONITORING_SENSORS = ("drift_sensor", "performance_sensor")


class FlywheelDriver:
    """Plays simulated days: the world lands files and answers labels, the pipeline reacts.

    Retraining triggers (the monitoring sensors and the weekly schedule) are ticked once
    `retraining` is on: an operator trains the first model (`retrain`), then turns them on.
    """

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        state: Path,
        land: Callable[[date], None],
        deliver_labels: Callable[[date], None],
        run_configs: dict[str, dict] | None = None,
        pool_wait_s: float = 600.0,
    ):
        self.defs, self.instance = defs, instance
        self.land, self.deliver_labels = land, deliver_labels
        self.executor = RunExecutor(defs, instance, run_configs, pool_wait_s)
        self.landing = SensorTicker(self.executor, "landing_sensor", state)
        self.inbox = SensorTicker(self.executor, "inbox_sensor", state)
        self.monitors = [SensorTicker(self.executor, n, state) for n in MONITORING_SENSORS]
        self.schedule = ScheduleTicker(self.executor, "retraining_schedule")
        self.retraining = False
        # At start-up, as the daemon's run monitoring would: runs left by a killed process.
        self.executor.recover()

    def day(self, day: date) -> TickReport:
        """Land the day and let the pipeline react: ingest, score, monitor, label, retrain."""
        self.land(day)
        report = self.landing.tick()
        # What label_export_schedule launches at the end of the day, for that day.
        export = dg.RunRequest(job_name="label_export_job", partition_key=day.isoformat())
        tags = {"dagster/schedule_name": "label_export_schedule"}
        report.runs.append(self.executor.execute(export, tags))
        self.deliver_labels(day)
        tickers = [self.inbox, *self.monitors] if self.retraining else [self.inbox]
        for ticker in tickers:
            report.extend(ticker.tick())
        if self.retraining:
            # The night after `day`: the weekly schedule's ticks up to the next day's landing.
            night = datetime.combine(day, datetime.min.time(), tzinfo=UTC) + timedelta(days=1)
            for moment in self.schedule.due(night, night + timedelta(days=1)):
                report.extend(self.schedule.tick(moment))
        report.runs[:0] = self.executor.take_recovered()
        return report

    def retrain(self, trigger: str, event_day: date) -> RunSummary:
        """An operator's retraining run: dataset, challenger, evaluation, promotion gate."""
        request = dg.RunRequest(job_name=RETRAINING_JOB)
        tags = {"flywheel/trigger": trigger, "flywheel/event_day": event_day.isoformat()}
        return self.executor.execute(request, tags)

    def decision(self, run_id: str) -> dict[str, str]:
        """What the promotion gate decided in retraining run `run_id`, on which versions."""
        records = self.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("champion_model")), limit=20
        ).records
        for record in records:
            if record.run_id == run_id and record.asset_materialization is not None:
                metadata = record.asset_materialization.metadata
                return {k: str(v.value) for k, v in metadata.items()}
        return {}
