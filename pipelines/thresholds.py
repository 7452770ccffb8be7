"""Monitoring thresholds and the promotion gate's settings, read from the task's YAML file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from ml.promotion import GateConfig
from pipelines.contracts import TaskSpec
from pipelines.settings import RETRAIN_ON

# What can request a retraining (monitoring.retrain_on): the two sensors and the schedule.
TRIGGERS = ("drift", "performance", "schedule")


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
    flagged_segment_types: tuple[str, ...] = ()
    top_segments: int = 5
    exclude_features: tuple[str, ...] = ()
    # The triggers that request a retraining: the drift sensor, the performance sensor, the
    # retraining schedule. One left out still watches: its sensor logs each event it would have
    # acted on (the drift asset's materializations keep every day's verdict), and requests none.
    retrain_on: tuple[str, ...] = ("drift", "performance", "schedule")
    # A binary task's served `calibrated_probability` (pipelines/recalibration.py): each day the
    # champion's log-odds move so that its scores of the uniformly drawn examples labelled in
    # these days before average their labels; fewer labels than the minimum: no move; 0: off.
    recalibration_days: int = 14
    recalibration_min_labels: int = 100

    def __post_init__(self) -> None:
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
    if stray := sorted(set(monitoring.retrain_on) - set(TRIGGERS)):
        raise ValueError(
            f"{task.path}: monitoring.retrain_on (or {RETRAIN_ON.name}): unknown triggers "
            f"{stray}; known: {list(TRIGGERS)}"
        )
    promotion = dict(raw.get("promotion") or {})
    outer = {k: promotion.pop(k) for k in ("confidence", "n_boot") if k in promotion}
    gate = build_settings(GateConfig, promotion, f"{task.path}: promotion")
    return monitoring, PromotionSpec(gate=gate, **outer)
