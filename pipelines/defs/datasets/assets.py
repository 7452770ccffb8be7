"""The versioned training dataset: labelled examples split by time, tracked and pushed by DVC."""

import dagster as dg
import numpy as np
import pandas as pd

from ml.splits import one_class_splits, split_by_time
from pipelines.labeling.selection import REASON_COLUMN, importance_weights
from pipelines.lib.asset_keys import task_key, task_prefix
from pipelines.lib.datasets import DvcDatasetStore
from pipelines.lib.warehouse import WAREHOUSE_POOL, Warehouse
from pipelines.settings import retraining_default
from pipelines.task import Task
from pipelines.task.model_spec import ModelSpec


class DatasetConfig(dg.Config):
    """How many of the most recent labelled days are held out for validation and for test."""

    validation_days: int = retraining_default("FLYWHEEL_VALIDATION_DAYS")
    test_days: int = retraining_default("FLYWHEEL_TEST_DAYS")


def split_summary(splits: dict[str, pd.DataFrame], label: str, date_column: str) -> str:
    """A markdown table of rows, label rate and date range per split."""
    rows = [
        {
            "split": name,
            "rows": len(frame),
            "label_rate": round(float(frame[label].mean()), 4),
            "first_day": str(frame[date_column].min()),
            "last_day": str(frame[date_column].max()),
        }
        for name, frame in splits.items()
    ]
    return pd.DataFrame(rows).to_markdown(index=False)


def weights(warehouse: Warehouse, spec: ModelSpec, examples: pd.DataFrame) -> np.ndarray:
    """The examples' importance weights (see `importance_weights`), from why each was labelled
    and how many examples its day had."""
    if REASON_COLUMN not in examples.columns:
        raise dg.Failure(
            f"{spec.examples_table} has no {REASON_COLUMN} column: importance weights "
            "(model.importance_exponent) need why each example was labelled"
        )
    time = spec.time_column
    sizes = warehouse.query(
        f"select {time}, count(*) as examples from {spec.features_table} group by {time}"
    )
    day_sizes = pd.Series(sizes["examples"].to_numpy(), index=_days(sizes[time]))
    return importance_weights(
        examples[REASON_COLUMN], _days(examples[time]), day_sizes, spec.importance_exponent
    )


def _days(values: pd.Series) -> pd.Series:
    return pd.Series(pd.to_datetime(values).dt.date.to_numpy())


def build_dataset_assets(task: Task) -> list[dg.AssetsDefinition]:
    """The `training_dataset` asset of `task`."""
    spec = task.model

    @dg.asset(
        key_prefix=task_prefix(task),
        group_name="datasets",
        # With importance weights, the day sizes come from the features table too.
        deps=[
            task_key(task, table)
            for table in (
                spec.examples_table,
                *([spec.features_table] if spec.features.weight else []),
            )
        ],
        pool=WAREHOUSE_POOL,
        kinds={"dvc", "parquet"},
    )
    def training_dataset(
        config: DatasetConfig, warehouse: Warehouse, dataset_store: DvcDatasetStore
    ) -> dg.MaterializeResult:
        """Labelled examples as train/validation/test Parquet (latest days held out), in DVC."""
        examples = warehouse.query(f"select * from {spec.examples_table}")
        # Ordered here, not by the warehouse's collation: the same rows give the same files
        # (and DVC hash) on every backend.
        examples = examples.sort_values(spec.example_id, ignore_index=True)
        if spec.features.weight is not None:
            examples[spec.features.weight] = weights(warehouse, spec, examples)
        splits = split_by_time(examples, spec.time_column, config.validation_days, config.test_days)
        if one_class := one_class_splits(splits, spec.label, spec.time_column):
            raise dg.Failure(
                description="; ".join(one_class.values()) + ": a model cannot be fitted, "
                "selected or judged on one class. Label more days before the first model, "
                "widen the held-out windows (validation_days, test_days), or label more of each "
                "partition (labels.budget)."
            )
        version = dataset_store.save(task.name, splits)
        schema = {c: str(t) for c, t in examples.dtypes.items()}
        return dg.MaterializeResult(
            data_version=dg.DataVersion(version.dvc_hash),
            metadata={
                "dvc_hash": version.dvc_hash,
                "path": str(version.path),
                "pointer": str(version.pointer),
                "dagster/row_count": len(examples),
                "splits": dg.MetadataValue.md(split_summary(splits, spec.label, spec.time_column)),
                "schema": schema,
            },
        )

    return [training_dataset]
