"""The simulation: advance the world day by day and let the pipeline react as in production.

Each simulated day lands its files and the annotators answer; between two such events the
pipeline reacts. `FlywheelDriver` is its own daemon: it ticks the sensors against the Dagster
instance of DAGSTER_HOME and executes the runs they request there, in process, with the tags a
daemon-launched run would carry, so they show in the Dagster UI as such. `daemon` drives the
same days through a real daemon, run queue and a process per run.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg

from pipelines.defs.monitoring.triggers import EVENT_DAY_TAG, TRIGGER_TAG
from pipelines.lib.asset_keys import task_key
from pipelines.lib.landing_zone import landing_settled
from pipelines.lib.runs import RETRAINING_JOB, task_of
from pipelines.task.thresholds import ALARMS, Trigger
from sim.driver.executor import RunExecutor, RunSummary, TickReport
from sim.judge.alarms import CADENCE_TRIGGER

# Sensors whose cursor can hold changes taken at their next evaluation, once what they list has
# settled: the daemon evaluates them again an interval later; in process, nothing lands between.
SETTLING: dict[str, Callable[[str | None], bool]] = {"landing_sensor": landing_settled}


class SensorTicker:
    """Ticks one sensor of a code location and executes its run requests in process."""

    def __init__(self, executor: RunExecutor, name: str, state: Path):
        self.executor, self.name = executor, name
        self.defs, self.instance = executor.defs, executor.instance
        self.sensor = self.defs.resolve_sensor_def(name)
        # The resources this sensor asks for, as the daemon builds them: building every resource
        # of the code location at every tick would add to every simulated day for nothing.
        needed = self.sensor.required_resource_keys
        self.resources = {k: v for k, v in (self.defs.resources or {}).items() if k in needed}
        self.cursor_path = state / f"{name}.cursor.json"

    def tick(self) -> TickReport:
        """Evaluate the sensor, execute what it requests, then store its new cursor; once more
        if the cursor holds changes waiting to settle."""
        report = self._evaluate()
        settled = SETTLING.get(self.name)
        if settled is not None and not settled(self._cursor()):
            report.extend(self._evaluate())
        return report

    def _cursor(self) -> str | None:
        return self.cursor_path.read_text() if self.cursor_path.exists() else None

    def _evaluate(self) -> TickReport:
        cursor = self._cursor()
        # Closing the context tears its resources down.
        with dg.build_sensor_context(
            instance=self.instance,
            cursor=cursor,
            definitions=self.defs,
            resources=self.resources,
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
    """One schedule of a code location, evaluated at given simulated times."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance, name: str):
        self.defs, self.instance, self.name = defs, instance, name
        self.schedule = defs.resolve_schedule_def(name)
        self.origin = {"dagster/schedule_name": name}

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

    def requests(self, moment: datetime) -> list[dg.RunRequest]:
        """What the schedule requests when evaluated as at `moment`, as the daemon would."""
        # The context opens its own instance from ours; closing it disposes of that instance
        # (left open, its eventual garbage collection would reset Dagster's current-instance
        # state in whatever code runs at that moment).
        with dg.build_schedule_context(
            instance=self.instance, scheduled_execution_time=moment, resources=self.defs.resources
        ) as context:
            data = self.schedule.evaluate_tick(context)
        job = self.schedule.job_name
        return [
            r if r.job_name else r.with_replaced_attrs(job_name=job)
            for r in data.run_requests or []
        ]


DAILY_SENSORS = ("landing_sensor", "label_export_sensor", "inbox_sensor")
MONITORING_SENSORS = tuple(t.definition_name for t in ALARMS)
RETRAINING_SCHEDULE = Trigger.SCHEDULE.definition_name


