"""dbt models as assets: daily models per landing-day partition, the rest unpartitioned."""

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import dagster as dg
from dagster_dbt import DbtCliResource, dbt_assets

from pipelines.lib.dbt import (
    FlywheelDbtTranslator,
    build_command,
    date_window_env,
    dbt_project,
    stream_and_keep_parse_state,
)
from pipelines.lib.partitions import landing_partitions
from pipelines.lib.warehouse import WAREHOUSE_POOL, Warehouse
from pipelines.lib.wiring import parsed_manifest
from pipelines.task.contracts import TaskSpec

DAILY_TAG = "daily"
TRAINING_TAG = "training"
# The dbt tests of the project's own macros, whatever the task.
MACRO_TESTS = "path:tests"


def build_dbt_assets(
    task: TaskSpec,
) -> tuple[dg.AssetsDefinition, dg.AssetsDefinition, dg.AssetsDefinition]:
    """The daily-partitioned models, those over dimension tables and labels, and training marts
    of `task`: the models tagged with its name (its folder under `dbt_project/models/`)."""
    own = f"tag:{task.name}"
    daily, training = f"{own},tag:{DAILY_TAG}", f"{own},tag:{TRAINING_TAG}"

    @dbt_assets(
        manifest=dbt_project.manifest_path,
        select=daily,
        # Tests tagged `training` run in the training build, not in every day's, even where a
        # daily model is one of their parents (the labels' relationship to the examples).
        exclude=f"tag:{TRAINING_TAG}",
        name="daily_dbt_models",
        partitions_def=landing_partitions(task),
        backfill_policy=dg.BackfillPolicy.single_run(),
        dagster_dbt_translator=FlywheelDbtTranslator(task.name),
        pool=WAREHOUSE_POOL,
    )
    def daily_dbt_models(
        context: dg.AssetExecutionContext, dbt: DbtCliResource, warehouse: Warehouse
    ):
        """Build and test the daily models for the run's landing days only (incremental)."""
        warehouse.wait_until_free()
        window = context.partition_time_window
        with first_build_serialised(warehouse, incremental_models(task.name, DAILY_TAG)):
            # The window goes in the environment, not --vars: changed vars re-parse the project.
            with date_window_env(window.start.date(), window.end.date()):
                invocation = dbt.cli(build_command(), context=context)
            yield from stream_and_keep_parse_state(invocation)

    @dbt_assets(
        manifest=dbt_project.manifest_path,
        select=f"{own} {MACRO_TESTS}",
        exclude=f"tag:{DAILY_TAG} tag:{TRAINING_TAG}",
        name="dimension_dbt_models",
        dagster_dbt_translator=FlywheelDbtTranslator(task.name),
        pool=WAREHOUSE_POOL,
    )
    def dimension_dbt_models(
        context: dg.AssetExecutionContext, dbt: DbtCliResource, warehouse: Warehouse
    ):
        """Build and test the models over dimension tables and labels."""
        warehouse.wait_until_free()
        yield from stream_and_keep_parse_state(dbt.cli(build_command(), context=context))

    @dbt_assets(
        manifest=dbt_project.manifest_path,
        select=training,
        name="training_dbt_models",
        dagster_dbt_translator=FlywheelDbtTranslator(task.name),
        pool=WAREHOUSE_POOL,
    )
    def training_dbt_models(
        context: dg.AssetExecutionContext, dbt: DbtCliResource, warehouse: Warehouse
    ):
        """Build and test the marts that training datasets are cut from (all labelled days)."""
        warehouse.wait_until_free()
        yield from stream_and_keep_parse_state(dbt.cli(build_command(), context=context))

    return daily_dbt_models, dimension_dbt_models, training_dbt_models


@cache
def incremental_models(task_name: str, tag: str) -> tuple[str, ...]:
    """The relations of the incremental models of task `task_name` tagged `tag`."""
    manifest = parsed_manifest()
    return tuple(
        node["alias"]
        for node in manifest["nodes"].values()
        if node["resource_type"] == "model"
        and {task_name, tag} <= set(node["tags"])
        and node["config"]["materialized"] == "incremental"
    )


@contextmanager
def first_build_serialised(warehouse: Warehouse, relations: tuple[str, ...]) -> Iterator[None]:
    """Around a daily build: while one of the incremental `relations` does not exist yet, the
    builds that would create it go one at a time (two creating a table at once fail; once it
    exists, builds of different days run at once and each model locks its days)."""
    with warehouse.connect() as con:
        exists = all(con.has_relation(r) for r in relations)
    if exists:
        yield
        return
    with warehouse.exclusive("flywheel/dbt/first-build"):
        yield
