"""The simulation driven by the real Dagster daemon: the simulator is only the outside world.

The world lands each day's files, asks the annotator service (its own process) for the day's
answers, keeps the calendar (the retraining schedule's simulated ticks) and, as the operator,
trains the first model and turns the retraining triggers on. Everything else is the stack's: the
daemon evaluates the sensors, the run queue launches every run in its own process, run
monitoring and retries deal with runs that die. The world reaches Dagster as any client does:
the instance's storage to read runs and ticks, the webserver's GraphQL API to submit runs and
start sensors.

Between two of its events the world waits until the pipeline is idle: no run queued or in
progress (a failed run the daemon will retry counts as in progress), and every running sensor has
finished a tick that began after the last change (the landing sensor, one that took what it
found: new files wait a tick for the listing to settle). So a simulated day takes as long as the
pipeline needs for it, and each day sees the same state as in process (`sim.driver.in_process`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date
from urllib.parse import urlparse

import dagster as dg

# The instance's records of sensors, schedules and their ticks (what the UI shows); Dagster
# does not export these types at its top level.
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import InstigatorStatus, TickStatus

from pipelines.defs.runs.sensors import retry_launch_failed
from pipelines.settings import DAGSTER_PASSWORD, DAGSTER_URL, DAGSTER_USER
from sim.driver.executor import RunFailedError, RunSummary, TickReport, failure_message
from sim.driver.in_process import (
    DAILY_SENSORS,
    MONITORING_SENSORS,
    RETRAINING_JOB,
    SETTLING,
    Driver,
)

LOCATION, REPOSITORY = "flywheel", "__repository__"
WEBSERVER_URL = DAGSTER_URL.name
# What a refusal adds: a login in front of the webserver asks for an operator's identity.
LOGIN = (
    f" (behind a login: {DAGSTER_USER.name} and {DAGSTER_PASSWORD.name} name an operator; "
    "the stack's stack.env has its own)"
)
IN_FLIGHT = {
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
}
# The pipeline is read once a second: the daemon's sensor loop turns every 5 s and its queue
# every 2 s, so a faster poll mostly spends the driver's CPU on Postgres reads.
POLL_S = 1.0
# How far before the last idle moment the runs are read again: a run created before it had
# finished by then (or react() would not have returned); the margin covers the clocks of the
# machines that write the runs' creation times (the instance's database) and this one.
CLOCK_MARGIN_S = 600.0

START_SENSOR = """
mutation StartSensor($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { status } }
    ... on SensorNotFoundError { message }
    ... on UnauthorizedError { message }
    ... on PythonError { message }
  }
}
"""


class DaemonDriveError(RuntimeError):
    """The stack cannot drive the simulation: unreachable, misconfigured, or stalled."""


class Webserver:
    """The Dagster webserver's GraphQL API, as the world (an operator, a client) uses it."""

    def __init__(self, url: str, auth: tuple[str, str] | None = None):
        """`auth`: the user and password a login in front of the webserver asks for (the
        stack's: deploy/stack/proxy.py); HTTPS is checked as REQUESTS_CA_BUNDLE says."""
        from dagster_graphql import DagsterGraphQLClient
        from requests.auth import HTTPBasicAuth

        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise DaemonDriveError(f"{WEBSERVER_URL}={url!r} is not an http(s) URL")
        self.url = url.rstrip("/")
        self.auth = HTTPBasicAuth(*auth) if auth else None
        self.client = DagsterGraphQLClient(
            parsed.hostname,
            port_number=parsed.port,
            use_https=parsed.scheme == "https",
            auth=self.auth,
        )

    def launch(self, job: str, tags: dict[str, str], run_config: dict) -> str:
        """Submit a run of `job` to the queue; its run id."""
        from dagster_graphql import DagsterGraphQLClientError

        try:
            return self.client.submit_job_execution(
                job,
                repository_location_name=LOCATION,
                repository_name=REPOSITORY,
                run_config=run_config,
                tags=tags,
            )
        except DagsterGraphQLClientError as e:
            raise DaemonDriveError(
                f"the webserver {self.url} refused a run of {job}: {e}{LOGIN}"
            ) from e

    def start_sensor(self, name: str) -> None:
        """Turn sensor `name` on (what the toggle in the UI does)."""
        import requests

        selector = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY}
        try:
            response = requests.post(
                f"{self.url}/graphql",
                json={
                    "query": START_SENSOR,
                    "variables": {"selector": {**selector, "sensorName": name}},
                },
                auth=self.auth,
                timeout=60,
            )
            response.raise_for_status()
        except requests.RequestException as e:
            raise DaemonDriveError(f"the webserver {self.url} ({WEBSERVER_URL}): {e}{LOGIN}") from e
        result = response.json().get("data", {}).get("startSensor") or {}
        if result.get("__typename") != "Sensor":
            raise DaemonDriveError(
                f"could not start sensor {name}: {result.get('message') or response.text}"
            )


