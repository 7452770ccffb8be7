"""The dbt project as Dagster sees it, and how its nodes map to asset keys and groups."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagster_dbt import (
    DagsterDbtTranslator,
    DagsterDbtTranslatorSettings,
    DbtCliResource,
    DbtProject,
)

DBT_PROJECT_DIR = Path(__file__).resolve().parents[2] / "dbt_project"

dbt_project = DbtProject(project_dir=DBT_PROJECT_DIR, profiles_dir=DBT_PROJECT_DIR)


def dbt_executable() -> str:
    """The dbt of this interpreter's environment (which need not be on PATH), else PATH's."""
    for folder in (Path(sys.prefix) / "bin", Path(sys.executable).parent):
        if (folder / "dbt").exists():
            return str(folder / "dbt")
    return shutil.which("dbt") or "dbt"


# Under `dagster dev` the manifest is re-parsed on every load, so model edits show at once;
# elsewhere `make setup` parses it. (DbtProject.prepare_if_dev would look for dbt on PATH.)
if os.getenv("DAGSTER_IS_DEV_CLI"):
    DbtCliResource(project_dir=dbt_project, dbt_executable=dbt_executable()).cli(
        ["parse", "--quiet"], target_path=dbt_project.target_path
    ).wait()


class FlywheelDbtTranslator(DagsterDbtTranslator):
    """dbt models land in the `warehouse` group; tests become asset checks (errors block)."""

    def __init__(self) -> None:
        super().__init__(settings=DagsterDbtTranslatorSettings(enable_asset_checks=True))

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        if dbt_resource_props["resource_type"] == "source":
            return super().get_group_name(dbt_resource_props)
        return "warehouse"
