"""What the evaluation asset computes and shows: predictions of every model on the test window,
the `ml.evaluation` figures, plots in MLflow and the Dagster UI, and the gate's inputs."""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pipelines.labeling.selection import REASON_COLUMN, UNIFORM_REASONS
from pipelines.lib.registry import (
    DATASET_TAG,
    PROFILE_ARTIFACT,
    ModelVersion,
    load_model,
    log_json,
    log_png,
    read_baselines,
)
from pipelines.lib.tracking import MlflowTracker
from pipelines.lib.warehouse import Warehouse
from pipelines.model_spec import ModelSpec
from pipelines.policy import PromotionPolicy

if TYPE_CHECKING:
    from ml.config import FeatureConfig
    from ml.evaluation import Evaluation
    from pipelines.defs.training.assets import TrainingDataset

METRICS = ("auroc", "logloss", "brier", "ece")
# Evaluation uses the uniformly sampled labels when there are this many.
MIN_UNBIASED_ROWS = 200


@dataclass
class ChallengerEvaluation:
    """Every model's scores on the test window, the figures, and the challenger's reference."""

    evaluation: Evaluation
    labels: np.ndarray
    predictions: dict[str, np.ndarray]
    window: tuple[str, str]
    profile: dict
    sample: str
    plots: dict[str, bytes]


def _scores(
    tracker: MlflowTracker, spec: ModelSpec, version: ModelVersion, frame: pd.DataFrame
) -> np.ndarray:
    from ml.pyfunc import model_input

    scores = load_model(tracker, version).predict(model_input(frame, spec.features))
    return np.asarray(scores, dtype=np.float64)


