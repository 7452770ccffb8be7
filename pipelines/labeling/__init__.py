"""The labeling protocol: choosing flights to label, Label Studio batches, importing answers."""

from pipelines.labeling.annotations import parse_label_studio_export
from pipelines.labeling.label_studio import (
    ACCEPTED_COLUMNS,
    FROM_NAME,
    LABEL_CHOICES,
    REJECTED_COLUMNS,
    SEGMENT_TYPES,
    TO_NAME,
    batch_manifest,
    label_studio_tasks,
    render_json,
)
from pipelines.labeling.selection import select_for_labeling

__all__ = [
    "ACCEPTED_COLUMNS",
    "FROM_NAME",
    "LABEL_CHOICES",
    "REJECTED_COLUMNS",
    "SEGMENT_TYPES",
    "TO_NAME",
    "batch_manifest",
    "label_studio_tasks",
    "parse_label_studio_export",
    "render_json",
    "select_for_labeling",
]