class DaemonDriver(Driver):
    """Plays the days through a running stack: the daemon reacts, the world waits for it."""

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        webserver: Webserver,
        land: Callable[[date], None],
        deliver_labels: Callable[[date], None],
        run_configs: dict[str, dict] | None = None,
        timeout_s: float = 1800.0,
        cadence_days: int | None = None,
    ):
        land, deliver_labels = self._changing(land), self._changing(deliver_labels)
        super().__init__(defs, instance, land, deliver_labels, cadence_days)
        self.webserver, self.timeout_s = webserver, timeout_s
        self.run_configs = run_configs or {}
        self.started = time.time()
        self.reported: set[str] = set()
        self.last_change = self.started
        # Runs created before this are finished and reported: each poll reads only the newer
        # ones, so a year's polls do not read a year's runs each.
        self.horizon = self.started
        running = self._states(InstigatorType.SCHEDULE)
        if running:
            raise DaemonDriveError(
                f"schedule {', '.join(running)} is running on this instance: the daemon would tick "
                "it on today's calendar, while the simulation keeps its own; stop it in the UI"
            )
        self._start(DAILY_SENSORS)

    def _changing(self, event: Callable[[date], None]) -> Callable[[date], None]:
        """`event`, after which only the sensors' later ticks count: one that began while the
        event was under way may have listed before its files were there."""

        def changed(day: date) -> None:
            event(day)
            self.last_change = time.time()

        return changed

    @Driver.retraining.setter
    def retraining(self, on: bool) -> None:
        if on:
            self._start(MONITORING_SENSORS)
        self._retraining = on

    def _states(self, kind: InstigatorType) -> dict[str, object]:
        """The running sensors or schedules of the instance, by name."""
        return {
            state.instigator_name: state
            for state in self.instance.all_instigator_state(instigator_type=kind)
            if state.status == InstigatorStatus.RUNNING
        }

    def _start(self, names: tuple[str, ...]) -> None:
        running = self._states(InstigatorType.SENSOR)
        for name in names:
            if name not in running:
                self.webserver.start_sensor(name)
        self.last_change = time.time()
        self.react()

    def _records(self) -> list[dg.RunRecord]:
        filters = dg.RunsFilter(created_after=_utc(self.horizon))
        return list(reversed(self.instance.get_run_records(filters)))

    def _pending(self, records: list[dg.RunRecord]) -> list[str]:
        """What the pipeline is still doing: runs in flight, failed runs due for a retry, and
        the pipeline's sensors without a finished tick since the last change; a failed run that
        will not be retried, or a failed tick, is an error."""
        parents = {r.dagster_run.tags.get("dagster/parent_run_id") for r in records}
        pending, last_end = [], self.last_change
        for record in records:
            run = record.dagster_run
            if run.status in IN_FLIGHT:
                pending.append(f"run {run.run_id} of {run.job_name} ({run.status.value})")
            elif run.status == dg.DagsterRunStatus.FAILURE and run.run_id not in parents:
                if run.tags.get("dagster/will_retry") == "true":
                    pending.append(f"the retry of failed run {run.run_id} of {run.job_name}")
                elif retry_launch_failed(self.instance, run):
                    # Dagster could not launch it (the code server was down): the missed-retry
                    # sensor asks for it once the code location is back.
                    pending.append(f"the missed retry of failed run {run.run_id} of {run.job_name}")
                else:
                    raise RunFailedError(self._failure(run))
            last_end = max(last_end, record.end_time or 0)
        if pending:  # the sensors' ticks matter once no run is left
            return pending
        for name, state in self._states(InstigatorType.SENSOR).items():
            if name not in (*DAILY_SENSORS, *MONITORING_SENSORS):
                continue  # not one the days move: missed_retry_sensor ticks once a minute
            ticks = self.instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
            tick = ticks[0] if ticks else None
            if tick is not None and tick.status == TickStatus.FAILURE and tick.timestamp > last_end:
                error = tick.error.to_string() if tick.error else "no error recorded"
                raise DaemonDriveError(f"sensor {name}'s tick failed:\n{error}")
            if tick is None or tick.status == TickStatus.STARTED or tick.timestamp <= last_end:
                pending.append(f"a tick of sensor {name}")
            # The tick's own cursor: the daemon stores a finished tick before the sensor's state.
            elif not SETTLING.get(name, lambda _: True)(tick.cursor):
                pending.append(f"a tick of sensor {name} once its new files have settled")
        # A tick that requested runs after `records` were read looks finished and idle.
        if not pending and {r.dagster_run.run_id for r in self._records()} != {
            r.dagster_run.run_id for r in records
        }:
            pending.append("the runs requested while the pipeline was being read")
        return pending

    def _failure(self, run: dg.DagsterRun) -> str:
        events = [
            entry.dagster_event
            for entry in self.instance.all_logs(
                run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE
            )
            if entry.dagster_event is not None
        ]
        reason = run.tags.get("dagster/failure_reason", "")
        return (
            f"run {run.run_id} of {run.job_name} (partition {run.tags.get('dagster/partition')}) "
            f"failed{f' ({reason})' if reason else ''} and will not be retried; see it in the "
            f"Dagster UI.\n{failure_message(events)}"
        )

    def react(self) -> TickReport:
        """Wait until the pipeline is idle; the runs that succeeded since the last call."""
        deadline = time.monotonic() + self.timeout_s
        while pending := self._pending(self._records()):
            if time.monotonic() > deadline:
                raise DaemonDriveError(
                    f"the pipeline was still busy after {self.timeout_s:.0f} s: "
                    + "; ".join(pending)
                )
            time.sleep(POLL_S)
        idle_since = time.time()
        report = TickReport()
        for record in self._records():
            run = record.dagster_run
            if run.run_id in self.reported or run.status != dg.DagsterRunStatus.SUCCESS:
                continue
            self.reported.add(run.run_id)
            seconds = (record.end_time or 0) - (record.start_time or 0)
            report.runs.append(
                (run.job_name, run.tags.get("dagster/partition"), seconds, run.run_id)
            )
        self.horizon = max(self.horizon, idle_since - CLOCK_MARGIN_S)
        self.last_change = time.time()
        return report

    def submit(self, requests: list[dg.RunRequest], origin: dict[str, str]) -> TickReport:
        """Submit what the calendar's tick requested to the queue, each run key once."""
        for request in requests:
            tags = {**origin, **request.tags, "dagster/run_key": request.run_key or ""}
            keyed = {**origin, "dagster/run_key": request.run_key or ""}
            if request.run_key and self.instance.get_run_records(
                dg.RunsFilter(tags=keyed), limit=1
            ):
                continue
            config = {**(request.run_config or {}), **self.run_configs.get(request.job_name, {})}
            self.webserver.launch(request.job_name or RETRAINING_JOB, tags, config)
        self.last_change = time.time()
        return TickReport()

    def retrain(self, trigger: str, event_day: date) -> RunSummary:
        tags = {"flywheel/trigger": trigger, "flywheel/event_day": event_day.isoformat()}
        run_id = self.webserver.launch(
            RETRAINING_JOB, tags, self.run_configs.get(RETRAINING_JOB, {})
        )
        self.last_change = time.time()
        for summary in self.react().runs:
            # The run itself, or its retry if run monitoring failed it.
            run = self.instance.get_run_by_id(summary[3])
            if run is not None and run_id in (run.run_id, run.tags.get("dagster/root_run_id")):
                return summary
        raise DaemonDriveError(f"the operator's retraining run {run_id} did not succeed")


def webserver_from_env() -> Webserver:
    """The webserver named by FLYWHEEL_DAGSTER_URL (the stack writes it to its stack.env)."""
    url = DAGSTER_URL.get()
    if not url:
        raise DaemonDriveError(
            f"--daemon needs {WEBSERVER_URL}, the Dagster webserver's URL: start the stack "
            "(make stack-up) and run with its settings (make stack-flywheel)"
        )
    user = DAGSTER_USER.get()
    return Webserver(url, (user, DAGSTER_PASSWORD.get() or "") if user else None)


def _utc(timestamp: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, tz=UTC)
