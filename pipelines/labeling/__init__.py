"""Labeling, in one room: the protocol and its Dagster side.

- `spec`: the task's labeling protocol (its `labels` section); `selection`: which examples to ask
  for; `label_studio`: batches going out; `annotations`: exports coming back, item by item;
- `label_exchange`: the resource that carries them (files, or a Label Studio server through
  `label_studio_api`); `export_import`: a day's export and import in the warehouse;
- `assets` and `triggers`: the label export and import assets, and the sensors that run them.
"""

from pipelines.labeling.annotations import parse_label_studio_export
from pipelines.labeling.label_studio import (
    REJECTED_COLUMNS,
    accepted_columns,
    batch_manifest,
    label_studio_tasks,
    render_json,
)
from pipelines.labeling.selection import select_for_labeling
from pipelines.labeling.spec import LabelingSpec

__all__ = [
    "REJECTED_COLUMNS",
    "LabelingSpec",
    "accepted_columns",
    "batch_manifest",
    "label_studio_tasks",
    "parse_label_studio_export",
    "render_json",
    "select_for_labeling",
]
