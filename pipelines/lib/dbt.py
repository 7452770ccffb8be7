"""The dbt project as Dagster sees it, and how its nodes map to asset keys and groups."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagster_dbt import DagsterDbtTranslator, DagsterDbtTranslatorSettings, DbtProject

DBT_PROJECT_DIR = Path(__file__).resolve().parents[2] / "dbt_project"

dbt_project = DbtProject(project_dir=DBT_PROJECT_DIR, profiles_dir=DBT_PROJECT_DIR)
# Under `dagster dev` the manifest is re-parsed on load; elsewhere `make setup` prepares it.
dbt_project.prepare_if_dev()


class FlywheelDbtTranslator(DagsterDbtTranslator):
    """dbt models land in the `warehouse` group; tests become asset checks (errors block)."""

    def __init__(self) -> None:
        super().__init__(settings=DagsterDbtTranslatorSettings(enable_asset_checks=True))

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        if dbt_resource_props["resource_type"] == "source":
            return super().get_group_name(dbt_resource_props)
        return "warehouse"
