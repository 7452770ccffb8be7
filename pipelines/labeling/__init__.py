"""Labeling's rules: the protocol, the choice of examples, and what goes out and comes back.

- `spec`: the task's labeling protocol (its `labels` section); `selection`: which examples to ask
  for; `label_studio`: batches going out; `annotations`: exports coming back, item by item;
  `outcomes`: outcomes files coming back, row by row;
- `label_exchange`: the resource that carries them (files, or a Label Studio server through
  `label_studio_api`); `export_import`: a day's export and import in the warehouse.

The assets and sensors that run them are Dagster's: `pipelines/defs/labeling/`.
"""

from pipelines.labeling.annotations import parse_label_studio_export
from pipelines.labeling.selection import select_for_labeling
from pipelines.labeling.spec import LabelingSpec
from pipelines.lib.label_studio import (
    REJECTED_COLUMNS,
    accepted_columns,
    batch_manifest,
    label_studio_tasks,
    render_json,
)

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
