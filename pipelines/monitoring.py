"""Monitoring rules: which drift statistics and performance figures count as an event.

The statistics come from `ml.drift` and `ml.metrics`; this module applies the task's
monitoring thresholds to them, so the assets and the sensors judge by the same thresholds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from ml.drift import TrainingProfile, feature_drift, segment_shift
from ml.labels import class_indices
from ml.metrics import auroc, logloss, multiclass_metrics
from pipelines.thresholds import MonitoringSpec


def drift_table(
    profile: TrainingProfile,
    recent: pd.DataFrame,
    scores: pd.Series | None,
    features: FeatureConfig,
    monitoring: MonitoringSpec,
) -> pd.DataFrame:
    """Drift statistics per monitored feature (and the scores), with `is_drifted` per row."""
    monitored = [
        c
        for c in (*features.categorical, *features.numeric)
        if c not in monitoring.exclude_features
    ]
    predictions = None if scores is None or scores.empty else scores.to_numpy(np.float64)
    drift = feature_drift(profile, recent, predictions)
    drift = drift[drift.feature.isin([*monitored, "prediction"])].reset_index(drop=True)
    is_prediction = drift.kind == "prediction"
    threshold = np.where(
        is_prediction, monitoring.prediction_psi_threshold, monitoring.psi_threshold
    )
    ks_drift = (drift.kind == "numeric") & (drift.ks.fillna(0.0) > monitoring.ks_threshold)
    return drift.assign(is_drifted=(drift.psi > threshold) | ks_drift)


def flagged_segments(
    profile: TrainingProfile, recent: pd.DataFrame, drift: pd.DataFrame, monitoring: MonitoringSpec
) -> pd.DataFrame:
    """Categories of drifted segment features whose share grew most: label them first."""
    drifted = set(drift.loc[drift.is_drifted, "feature"])
    rows = []
    for segment_type in monitoring.flagged_segment_types:
        if segment_type not in drifted:
            continue
        shift = segment_shift(profile, recent, segment_type, top=monitoring.top_segments)
        grown = shift[shift.current_share > shift.training_share]
        rows += [
            {"segment_type": segment_type, "segment_value": str(v), "psi_contribution": float(c)}
            for v, c in zip(grown.value, grown.psi_contribution, strict=True)
        ]
    columns = ["segment_type", "segment_value", "psi_contribution"]
    types = {"segment_type": "string", "segment_value": "string", "psi_contribution": "float64"}
    return pd.DataFrame(rows, columns=columns).astype(types)


def realized_performance(
    labelled: pd.DataFrame,
    expected: Mapping[str, float],
    monitoring: MonitoringSpec,
    classes: tuple | None = None,
) -> dict[str, object]:
    """Realized AUC and log loss of scored, labelled examples (columns `label` and
    `probability`, and `p_<k>` per class of a label with `classes`) beside the figures the
    champion showed at evaluation (`expected["auroc"]`, `expected["logloss"]`): for several
    classes, the macro one-vs-rest AUC and the multi-class log loss.

    `is_decayed` is set only with at least `min_labels` labels of two classes or more: fewer are
    too noisy to act on, and the row says so in `status`.
    """
    y = labelled["label"].to_numpy(dtype=np.float64)
    val_auroc = float(expected.get("auroc", math.nan))
    val_logloss = float(expected.get("logloss", math.nan))
    row: dict[str, object] = {
        "labels": len(y),
        "label_mean": float(y.mean()) if len(y) else math.nan,
        "auroc": math.nan,
        "logloss": math.nan,
        "expected_auroc": val_auroc,
        "expected_logloss": val_logloss,
        "is_decayed": False,
    }
    if len(y) < monitoring.min_labels or y.min(initial=1) == y.max(initial=0):
        row["status"] = f"too few labels ({len(y)} < {monitoring.min_labels} or one class only)"
        return row
    if classes is None:
        p = labelled["probability"].to_numpy(dtype=np.float64)
        row["auroc"], row["logloss"] = auroc(y, p), logloss(y, p)
    else:
        probs = labelled[[f"p_{k}" for k in range(len(classes))]].to_numpy(dtype=np.float64)
        figures = multiclass_metrics(class_indices(labelled["label"], classes, "label"), probs)
        row["auroc"], row["logloss"] = figures["auroc"], figures["logloss"]
    auroc_drop = val_auroc - row["auroc"]
    logloss_rise = row["logloss"] - val_logloss
    row["is_decayed"] = bool(
        auroc_drop > monitoring.max_auroc_drop or logloss_rise > monitoring.max_logloss_rise
    )
    row["status"] = (
        f"AUC {row['auroc']:.3f} vs {val_auroc:.3f} at evaluation, "
        f"log loss {row['logloss']:.3f} vs {val_logloss:.3f}"
    )
    return row
