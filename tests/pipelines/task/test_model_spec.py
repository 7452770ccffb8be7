"""The task's `model` section: what the model side reads, and clear errors for bad settings."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from ml.config import FeatureConfig
from ml.synthetic import CATEGORICAL, NUMERIC
from pipelines.definitions import build_definitions
from pipelines.task import load_task
from tests.pipelines.conftest import with_model

FLIGHTS = load_task("flights")


def spec_of(path: Path):
    return load_task(path).model


def test_the_flights_section_gives_the_models_columns() -> None:
    spec = FLIGHTS.model
    # The synthetic table of the tests and benchmarks has the flagship task's feature columns.
    assert spec.features == FeatureConfig(
        categorical=CATEGORICAL,
        numeric=NUMERIC,
        label="is_late",
        id_columns=("flight_id", "flight_date"),
    )
    assert (spec.example_id, spec.label, spec.time_column) == (
        "flight_id",
        "is_late",
        "flight_date",
    )
    assert list(spec.slices) == ["carrier", "origin", "hour_band", "month"]


def test_slices_group_by_a_column_or_by_bands_of_one() -> None:
    keys = FLIGHTS.model.slice_keys()
    frame = pd.DataFrame({"scheduled_hour": [0, 5, 6, 11.5, 12, 17, 18, 23, np.nan]})
    assert keys["carrier"] == "carrier" and keys["month"] == "scheduled_month"
    assert keys["hour_band"](frame).tolist() == [
        *["night"] * 2,
        *["morning"] * 2,
        *["afternoon"] * 2,
        *["evening"] * 2,
        "missing",
    ]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"numeric": None}, "missing ['numeric']"),
        ({"learning_rate": 0.1}, "unknown settings ['learning_rate']"),
        ({"categorical": ["carrier", "distance"]}, "both categorical and numeric: ['distance']"),
        ({"categorical": [], "numeric": []}, "no feature columns"),
        ({"slices": {"hour": {"col": "scheduled_hour"}}}, "slice 'hour' needs `column`"),
        (
            {"slices": {"hour": {"column": "scheduled_hour", "bands": {"late": [20, 4]}}}},
            "band 'late' of slice 'hour' needs [low, high)",
        ),
        ({"importance_exponent": 1.5}, "importance_exponent must be a number within [0, 1]"),
        ({"importance_exponent": "half"}, "importance_exponent must be a number within [0, 1]"),
        (
            {
                "importance_exponent": 0.5,
                "numeric": ["distance", "sample_weight"],
                "label_features": None,
            },
            "importance weights need the column name 'sample_weight'",
        ),
        (
            {"label_features": ["distance", "late_rate_of_nothing"]},
            "label_features ['late_rate_of_nothing'] are not feature columns",
        ),
    ],
    ids=[
        "missing",
        "unknown",
        "overlap",
        "empty",
        "slice-without-column",
        "inverted-band",
        "exponent-above-one",
        "exponent-not-a-number",
        "weight-column-taken",
        "label-feature-not-a-feature",
    ],
)
def test_bad_settings_are_refused_naming_them(tmp_path, changes, message) -> None:
    with pytest.raises(ValueError, match="model") as error:
        spec_of(with_model(tmp_path, **changes))
    assert message in str(error.value)


def test_an_importance_exponent_gives_the_model_a_weight_column(tmp_path) -> None:
    assert FLIGHTS.model.importance_exponent == 0.0
    assert FLIGHTS.model.features.weight is None
    spec = spec_of(with_model(tmp_path, importance_exponent=0.5))
    assert spec.importance_exponent == 0.5 and spec.features.weight == "sample_weight"


def test_the_assets_read_their_tables_from_the_section(tmp_path, monkeypatch) -> None:
    """Another task's names reach the asset graph: scoring is named after its table, and the
    dataset, drift and label-export assets depend on the task's own dbt models."""
    path = with_model(
        tmp_path,
        features_table="fct_order_features",
        examples_table="fct_labelled_orders",
        predictions_table="order_predictions",
    )
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))
    # The tables are names only here: no dbt model builds them (the wiring check would say so).
    monkeypatch.setattr("pipelines.definitions.check_wiring", lambda task: None)
    defs = build_definitions(env="local", task_name=str(path))
    graph = defs.resolve_asset_graph()
    keys = {k.path[-1] for k in graph.get_all_asset_keys()}
    assert "order_predictions" in keys and "flight_predictions" not in keys
    parents = {
        name: {p.path[-1] for p in graph.get(dg.AssetKey(["flights", name])).parent_keys}
        for name in ("order_predictions", "feature_drift", "training_dataset", "label_tasks")
    }
    assert parents["order_predictions"] == {"fct_order_features"}
    assert parents["feature_drift"] == {"fct_order_features", "order_predictions"}
    assert parents["training_dataset"] == {"fct_labelled_orders"}
    assert parents["label_tasks"] == {"fct_order_features"}


def test_one_loader_reads_every_section_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    task = load_task("flights")
    assert (task.model, task.labeling, task.feed_checks) == (
        FLIGHTS.model,
        FLIGHTS.labeling,
        FLIGHTS.feed_checks,
    )
    assert task.monitoring.cooldown_days > 0 and task.promotion.gate is not None
    misspelt = tmp_path / "flights.yaml"
    misspelt.write_text(task.path.read_text().replace("\nmonitoring:", "\nmonitorng:"))
    with pytest.raises(ValueError, match=r"unknown sections \['monitorng'\]"):
        load_task(misspelt)
