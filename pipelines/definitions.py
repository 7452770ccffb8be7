"""The code locations: every asset, check, job, sensor and resource of a task.

`defs` serves the task the settings name (FLYWHEEL_TASK, else the default task); an attribute
named like a task (a file `pipelines/tasks/<name>.yaml`) serves that task, so `workspace.yaml`
lists one code location per task, loaded, deployed and failing separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import dagster as dg

from pipelines.defs.graph import build_asset_graph, build_automation, build_jobs
from pipelines.defs.runs.retries import retry_outages
from pipelines.lib.wiring import check_wiring
from pipelines.resources import build_resources, retraining_executor
from pipelines.settings import current_env, sensor_interval_s
from pipelines.task import load_task, task_name, task_names


def build_definitions(
    env: str | None = None,
    task_name: str | None = None,
    resources: Mapping[str, dg.ConfigurableResource] | None = None,
) -> dg.Definitions:
    """Build the definitions of `task_name` (default `pipelines.task.task_name()`) for `env`,
    with `resources` in place of the environment's own where given: each group's assets
    (pipelines.defs.graph), the jobs over them and the sensors and schedule that start them."""
    task = load_task(task_name)
    check_wiring(task)  # a model, tag or workspace entry missing: each named with its fix
    env = env or current_env()
    graph = build_asset_graph(task)
    jobs = build_jobs(task, graph, retraining_executor(env))
    sensors, schedules = build_automation(task, graph, jobs, sensor_interval_s())
    return dg.Definitions(
        # Every step rides out an outage of its services (pipelines/defs/runs/retries.py).
        assets=[retry_outages(assets) for assets in graph.all],
        jobs=jobs.all,
        schedules=schedules,
        sensors=sensors,
        resources={**build_resources(env, task.name), **(resources or {})},
        # A run's steps run in the run's own process (a pod on Kubernetes), one after the other:
        # the warehouse pool runs them one at a time anyway, and a process per step would load
        # the code location again before each, seconds of imports for steps that take less.
        executor=dg.in_process_executor,
    )


@cache
def _definitions_of(name: str) -> dg.Definitions:
    return build_definitions(task_name=name)


def __getattr__(name: str) -> dg.Definitions:
    """`defs`, or the definitions of the task `name` (built once, when first asked for)."""
    if name == "defs":
        return _definitions_of(task_name())
    if name in task_names():
        return _definitions_of(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r} (nor task {name!r})")
