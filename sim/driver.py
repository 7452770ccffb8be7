"""The main job: advance the world day by day and let the pipeline react as in production.

Each simulated day lands its files, then `landing_sensor` is ticked against the real Dagster
instance (DAGSTER_HOME) and the runs it requests are executed there, tagged as the sensor's, so
they show in the Dagster UI exactly like daemon-launched runs.
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
    """A run requested by a sensor failed; the message names the run and its failing step."""


@dataclass
class TickReport:
    """What one sensor tick requested and how its runs went."""

    runs: list[tuple[str, str | None, float]] = field(default_factory=list)  # job, partition, s
    skipped: int = 0


class SensorTicker:
    """Ticks one sensor of a code location and executes its run requests in process."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance, name: str, state: Path):
        self.defs, self.instance, self.name = defs, instance, name
        self.cursor_path = state / f"{name}.cursor.json"

    def _cursor(self) -> str | None:
        return self.cursor_path.read_text() if self.cursor_path.exists() else None

    def _already_ran(self, run_key: str) -> bool:
        tags = {"dagster/sensor_name": self.name, "dagster/run_key": run_key}
        return bool(self.instance.get_run_records(dg.RunsFilter(tags=tags), limit=1))

    def tick(self) -> TickReport:
        """Evaluate the sensor once, execute what it requests, then store its new cursor."""
        sensor = self.defs.resolve_sensor_def(self.name)
        context = dg.build_sensor_context(
            instance=self.instance,
            cursor=self._cursor(),
            definitions=self.defs,
            resources=self.defs.resources,
            sensor_name=self.name,
        )
        result = sensor.evaluate_tick(context)
        report = TickReport()
        for request in result.run_requests:
            if request.run_key and self._already_ran(request.run_key):
                report.skipped += 1
                continue
            report.runs.append(self._execute(request))
        if result.cursor is not None:
            self.cursor_path.parent.mkdir(parents=True, exist_ok=True)
            self.cursor_path.write_text(result.cursor)
        return report

    def _execute(self, request: dg.RunRequest) -> tuple[str, str | None, float]:
        started = time.monotonic()
        tags = {**request.tags, "dagster/sensor_name": self.name}
        if request.run_key:
            tags["dagster/run_key"] = request.run_key
        result = self.defs.resolve_job_def(request.job_name).execute_in_process(
            instance=self.instance,
            partition_key=request.partition_key,
            asset_selection=list(request.asset_selection or []) or None,
            tags=tags,
            raise_on_error=False,
        )
        if not result.success:
            raise RunFailedError(
                f"run {result.run_id} of {request.job_name} (partition {request.partition_key}) "
                f"failed; see it in the Dagster UI.\n{failure_message(result)}"
            )
        return request.job_name, request.partition_key, time.monotonic() - started


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


def warehouse_summary(defs: dg.Definitions) -> dict[str, int]:
    """Row counts of the main warehouse tables, read through the warehouse resource."""
    counts = defs.resources["warehouse"].query(
        "select (select count(*) from raw.flights) as raw_flights, "
        "(select count(*) from raw.weather) as raw_weather, "
        "(select count(*) from raw.quarantine) as quarantined_rows, "
        "(select count(*) from fct_flight_features) as flight_features"
    )
    return {k: int(v) for k, v in json.loads(counts.to_json(orient="records"))[0].items()}


def run_days(
    days: list[date],
    land: Callable[[date], None],
    ticker: SensorTicker,
    on_day: Callable[[date, TickReport], None],
) -> None:
    """For each day: land its files, tick the landing sensor, run what it asks for."""
    for day in days:
        land(day)
        on_day(day, ticker.tick())
