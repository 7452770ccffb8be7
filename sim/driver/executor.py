"""Run requests executed in process, as the daemon's run launcher and run monitoring would.

Before every run, runs whose process died (a SIGKILL, the OOM killer) are failed with the
reason, their pool slots freed, and retried as the instance's `run_retries` allow; then the run
waits for a pool slot at most `pool_wait_s` before it fails naming the run that holds it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg

from pipelines.lib.runs import fail_dead_runs, process_tags, retry_tags, wait_for_pools

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


def failure_message(events: list[dg.DagsterEvent]) -> str:
    """Each failed step of a run's step-failure `events` with the messages of its error and the
    error's causes."""
    lines = []
    for event in events:
        error = event.event_specific_data.error
        lines.append(f"step {event.step_key}:")
        while error is not None:
            lines.append(f"  {error.message.strip()}")
            error = error.cause
    return "\n".join(lines)


class RunExecutor:
    """Executes run requests in process on one instance, recovering dead runs first."""

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        run_configs: dict[str, dict] | None = None,
        pool_wait_s: float = 600.0,
    ):
        self.defs, self.instance = defs, instance
        self.run_configs = run_configs or {}
        self.pool_wait_s = pool_wait_s
        # Retries of dead runs executed since the caller last took them (`take_recovered`).
        self.recovered: list[RunSummary] = []

    def recover(self) -> list[RunSummary]:
        """Fail the runs whose process is gone, free their slots, retry them; what was retried."""
        retried = []
        for run in fail_dead_runs(self.instance):
            tags = retry_tags(self.instance, run)
            if tags is None:
                continue
            request = dg.RunRequest(
                job_name=run.job_name,
                partition_key=run.tags.get("dagster/partition"),
                asset_selection=sorted(run.asset_selection or []),
                run_config=run.run_config,
            )
            retried.append(self._execute(request, tags))
        self.recovered.extend(retried)
        return retried

    def take_recovered(self) -> list[RunSummary]:
        """The retries of dead runs executed since the last call."""
        taken, self.recovered = self.recovered, []
        return taken

    def execute(self, request: dg.RunRequest, tags: dict[str, str]) -> RunSummary:
        """Execute one run request; RunFailedError if it fails.

        The operator's run config of the job is merged over the request's own.
        """
        config = {**(request.run_config or {}), **self.run_configs.get(request.job_name, {})}
        return self._execute(request.with_replaced_attrs(run_config=config), tags)

    def _execute(self, request: dg.RunRequest, tags: dict[str, str]) -> RunSummary:
        # Every poll fails and retries dead runs first: a retry runs before the runs after it.
        wait_for_pools(self.instance, self.pool_wait_s, recover=self.recover)
        started = time.monotonic()
        result = self.defs.resolve_job_def(request.job_name).execute_in_process(
            run_config=request.run_config or None,
            instance=self.instance,
            partition_key=request.partition_key,
            asset_selection=list(request.asset_selection or []) or None,
            tags={**request.tags, **tags, **process_tags()},
            raise_on_error=False,
        )
        if not result.success:
            steps = failure_message(result.get_step_failure_events())
            raise RunFailedError(
                f"run {result.run_id} of {request.job_name} (partition {request.partition_key}) "
                f"failed; see it in the Dagster UI.\n{steps}"
            )
        return request.job_name, request.partition_key, time.monotonic() - started, result.run_id

    def execute_once(
        self, requests: list[dg.RunRequest], default_job: Callable[[], str], origin: dict[str, str]
    ) -> TickReport:
        """Execute a tick's requests as the daemon would: a run key already run by the same
        sensor or schedule (`origin` tag) is skipped; requests without a job go to
        `default_job()`."""
        report = TickReport()
        for request in requests:
            tags = {**origin, "dagster/run_key": request.run_key or ""}
            if request.run_key and self.instance.get_run_records(dg.RunsFilter(tags=tags), limit=1):
                report.skipped += 1
                continue
            if request.job_name is None:
                request = request.with_replaced_attrs(job_name=default_job())
            report.runs.append(self.execute(request, tags))
        return report
