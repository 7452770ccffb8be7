"""The challenger's evaluation as the pipelines run it: every model's scores on the dataset's test
window (the registered models from MLflow, the baselines kept with the challenger's run), the
`ml.evaluation` figures and plots, and the training profile read from the
warehouse."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pipelines.labeling.selection import REASON_COLUMN, UNIFORM_REASONS
from pipelines.lib.registry import (
    DATASET_TAG,
    ModelVersion,
    load_model,
    read_baselines,
)
from pipelines.lib.tracking import MlflowTracker
from pipelines.lib.warehouse import Warehouse
from pipelines.task.model_spec import ModelSpec
from pipelines.task.thresholds import PromotionSpec

if TYPE_CHECKING:
    from ml.config import FeatureConfig
    from ml.evaluation import Evaluation
    from ml.time_tracking import TimeTrend
    from pipelines.defs.training.assets import TrainingDataset

# Evaluation uses the uniformly sampled labels when there are this many.
MIN_UNBIASED_ROWS = 200


@dataclass
class ChallengerEvaluation:
    """Every model's scores on the test window, figures, and the challenger's training profile."""

    evaluation: Evaluation
    labels: np.ndarray
    predictions: dict[str, np.ndarray]
    window: tuple[str, str]
    profile: dict
    sample: str
    plots: dict[str, bytes]
    # The numeric features that track time over the partitions the challenger was fit on.
    time_tracking: list[TimeTrend] = field(default_factory=list)


def _scores(
    tracker: MlflowTracker, spec: ModelSpec, version: ModelVersion, frame: pd.DataFrame
) -> np.ndarray:
    from ml.labels import probabilities_from_output
    from ml.pyfunc import model_input

    output = load_model(tracker, version).predict(model_input(frame, spec.features))
    return probabilities_from_output(output)


def training_profile(
    tracker: MlflowTracker,
    warehouse: Warehouse,
    spec: ModelSpec,
    frames: dict[str, pd.DataFrame],
    model: ModelVersion,
) -> dict:
    """Every example (labelled or not) of the training days, and the model's scores on every
    example of the validation days: what monitoring later compares production with."""
    from ml.drift import build_training_profile

    features = spec.features
    query = f"select * from {spec.features_table} where {spec.time_column} between ? and ?"
    with warehouse.connect() as con:
        train = con.execute(query, _span(frames["train"], spec)).df()
        validation = con.execute(query, _span(frames["validation"], spec)).df()
    scores = _scores(tracker, spec, model, validation)
    profile = build_training_profile(
        train, features.categorical, features.numeric, predictions=scores
    )
    return profile.to_dict()


def _span(frame: pd.DataFrame, spec: ModelSpec) -> list[str]:
    days = frame[spec.time_column]
    return [pd.Timestamp(d).date().isoformat() for d in (days.min(), days.max())]


def unbiased_sample(test: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The uniformly sampled labels of the test window if there are enough, else all of them."""
    if REASON_COLUMN in test.columns:
        uniform = test[test[REASON_COLUMN].isin(UNIFORM_REASONS)].reset_index(drop=True)
        if len(uniform) >= MIN_UNBIASED_ROWS:
            return (
                uniform,
                f"{len(uniform)} uniformly sampled labels ({'/'.join(UNIFORM_REASONS)})",
            )
    return test, f"all {len(test)} labels (fewer than {MIN_UNBIASED_ROWS} uniformly sampled)"


def evaluate_challenger(
    tracker: MlflowTracker,
    warehouse: Warehouse,
    spec: ModelSpec,
    dataset: TrainingDataset,
    challenger: ModelVersion,
    champion: ModelVersion | None,
    promotion: PromotionSpec,
    seed: int = 0,
) -> ChallengerEvaluation:
    """Score the dataset's test split with the challenger, the champion and the baselines, and
    compare them overall, by slice and (challenger vs champion) with paired bootstraps. The
    baselines are those the challenger's training fitted on the same train split; they are
    fitted here only for a challenger whose run kept none."""
    from ml.evaluation import evaluate_models
    from ml.plots import evaluation_plots
    from ml.time_tracking import time_tracking_features

    frames = {s: pd.read_parquet(dataset.split(s)) for s in ("train", "validation", "test")}
    test, sample = unbiased_sample(frames["test"])
    predictions = {"challenger": _scores(tracker, spec, challenger, test)}
    if champion is not None:
        predictions["champion"] = _scores(tracker, spec, champion, test)
    predictions |= baseline_scores(
        tracker, spec.features, challenger, dataset.dvc_hash, frames, test, seed
    )
    label = spec.label
    evaluation = evaluate_models(
        test,
        label,
        predictions,
        spec.slice_keys(),
        model="challenger",
        against="champion" if champion is not None else None,
        n_boot=promotion.n_boot,
        seed=seed,
        confidence=promotion.confidence,
        classes=spec.features.classes,
    )
    labels = test[label].to_numpy(dtype=np.float64)
    return ChallengerEvaluation(
        evaluation=evaluation,
        labels=labels,
        predictions=predictions,
        window=tuple(_span(test, spec)),
        profile=training_profile(tracker, warehouse, spec, frames, challenger),
        sample=sample,
        plots=evaluation_plots(labels, predictions, evaluation, classes=spec.features.classes),
        time_tracking=time_tracking_features(
            pd.concat([frames["train"], frames["validation"]]),
            spec.features.numeric,
            spec.time_column,
        ),
    )


def baseline_scores(
    tracker: MlflowTracker,
    features: FeatureConfig,
    challenger: ModelVersion,
    dataset_hash: str,
    frames: dict[str, pd.DataFrame],
    test: pd.DataFrame,
    seed: int,
) -> dict[str, np.ndarray]:
    """The baselines' scores on `test`: those the challenger's training fitted and kept with its
    run when it trained on this dataset (`dataset_hash`, whose splits are `frames`); otherwise
    (a run that kept none, or an evaluation of another dataset) fitted on its train split now."""
    run = tracker.client().get_run(challenger.run_id)
    if run.data.tags.get(DATASET_TAG) == dataset_hash:
        fitted = read_baselines(tracker, challenger.run_id)
        if fitted is not None:
            return fitted.predict_frame(test)
    from ml.baselines import baseline_predictions
    from ml.data import TabularDataModule

    datamodule = TabularDataModule(
        frames["train"], frames["validation"], test, features=features, seed=seed
    )
    return baseline_predictions(datamodule, "test", seed)
