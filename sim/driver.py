"""The main job: advance the world day by day and let the pipeline react as in production.

Each simulated day lands its files; `landing_sensor` is ticked against the real Dagster instance
(DAGSTER_HOME) and the runs it requests are executed there; the day's label export runs as
`label_export_schedule` launches it; the annotators answer; `inbox_sensor` imports the labels.
Runs carry the tags a daemon-launched run would, so they show in the Dagster UI as such.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg

RunSummary = tuple[str, str | None, float, str]


class RunFailedError(RuntimeError):
    """A requested run failed; the message names the run and its failing steps' errors."""


@dataclass
class TickReport:
    """The runs a day requested: (job, partition, seconds, run id) each, and requests already
    run."""

    runs: list[RunSummary] = field(default_factory=list)
    skipped: int = 0

    def extend(self, other: TickReport) -> None:
        """Add another tick's runs and skips to this one."""
        self.runs.extend(other.runs)
        self.skipped += other.skipped


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    """Each failed step with the messages of its error and the error's causes."""
    lines = []
    for event in result.get_step_failure_events():
        error = event.event_specific_data.error
        lines.append(f"step {event.step_key}:")
        while error is not None:
            lines.append(f"  {error.message.strip()}")
            error = error.cause
    return "\n".join(lines)


def execute_request(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    request: dg.RunRequest,
    tags: dict[str, str],
    run_config: dict | None = None,
) -> RunSummary:
    """Execute one run request in process on the instance; RunFailedError if it fails.

    `run_config` (an operator's job config) is merged over the request's own.
    """
    started = time.monotonic()
    config = {**(request.run_config or {}), **(run_config or {})}
    result = defs.resolve_job_def(request.job_name).execute_in_process(
        run_config=config or None,
        instance=instance,
        partition_key=request.partition_key,
        asset_selection=list(request.asset_selection or []) or None,
        tags={**request.tags, **tags},
        raise_on_error=False,
    )
    if not result.success:
        raise RunFailedError(
            f"run {result.run_id} of {request.job_name} (partition {request.partition_key}) "
            f"failed; see it in the Dagster UI.\n{failure_message(result)}"
        )
    return request.job_name, request.partition_key, time.monotonic() - started, result.run_id


def execute_once(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    requests: list[dg.RunRequest],
    default_job: Callable[[], str],
    origin: dict[str, str],
    run_configs: dict[str, dict],
) -> TickReport:
    """Execute a tick's requests as the daemon would: a run key already run by the same sensor
    or schedule (`origin` tag) is skipped; requests without a job go to `default_job()`."""
    report = TickReport()
    for request in requests:
        tags = {**origin, "dagster/run_key": request.run_key or ""}
        if request.run_key and instance.get_run_records(dg.RunsFilter(tags=tags), limit=1):
            report.skipped += 1
            continue
        if request.job_name is None:
            request = request.with_replaced_attrs(job_name=default_job())
        config = run_configs.get(request.job_name)
        report.runs.append(execute_request(defs, instance, request, tags, config))
    return report


class SensorTicker:
    """Ticks one sensor of a code location and executes its run requests in process."""

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        name: str,
        state: Path,
        run_configs: dict[str, dict] | None = None,
    ):
        self.defs, self.instance, self.name = defs, instance, name
        self.sensor = defs.resolve_sensor_def(name)
        self.cursor_path = state / f"{name}.cursor.json"
        self.run_configs = run_configs or {}

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
        report = execute_once(
            self.defs,
            self.instance,
            result.run_requests,
            lambda: self.sensor.job_name,
            {"dagster/sensor_name": self.name},
            self.run_configs,
        )
        if result.cursor is not None:
            self.cursor_path.parent.mkdir(parents=True, exist_ok=True)
            self.cursor_path.write_text(result.cursor)
        return report


class ScheduleTicker:
    """Ticks one schedule at given simulated times and executes what it requests in process."""

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        name: str,
        run_configs: dict[str, dict] | None = None,
    ):
        self.defs, self.instance, self.name = defs, instance, name
        self.schedule = defs.resolve_schedule_def(name)
        self.run_configs = run_configs or {}

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
        return execute_once(
            self.defs,
            self.instance,
            data.run_requests or [],
            lambda: self.schedule.job_name,
            {"dagster/schedule_name": self.name},
            self.run_configs,
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
    ):
        self.defs, self.instance = defs, instance
        self.land, self.deliver_labels = land, deliver_labels
        self.run_configs = run_configs or {}
        tick = {"state": state, "run_configs": self.run_configs}
        self.landing = SensorTicker(defs, instance, "landing_sensor", **tick)
        self.inbox = SensorTicker(defs, instance, "inbox_sensor", **tick)
        self.monitors = [SensorTicker(defs, instance, n, **tick) for n in MONITORING_SENSORS]
        self.schedule = ScheduleTicker(defs, instance, "retraining_schedule", self.run_configs)
        self.retraining = False

    def day(self, day: date) -> TickReport:
        """Land the day and let the pipeline react: ingest, score, monitor, label, retrain."""
        self.land(day)
        report = self.landing.tick()
        # What label_export_schedule launches at the end of the day, for that day.
        export = dg.RunRequest(job_name="label_export_job", partition_key=day.isoformat())
        tags = {"dagster/schedule_name": "label_export_schedule"}
        report.runs.append(execute_request(self.defs, self.instance, export, tags))
        self.deliver_labels(day)
        tickers = [self.inbox, *self.monitors] if self.retraining else [self.inbox]
        for ticker in tickers:
            report.extend(ticker.tick())
        if self.retraining:
            # The night after `day`: the weekly schedule's ticks up to the next day's landing.
            night = datetime.combine(day, datetime.min.time(), tzinfo=UTC) + timedelta(days=1)
            for moment in self.schedule.due(night, night + timedelta(days=1)):
                report.extend(self.schedule.tick(moment))
        return report

    def retrain(self, trigger: str, event_day: date) -> RunSummary:
        """An operator's retraining run: dataset, challenger, evaluation, promotion gate."""
        request = dg.RunRequest(job_name=RETRAINING_JOB)
        tags = {"flywheel/trigger": trigger, "flywheel/event_day": event_day.isoformat()}
        return execute_request(
            self.defs, self.instance, request, tags, self.run_configs.get(RETRAINING_JOB)
        )

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
