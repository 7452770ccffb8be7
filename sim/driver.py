"""The main job: advance the world day by day and let the pipeline react as in production.

Each simulated day lands its files; `landing_sensor` is ticked against the real Dagster instance
(DAGSTER_HOME) and the runs it requests are executed there; the day's label export runs as
`label_export_schedule` launches it; the annotators answer; `inbox_sensor` imports the labels.
Runs carry the tags a daemon-launched run would, so they show in the Dagster UI as such.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import dagster as dg


class RunFailedError(RuntimeError):
    """A requested run failed; the message names the run and its failing steps' errors."""


@dataclass
class TickReport:
    """The runs a day requested: (job, partition, seconds) each, and requests already run."""

    runs: list[tuple[str, str | None, float]] = field(default_factory=list)
    skipped: int = 0


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
) -> tuple[str, str | None, float]:
    """Execute one run request in process on the instance; RunFailedError if it fails."""
    started = time.monotonic()
    result = defs.resolve_job_def(request.job_name).execute_in_process(
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
    return request.job_name, request.partition_key, time.monotonic() - started


class SensorTicker:
    """Ticks one sensor of a code location and executes its run requests in process."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance, name: str, state: Path):
        self.defs, self.instance, self.name = defs, instance, name
        self.sensor = defs.resolve_sensor_def(name)
        self.cursor_path = state / f"{name}.cursor.json"

    def _already_ran(self, run_key: str) -> bool:
        tags = {"dagster/sensor_name": self.name, "dagster/run_key": run_key}
        return bool(self.instance.get_run_records(dg.RunsFilter(tags=tags), limit=1))

    def tick(self) -> TickReport:
        """Evaluate the sensor once, execute what it requests, then store its new cursor."""
        cursor = self.cursor_path.read_text() if self.cursor_path.exists() else None
        context = dg.build_sensor_context(
            instance=self.instance,
            cursor=cursor,
            definitions=self.defs,
            resources=self.defs.resources,
            sensor_name=self.name,
        )
        result = self.sensor.evaluate_tick(context)
        report = TickReport()
        for request in result.run_requests:
            if request.run_key and self._already_ran(request.run_key):
                report.skipped += 1
                continue
            if request.job_name is None:
                request = request.with_replaced_attrs(job_name=self.sensor.job_name)
            tags = {"dagster/sensor_name": self.name, "dagster/run_key": request.run_key or ""}
            report.runs.append(execute_request(self.defs, self.instance, request, tags))
        if result.cursor is not None:
            self.cursor_path.parent.mkdir(parents=True, exist_ok=True)
            self.cursor_path.write_text(result.cursor)
        return report


def warehouse_summary(defs: dg.Definitions) -> dict[str, int]:
    """Row counts of the main warehouse tables, read through the warehouse resource."""
    counts = defs.resources["warehouse"].query(
        "select (select count(*) from raw.flights) as raw_flights, "
        "(select count(*) from raw.quarantine) as quarantined_rows, "
        "(select count(*) from fct_flight_features) as flight_features, "
        "(select count(*) from raw.label_tasks) as label_tasks, "
        "(select count(*) from raw.flight_labels) as labels"
    )
    return {k: int(v) for k, v in json.loads(counts.to_json(orient="records"))[0].items()}


class FlywheelDriver:
    """Plays simulated days: the world lands files and answers labels, the pipeline reacts."""

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        state: Path,
        land: Callable[[date], None],
        deliver_labels: Callable[[date], None],
    ):
        self.defs, self.instance = defs, instance
        self.land, self.deliver_labels = land, deliver_labels
        self.landing = SensorTicker(defs, instance, "landing_sensor", state)
        self.inbox = SensorTicker(defs, instance, "inbox_sensor", state)

    def day(self, day: date) -> TickReport:
        """Land the day, ingest it, export its label tasks, receive and import labels."""
        self.land(day)
        report = self.landing.tick()
        # What label_export_schedule launches at the end of the day, for that day.
        export = dg.RunRequest(job_name="label_export_job", partition_key=day.isoformat())
        tags = {"dagster/schedule_name": "label_export_schedule"}
        report.runs.append(execute_request(self.defs, self.instance, export, tags))
        self.deliver_labels(day)
        inbox = self.inbox.tick()
        report.runs.extend(inbox.runs)
        report.skipped += inbox.skipped
        return report

    def dataset(self) -> dict[str, str]:
        """Cut a versioned training dataset from every label so far; its DVC hash and path."""
        request = dg.RunRequest(job_name="dataset_job")
        execute_request(self.defs, self.instance, request, {"flywheel/trigger": "main job"})
        event = self.instance.get_latest_materialization_event(dg.AssetKey("training_dataset"))
        metadata = event.asset_materialization.metadata
        return {k: str(metadata[k].value) for k in ("dvc_hash", "pointer", "dagster/row_count")}

    def train(self) -> dict[str, str]:
        """Tune, refit and register a challenger on the latest dataset; what it reports."""
        request = dg.RunRequest(job_name="training_job")
        execute_request(self.defs, self.instance, request, {"flywheel/trigger": "main job"})
        event = self.instance.get_latest_materialization_event(dg.AssetKey("challenger_model"))
        metadata = event.asset_materialization.metadata
        return {k: str(v.value) for k, v in metadata.items() if not k.startswith("dagster/")}
