"""Where a challenger's evaluation is shown: its MLflow run (metrics, summary, plots, the
training profile for monitoring) and the Dagster UI (the evaluation asset's metadata)."""

from __future__ import annotations

import base64

import dagster as dg

from ml.evaluation import METRICS, evaluation_summary, overall_by_model
from pipelines.defs.evaluation.challenger_evaluation import ChallengerEvaluation
from pipelines.lib.registry import PROFILE_ARTIFACT, ModelVersion, log_json, log_png
from pipelines.lib.tracking import MlflowTracker
from pipelines.task.thresholds import PromotionSpec


def log_evaluation(
    tracker: MlflowTracker, challenger: ModelVersion, result: ChallengerEvaluation
) -> None:
    """Test metrics, comparison, slices, plots and the training profile, on the
    challenger's MLflow run."""
    overall = overall_by_model(result.evaluation)
    metrics = {f"test/{m}": float(overall.loc["challenger", m]) for m in METRICS}
    for metric, interval in result.evaluation.comparison.items():
        metrics[f"test/{metric}_diff_vs_champion"] = float(interval.estimate)
    tracker.log_metrics(challenger.run_id, metrics)
    summary = evaluation_summary(result.evaluation, result.window)
    log_json(tracker, challenger.run_id, summary, "evaluation/evaluation.json")
    for file_name, png in result.plots.items():
        log_png(tracker, challenger.run_id, png, f"evaluation/{file_name}")
    log_json(tracker, challenger.run_id, result.profile, PROFILE_ARTIFACT)


def _image(title: str, png: bytes) -> str:
    return f"![{title}](data:image/png;base64,{base64.b64encode(png).decode()})"


def evaluation_metadata(result: ChallengerEvaluation, promotion: PromotionSpec) -> dict:
    """Dagster metadata: tables of overall and slice figures, the intervals, the plots, and the
    features that track time over the challenger's training partitions (ml.time_tracking)."""
    overall = overall_by_model(result.evaluation).reset_index()
    comparison = [
        f"- {metric}: challenger - champion = {i.estimate:+.4f} "
        f"({i.confidence:.0%} interval {i.low:+.4f} .. {i.high:+.4f}, {i.n_boot} resamples)"
        for metric, i in result.evaluation.comparison.items()
    ] or ["- no champion yet: the challenger is compared with the baselines' floor"]
    images = [_image(name, png) for name, png in result.plots.items()]
    slices = result.evaluation.slices
    worst = slices[slices.n >= promotion.gate.min_slice_rows].sort_values("auroc").head(12)
    return {
        "test_window": f"{result.window[0]}..{result.window[1]}",
        "test_rows": len(result.labels),
        "evaluation_sample": result.sample,
        "overall": dg.MetadataValue.md(overall.to_markdown(index=False, floatfmt=".4f")),
        "paired_bootstrap": dg.MetadataValue.md("\n".join(comparison)),
        "weakest_slices": dg.MetadataValue.md(worst.to_markdown(index=False, floatfmt=".4f")),
        "plots": dg.MetadataValue.md("\n\n".join(images)),
        "test/auroc": float(overall.set_index("model").loc["challenger", "auroc"]),
        "gate_metric": promotion.gate.metric,
        "time_tracking_features": dg.MetadataValue.json(
            [trend.as_dict() for trend in result.time_tracking]
        ),
    }
