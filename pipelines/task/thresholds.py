"""Monitoring thresholds and the promotion gate's settings, read from the task's YAML file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum

from ml.promotion import GateConfig
from pipelines.settings import RETRAIN_ON
from pipelines.task.contracts import TaskSpec


class Trigger(StrEnum):
    """What may request a retraining: one name each, spelled only here. The task's
    `monitoring.retrain_on` and FLYWHEEL_RETRAIN_ON list these names, a retraining run's
    `flywheel/trigger` tag holds one, and each names its sensor (`<name>_sensor`) or, for the
    calendar, `retraining_schedule`."""

    # The CUSUM on the champion's daily excess loss over its uniformly drawn labels
    # (ml/sequential.py): an alarm with a known false-alarm rate.
    EXCESS_LOSS = "excess_loss"
    # Feature and score drift against the champion's training data, past fixed thresholds.
    DRIFT = "drift"
    # The champion's realized AUC or log loss over a window, past fixed margins.
    PERFORMANCE = "performance"
    # The calendar: a retraining a week (a month for a monthly task).
    SCHEDULE = "schedule"

    @property
    def definition_name(self) -> str:
        """The name of the sensor or schedule that requests retrainings for this trigger."""
        return "retraining_schedule" if self is Trigger.SCHEDULE else f"{self.value}_sensor"


# The triggers that watch the model's monitoring (sensors), as opposed to the calendar.
ALARMS = tuple(t for t in Trigger if t is not Trigger.SCHEDULE)


@dataclass(frozen=True)
class MonitoringSpec:
    """When drift or decay counts as an event worth a retraining."""

    window_days: int = 7
    psi_threshold: float = 0.2
    ks_threshold: float = 0.15
    min_drifted_features: int = 2
    prediction_psi_threshold: float = 0.2
    performance_window_days: int = 7
    min_labels: int = 200
    max_auroc_drop: float = 0.05
    max_logloss_rise: float = 0.05
    cooldown_days: int = 7
    # The excess-loss alarm (ml/sequential.py): a CUSUM of the champion's daily excess loss with
    # an allowance of half `alarm_min_excess_loss` (the smallest rise worth a retraining, in nats
    # a label), its threshold set for `alarm_run_length` days between false alarms on the
    # reference days: those of the last `alarm_history_days` before the most recent
    # `alarm_recent_days` (left out, so that a break does not set its own threshold). Fewer than
    # `alarm_min_history_days` reference days: not armed yet.
    alarm_min_excess_loss: float = 0.03
    alarm_run_length: int = 30
    alarm_history_days: int = 91
    alarm_recent_days: int = 14
    alarm_min_history_days: int = 28
    flagged_segment_types: tuple[str, ...] = ()
    top_segments: int = 5
    exclude_features: tuple[str, ...] = ()
    # The triggers that request a retraining: the drift sensor, the performance sensor, the
    # retraining schedule. One left out still watches: its sensor logs each event it would have
    # acted on (the drift asset's materializations keep every day's verdict), and requests none.
    retrain_on: tuple[str, ...] = (Trigger.EXCESS_LOSS, Trigger.SCHEDULE)
    # A binary task's served `calibrated_probability` (pipelines/monitoring/recalibration.py): each
    # day the champion's log-odds move so that its scores of the uniformly drawn examples labelled
    # in these days before average their labels; fewer labels than the minimum: no move; 0: off.
    recalibration_days: int = 14
    recalibration_min_labels: int = 100

    def __post_init__(self) -> None:
        if not (
            self.alarm_min_excess_loss > 0
            and self.alarm_run_length >= 2
            and 2 <= self.alarm_min_history_days <= self.alarm_history_days - self.alarm_recent_days
        ):
            raise ValueError(
                "alarm_min_excess_loss must be above 0, alarm_run_length at least 2, and "
                "alarm_min_history_days from 2 to alarm_history_days - alarm_recent_days: "
                f"{self.alarm_min_excess_loss}, {self.alarm_run_length}, "
                f"{self.alarm_min_history_days}, {self.alarm_history_days}, "
                f"{self.alarm_recent_days}"
            )
        if not (self.recalibration_days >= 0 and self.recalibration_min_labels >= 1):
            raise ValueError(
                "recalibration_days must be 0 (off) or more and recalibration_min_labels 1 or "
                f"more: {self.recalibration_days}, {self.recalibration_min_labels}"
            )


@dataclass(frozen=True)
class PromotionSpec:
    """The gate's rule plus how its bootstrap interval is computed."""

    gate: GateConfig
    confidence: float = 0.95
    n_boot: int = 1000


def build_settings(cls: type, section: Mapping, where: str):
    """`cls` from a YAML section; an unknown setting is an error naming it and the known ones."""
    known = {f.name for f in fields(cls)}
    if unknown := set(section) - known:
        raise ValueError(f"{where}: unknown settings {sorted(unknown)}; known: {sorted(known)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in section.items()})


def parse_thresholds(task: TaskSpec) -> tuple[MonitoringSpec, PromotionSpec]:
    """The task's `monitoring` and `promotion` sections (defaults where a section is absent)."""
    raw = task.sections
    monitoring = raw.get("monitoring") or {}
    monitoring = build_settings(MonitoringSpec, monitoring, f"{task.path}: monitoring")
    if override := RETRAIN_ON.get():
        names = tuple(n.strip() for n in override.split(",") if n.strip() and n.strip() != "none")
        monitoring = replace(monitoring, retrain_on=names)
    if stray := sorted(set(monitoring.retrain_on) - set(Trigger)):
        raise ValueError(
            f"{task.path}: monitoring.retrain_on (or {RETRAIN_ON.name}): unknown triggers "
            f"{stray}; known: {[str(t) for t in Trigger]}"
        )
    monitoring = replace(monitoring, retrain_on=tuple(Trigger(t) for t in monitoring.retrain_on))
    promotion = dict(raw.get("promotion") or {})
    outer = {k: promotion.pop(k) for k in ("confidence", "n_boot") if k in promotion}
    gate = build_settings(GateConfig, promotion, f"{task.path}: promotion")
    return monitoring, PromotionSpec(gate=gate, **outer)
