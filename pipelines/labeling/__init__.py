"""The labeling protocol: choosing examples to label, Label Studio batches, importing answers."""

from pipelines.labeling.annotations import parse_label_studio_export
from pipelines.labeling.label_studio import (
    REJECTED_COLUMNS,
    accepted_columns,
    batch_manifest,
    label_studio_tasks,
    render_json,
)
from pipelines.labeling.selection import select_for_labeling
from pipelines.labeling.spec import LabelingSpec, load_labeling_spec

__all__ = [
    "REJECTED_COLUMNS",
    "LabelingSpec",
    "accepted_columns",
    "batch_manifest",
    "label_studio_tasks",
    "load_labeling_spec",
    "parse_label_studio_export",
    "render_json",
    "select_for_labeling",
]
