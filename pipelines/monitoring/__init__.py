"""Monitoring rules: which drift statistics, performance figures and excess losses count as an
event.

The statistics come from `ml.drift` and `ml.metrics`; this module applies the task's
monitoring thresholds to them, so the assets and the sensors judge by the same thresholds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import date, timedelta

import numpy as np
import pandas as pd

from ml.config import FeatureConfig
from ml.drift import TrainingProfile, feature_drift, segment_shift
from ml.labels import class_indices
from ml.metrics import auroc, logloss, multiclass_metrics
from ml.sequential import cusum, cusum_threshold, excess_loss
from pipelines.task.thresholds import MonitoringSpec


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


def daily_excess_loss(labelled: pd.DataFrame, classes: tuple | None = None) -> dict[str, object]:
    """The day's statistic of the excess-loss alarm: how many uniformly drawn labels came in
    (`labels`) and the champion's mean excess loss over them (`excess_loss`, NaN without one):
    log loss minus the entropy of its prediction (ml/sequential.py), from `probability` for a
    binary label, or the `p_<k>` columns of `classes`."""
    if labelled.empty:
        return {"labels": 0, "excess_loss": math.nan}
    if classes is None:
        y = labelled["label"].to_numpy(dtype=np.float64)
        probs = labelled["probability"].to_numpy(dtype=np.float64)
    else:
        y = class_indices(labelled["label"], classes, "label")
        probs = labelled[[f"p_{k}" for k in range(len(classes))]].to_numpy(dtype=np.float64)
    return {"labels": len(labelled), "excess_loss": float(excess_loss(y, probs).mean())}


def excess_loss_alarm(
    history: pd.DataFrame, day: date, monitoring: MonitoringSpec
) -> dict[str, object]:
    """The excess-loss alarm's verdict on `day` from `history` (a row a monitored day:
    `monitored_on`, `excess_loss` and, for the days before, `is_alarm`; today's row included).

    The reference days are those of the `alarm_history_days` before `day` less the most recent
    `alarm_recent_days`, whichever model served them: their mean is the in-control level and
    their spread sets the threshold (ml.sequential.cusum_threshold). The CUSUM runs over the
    days since the last alarm, within that window, whichever champion served them: a
    retraining that leaves the excess where it was does not wipe out the evidence, and one
    that cures it brings the sum down. `is_alarm` is today's."""
    history = history.reset_index(drop=True)
    days = pd.to_datetime(history["monitored_on"]).dt.date
    first = day - timedelta(days=monitoring.alarm_history_days)
    last = day - timedelta(days=monitoring.alarm_recent_days)
    reference = history.loc[(days >= first) & (days < last), "excess_loss"].dropna()
    row: dict[str, object] = {
        "reference_days": len(reference),
        "reference_mean": math.nan,
        "threshold": math.nan,
        "cusum": math.nan,
        "is_alarm": False,
    }
    if len(reference) < monitoring.alarm_min_history_days:
        row["status"] = (
            f"not armed: {len(reference)} of {monitoring.alarm_min_history_days} reference days"
        )
        return row
    allowance = monitoring.alarm_min_excess_loss / 2
    mean = float(reference.mean())
    threshold = cusum_threshold(reference.to_numpy(), allowance, monitoring.alarm_run_length)
    alarmed = history.get("is_alarm", pd.Series(False, index=history.index))
    alarmed = alarmed.fillna(False).astype(bool) & (days < day)
    since = max([first, *(d + timedelta(days=1) for d in days[alarmed])])
    path_days = history.assign(_day=days)[(days >= since) & (days <= day)]
    path_days = path_days.sort_values("_day").dropna(subset=["excess_loss"])
    path = cusum(path_days["excess_loss"].to_numpy() - mean - allowance, threshold)
    today = bool(len(path_days)) and path_days["_day"].iloc[-1] == day
    row |= {
        "reference_mean": mean,
        "threshold": threshold,
        "cusum": float(path.statistic[-1]) if today else math.nan,
        "is_alarm": bool(today and path.alarms[-1]),
    }
    row["status"] = (
        f"CUSUM {row['cusum']:.3f} against {threshold:.3f} (level {mean:.3f}, allowance "
        f"{allowance:.3f}, {len(reference)} reference days)"
        if today
        else "no uniformly drawn label of the champion's came in today"
    )
    return row


def replay_alarm(days: pd.Series, excess: pd.Series, monitoring: MonitoringSpec) -> pd.DataFrame:
    """The excess-loss alarm's verdict on each of `days` (dates, in order) with the day's
    statistic `excess`, as the daily asset gives them: each day reads the days before and the
    alarms they raised."""
    history = pd.DataFrame(
        {"monitored_on": list(days), "excess_loss": list(excess), "is_alarm": False}
    )
    verdicts = []
    for i, day in enumerate(history["monitored_on"]):
        verdict = excess_loss_alarm(history.iloc[: i + 1], day, monitoring)
        history.loc[i, "is_alarm"] = verdict["is_alarm"]
        verdicts.append(
            {"monitored_on": day, "excess_loss": history.loc[i, "excess_loss"]} | verdict
        )
    return pd.DataFrame(verdicts)
