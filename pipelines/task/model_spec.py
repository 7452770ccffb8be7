"""What a task's model learns from and how it is sliced: the `model:` section of its YAML.

Another table-shaped task names its own dbt models, columns and slices here; the dataset,
training, evaluation, scoring and monitoring assets read them from this spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from ml.config import FeatureConfig
from ml.evaluation import SliceKey, bands
from pipelines.task.contracts import TaskSpec

# The training datasets' column of each label's importance weight (pipelines/labeling/selection.py).
WEIGHT_COLUMN = "sample_weight"
REQUIRED = (
    "features_table",
    "examples_table",
    "labels_view",
    "predictions_table",
    "time_column",
    "categorical",
    "numeric",
    "slices",
)
OPTIONAL = ("min_category_frequency", "importance_exponent", "label_features")


@dataclass(frozen=True)
class SliceSpec:
    """An evaluation slice: a column's values, or a numeric column cut into named bands."""

    column: str
    bands: tuple[tuple[str, float, float], ...] = ()  # (name, low, high): [low, high)

    def key(self) -> SliceKey:
        """What `ml.evaluation` groups by: the column's name, or a function naming each band."""
        if not self.bands:
            return self.column
        column, edges = self.column, {name: (low, high) for name, low, high in self.bands}
        return lambda frame: bands(frame[column], edges)


@dataclass(frozen=True)
class ModelSpec:
    """The warehouse relations and columns the model side of the flywheel reads and writes."""

    features_table: str  # every example of a landing day, labelled or not: scoring and drift
    examples_table: str  # labelled examples: training datasets are cut from it
    labels_view: str  # the labels as dbt stages them (example id, label, known_at)
    predictions_table: str  # batch scoring's output; also the scoring asset's name
    time_column: str  # the example's day: partitions, time splits and monitoring windows
    features: FeatureConfig
    slices: dict[str, SliceSpec]
    # Training weights of the labels by how they were picked (pipelines.labeling.selection.
    # importance_weights): 0 weighs every label alike, and the datasets carry no weight column.
    importance_exponent: float = 0.0
    # The features the warehouse computes from the task's own labels (a segment's late rate
    # over its labelled examples): a baseline fitted on other labels must not read them.
    label_features: tuple[str, ...] = ()

    @property
    def example_id(self) -> str:
        return self.features.id_columns[0]

    @property
    def label(self) -> str:
        return self.features.label

    @property
    def class_columns(self) -> list[str]:
        """The predictions table's probability column of each class (`p_<k>`); none if binary."""
        return [f"p_{k}" for k in range(len(self.features.classes or ()))]

    def slice_keys(self) -> dict[str, SliceKey]:
        """Every slice as `ml.evaluation` takes it."""
        return {name: spec.key() for name, spec in self.slices.items()}


def _slice(name: str, raw: object, where: str) -> SliceSpec:
    if isinstance(raw, str):
        return SliceSpec(column=raw)
    if not isinstance(raw, dict) or "column" not in raw or set(raw) - {"column", "bands"}:
        raise ValueError(f"{where}: slice {name!r} needs `column` and optionally `bands`")
    edges = []
    for band, bounds in (raw.get("bands") or {}).items():
        if not (isinstance(bounds, list) and len(bounds) == 2 and bounds[0] < bounds[1]):
            raise ValueError(
                f"{where}: band {band!r} of slice {name!r} needs [low, high), low<high"
            )
        edges.append((str(band), float(bounds[0]), float(bounds[1])))
    return SliceSpec(column=raw["column"], bands=tuple(edges))


def _classes(choices: dict) -> tuple | None:
    """The label's classes, in the order of its choices; None for a binary (true/false) label."""
    values = list(choices.values())
    if all(isinstance(v, bool) for v in values):
        return None
    return tuple(values)


def parse_model_spec(task: TaskSpec) -> ModelSpec:
    """The task's `model` section, with its example id and label from the `labels` section."""
    raw = task.sections
    where = f"{task.path}: model"
    section = raw.get("model")
    if not isinstance(section, dict):
        raise ValueError(f"{task.path}: no `model` section (it names {', '.join(REQUIRED)})")
    if missing := [k for k in REQUIRED if k not in section]:
        raise ValueError(f"{where}: missing {missing}")
    if unknown := sorted(set(section) - set(REQUIRED) - set(OPTIONAL)):
        raise ValueError(f"{where}: unknown settings {unknown}")
    labels = raw.get("labels") or {}
    if not {"example_id", "label"} <= set(labels):
        raise ValueError(f"{task.path}: labels: needs `example_id` and `label`")
    categorical, numeric = tuple(section["categorical"]), tuple(section["numeric"])
    if overlap := sorted(set(categorical) & set(numeric)):
        raise ValueError(f"{where}: columns both categorical and numeric: {overlap}")
    if not categorical and not numeric:
        raise ValueError(f"{where}: no feature columns")
    exponent = section.get("importance_exponent", 0.0)
    number = isinstance(exponent, int | float) and not isinstance(exponent, bool)
    if not number or not 0 <= exponent <= 1:
        raise ValueError(f"{where}: importance_exponent must be a number within [0, 1]")
    label_features = tuple(section.get("label_features") or ())
    if stray := sorted(set(label_features) - {*categorical, *numeric}):
        raise ValueError(f"{where}: label_features {stray} are not feature columns")
    taken = {*categorical, *numeric, labels["label"], labels["example_id"], section["time_column"]}
    if exponent > 0 and WEIGHT_COLUMN in taken:
        raise ValueError(f"{where}: importance weights need the column name {WEIGHT_COLUMN!r}")
    features = FeatureConfig(
        categorical=categorical,
        numeric=numeric,
        label=labels["label"],
        id_columns=(labels["example_id"], section["time_column"]),
        min_category_frequency=int(section.get("min_category_frequency", 1)),
        weight=WEIGHT_COLUMN if exponent > 0 else None,
        classes=_classes(labels.get("choices") or {}),
    )
    return ModelSpec(
        features_table=section["features_table"],
        examples_table=section["examples_table"],
        labels_view=section["labels_view"],
        predictions_table=section["predictions_table"],
        time_column=section["time_column"],
        features=features,
        slices={n: _slice(n, s, where) for n, s in (section["slices"] or {}).items()},
        importance_exponent=float(exponent),
        label_features=label_features,
    )