def reference_profile(
    tracker: MlflowTracker,
    warehouse: Warehouse,
    spec: ModelSpec,
    frames: dict[str, pd.DataFrame],
    model: ModelVersion,
) -> dict:
    """Every example (labelled or not) of the training days, and the model's scores on every
    example of the validation days: what monitoring later compares production with."""
    from ml.drift import build_reference

    features = spec.features
    query = f"select * from {spec.features_table} where {spec.time_column} between ? and ?"
    with warehouse.connect() as con:
        train = con.execute(query, _span(frames["train"], spec)).df()
        validation = con.execute(query, _span(frames["validation"], spec)).df()
    scores = _scores(tracker, spec, model, validation)
    profile = build_reference(train, features.categorical, features.numeric, predictions=scores)
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
    policy: PromotionPolicy,
    seed: int = 0,
) -> ChallengerEvaluation:
    """Score the dataset's test split with the challenger, the champion and the baselines, and
    compare them overall, by slice and (challenger vs champion) with paired bootstraps. The
    baselines are those the challenger's training fitted on the same train split; they are
    fitted here only for a challenger whose run kept none."""
    from ml.evaluation import evaluate_models

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
        reference="challenger",
        against="champion" if champion is not None else None,
        n_boot=policy.n_boot,
        seed=seed,
        confidence=policy.confidence,
    )
    labels = test[label].to_numpy(dtype=np.float64)
    return ChallengerEvaluation(
        evaluation=evaluation,
        labels=labels,
        predictions=predictions,
        window=tuple(_span(test, spec)),
        profile=reference_profile(tracker, warehouse, spec, frames, challenger),
        sample=sample,
        plots=plots(labels, predictions, evaluation),
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


def plots(
    labels: np.ndarray, predictions: dict[str, np.ndarray], evaluation: Evaluation
) -> dict[str, bytes]:
    """ROC, calibration and slice plots as PNG bytes, by file name."""
    from ml.plots import calibration_figure, roc_figure, slice_figure

    return {
        "roc.png": roc_figure(labels, predictions),
        "calibration.png": calibration_figure(labels, predictions),
        "slices.png": slice_figure(evaluation.slices, metric="auroc"),
    }


def _overall(result: ChallengerEvaluation) -> pd.DataFrame:
    overall = result.evaluation.overall
    return overall.set_index("model") if "model" in overall.columns else overall


def log_evaluation(
    tracker: MlflowTracker, challenger: ModelVersion, result: ChallengerEvaluation
) -> None:
    """Test metrics, comparison, slices, plots and the monitoring reference, on the
    challenger's MLflow run."""
    overall = _overall(result)
    metrics = {f"test/{m}": float(overall.loc["challenger", m]) for m in METRICS}
    for metric, interval in result.evaluation.comparison.items():
        metrics[f"test/{metric}_diff_vs_champion"] = float(interval.estimate)
    tracker.log_metrics(challenger.run_id, metrics)
    log_json(tracker, challenger.run_id, _summary(result), "evaluation/evaluation.json")
    for file_name, png in result.plots.items():
        log_png(tracker, challenger.run_id, png, f"evaluation/{file_name}")
    log_json(tracker, challenger.run_id, result.profile, PROFILE_ARTIFACT)


def _finite(value: float) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


def _summary(result: ChallengerEvaluation) -> dict:
    overall = _overall(result)
    return {
        "window": list(result.window),
        "overall": {m: {k: _finite(v) for k, v in row.items()} for m, row in overall.iterrows()},
        "comparison": {
            metric: {"estimate": i.estimate, "low": i.low, "high": i.high, "n_boot": i.n_boot}
            for metric, i in result.evaluation.comparison.items()
        },
        "slices": result.evaluation.slices.astype(object)
        .where(result.evaluation.slices.notna(), None)
        .to_dict("records"),
    }


def gate_inputs(result: ChallengerEvaluation, policy: PromotionPolicy) -> dict:
    """The promotion gate's inputs as JSON: overall metrics, the interval, per-slice metric."""
    overall = _overall(result)
    metric = policy.gate.metric

    def scores(model: str) -> dict[str, float | None]:
        return {m: _finite(overall.loc[model, m]) for m in METRICS}

    slices = result.evaluation.slices
    wide = slices[slices.model.isin(["challenger", "champion"])].pivot_table(
        index=["slice", "value", "n"], columns="model", values=metric, dropna=False
    )
    interval = result.evaluation.comparison.get(metric)
    models = set(overall.index)
    return {
        "challenger": scores("challenger"),
        "champion": scores("champion") if "champion" in models else None,
        "baselines": {m: scores(m) for m in models - {"challenger", "champion"}},
        "improvement_ci": [interval.low, interval.high] if interval else None,
        "slices": [
            {
                "slice": s,
                "value": str(v),
                "n": int(n),
                "challenger": _finite(row.get("challenger")),
                "champion": _finite(row.get("champion")),
            }
            for (s, v, n), row in wide.iterrows()
        ],
    }


def _image(title: str, png: bytes) -> str:
    return f"![{title}](data:image/png;base64,{base64.b64encode(png).decode()})"


def evaluation_metadata(result: ChallengerEvaluation, policy: PromotionPolicy) -> dict:
    """Dagster metadata: tables of overall and slice figures, the intervals, the plots."""
    import dagster as dg

    overall = _overall(result).reset_index()
    comparison = [
        f"- {metric}: challenger - champion = {i.estimate:+.4f} "
        f"({i.confidence:.0%} interval {i.low:+.4f} .. {i.high:+.4f}, {i.n_boot} resamples)"
        for metric, i in result.evaluation.comparison.items()
    ] or ["- no champion yet: the challenger is compared with the baselines' floor"]
    images = [_image(name, png) for name, png in result.plots.items()]
    slices = result.evaluation.slices
    worst = slices[slices.n >= policy.gate.min_slice_rows].sort_values("auroc").head(12)
    return {
        "test_window": f"{result.window[0]}..{result.window[1]}",
        "test_rows": len(result.labels),
        "evaluation_sample": result.sample,
        "overall": dg.MetadataValue.md(overall.to_markdown(index=False, floatfmt=".4f")),
        "paired_bootstrap": dg.MetadataValue.md("\n".join(comparison)),
        "weakest_slices": dg.MetadataValue.md(worst.to_markdown(index=False, floatfmt=".4f")),
        "plots": dg.MetadataValue.md("\n\n".join(images)),
        "test/auroc": float(overall.set_index("model").loc["challenger", "auroc"]),
        "gate_metric": policy.gate.metric,
    }