class Driver:
    """Plays simulated days: the world lands files, answers labels and keeps the calendar; the
    pipeline reacts between two of its events (`react`), as its sensors ask.

    A day: its files land; the annotators deliver the day's answers; in the night after it, the
    retraining schedule's ticks (the simulated calendar: a day passes in seconds, so no real
    cron could tick it). The retraining triggers (the monitoring sensors and the schedule) are on
    once `retraining` is: an operator trains the first model (`retrain`), then turns them on.
    Which of them request a retraining is the code location's `monitoring.retrain_on` (a policy
    of sim.driver.policies sets it); the others watch. With
    `cadence_days`, the calendar also retrains at the end of every `cadence_days`-th day from
    `production_start` (the first day the first model scored).
    """

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        land: Callable[[date], None],
        deliver_labels: Callable[[date], None],
        cadence_days: int | None = None,
    ):
        self.defs, self.instance = defs, instance
        # The task whose code location `defs` is: its runs and assets carry its name.
        self.task_name = task_of(defs)
        self.land, self.deliver_labels = land, deliver_labels
        self.schedule = ScheduleTicker(defs, instance, RETRAINING_SCHEDULE)
        self._retraining = False
        if cadence_days is not None and cadence_days < 1:
            raise ValueError(f"cadence_days must be >= 1, got {cadence_days}")
        self.cadence_days = cadence_days
        self.production_start: date | None = None

    def partition_end(self, day: date) -> date:
        """The first day after the landing partition holding `day` (the day after, if daily)."""
        partitions = self.defs.resolve_job_def("daily_warehouse_job").partitions_def
        key = partitions.get_partition_key_for_timestamp(
            datetime.combine(day, datetime.min.time(), tzinfo=UTC).timestamp()
        )
        return partitions.time_window_for_partition_key(key).end.date()

    @property
    def retraining(self) -> bool:
        """Whether the retraining triggers are on."""
        return self._retraining

    @retraining.setter
    def retraining(self, on: bool) -> None:
        self._retraining = on

    def react(self) -> TickReport:
        """Let the pipeline react to the world's last event, until it has nothing left to do."""
        raise NotImplementedError

    def submit(self, requests: list[dg.RunRequest], origin: dict[str, str]) -> TickReport:
        """Run what a trigger requested (each run key once per trigger, named in `origin`)."""
        raise NotImplementedError

    def finish(self, report: TickReport) -> TickReport:
        """The day's report, once its events are over."""
        return report

    def day(self, day: date) -> TickReport:
        """Land the day and let the pipeline react: ingest, score, monitor, label, retrain."""
        self.land(day)
        report = self.react()
        self.deliver_labels(day)
        report.extend(self.react())
        if self.retraining:
            # From the end of `day`'s partition (when it lands) up to the next one's landing:
            # the weekly schedule's ticks in between.
            ends = self.partition_end(day)
            night = datetime.combine(ends, datetime.min.time(), tzinfo=UTC)
            following = datetime.combine(self.partition_end(ends), datetime.min.time(), tzinfo=UTC)
            for moment in self.schedule.due(night, following):
                report.extend(self.submit(self.schedule.requests(moment), self.schedule.origin))
                report.extend(self.react())
        if self.retraining and self.cadence_due(day):
            report.extend(self.submit([self.cadence_request(day)], self.cadence_origin))
            report.extend(self.react())
        return self.finish(report)

    def cadence_due(self, day: date) -> bool:
        """Whether the fixed cadence retrains in the night after `day`: `cadence_days` days
        of production have passed since the first model, or since its last tick."""
        if self.cadence_days is None or self.production_start is None:
            return False
        played = (day - self.production_start).days + 1
        return played > 0 and played % self.cadence_days == 0

    @property
    def cadence_origin(self) -> dict[str, str]:
        """The tag that marks the runs the fixed cadence requested (each of its run keys once,
        after a kill too)."""
        return {"flywheel/cadence": f"every-{self.cadence_days}d"}

    def cadence_request(self, day: date) -> dg.RunRequest:
        """The fixed cadence's retraining on the labels up to `day`."""
        return dg.RunRequest(
            job_name=RETRAINING_JOB,
            run_key=f"cadence:{day.isoformat()}",
            tags={TRIGGER_TAG: CADENCE_TRIGGER, EVENT_DAY_TAG: day.isoformat()},
        )

    def retrain(self, trigger: str, event_day: date) -> RunSummary:
        """An operator's retraining run: dataset, challenger, evaluation, promotion gate."""
        raise NotImplementedError

    def decision(self, run_id: str) -> dict[str, str]:
        """What the promotion gate decided in retraining run `run_id`, on which versions."""
        records = self.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=task_key(self.task_name, "champion_model")), limit=20
        ).records
        for record in records:
            if record.run_id == run_id and record.asset_materialization is not None:
                metadata = record.asset_materialization.metadata
                return {k: str(v.value) for k, v in metadata.items()}
        return {}


class FlywheelDriver(Driver):
    """The driver that is its own daemon: it ticks the sensors and executes their runs in
    process, on the instance of DAGSTER_HOME."""

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        state: Path,
        land: Callable[[date], None],
        deliver_labels: Callable[[date], None],
        run_configs: dict[str, dict] | None = None,
        pool_wait_s: float = 600.0,
        cadence_days: int | None = None,
    ):
        super().__init__(defs, instance, land, deliver_labels, cadence_days)
        self.executor = RunExecutor(defs, instance, run_configs, pool_wait_s)
        self.daily = [SensorTicker(self.executor, n, state) for n in DAILY_SENSORS]
        self.monitors = [SensorTicker(self.executor, n, state) for n in MONITORING_SENSORS]
        # At start-up, as the daemon's run monitoring would: runs left by a killed process.
        self.executor.recover()

    def react(self) -> TickReport:
        """Tick every sensor that is on, executing what it requests, until a whole round
        requests nothing: what the daemon does between two events of the world."""
        report = TickReport()
        while True:
            round_ = TickReport()
            for ticker in [*self.daily, *(self.monitors if self.retraining else [])]:
                round_.extend(ticker.tick())
            report.extend(round_)
            if not round_.runs:
                return report

    def submit(self, requests: list[dg.RunRequest], origin: dict[str, str]) -> TickReport:
        return self.executor.execute_once(requests, lambda: RETRAINING_JOB, origin)

    def finish(self, report: TickReport) -> TickReport:
        report.runs[:0] = self.executor.take_recovered()
        return report

    def retrain(self, trigger: str, event_day: date) -> RunSummary:
        request = dg.RunRequest(job_name=RETRAINING_JOB)
        tags = {"flywheel/trigger": trigger, "flywheel/event_day": event_day.isoformat()}
        return self.executor.execute(request, tags)
