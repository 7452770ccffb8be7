"""The promotion gate: whether a challenger replaces the champion, and why, as plain checks."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ml.evaluation import METRICS, Evaluation, finite, overall_by_model

# +1 where a larger value is better, -1 where a smaller one is: improvement = sign * difference.
DIRECTION = {"auroc": 1.0, "logloss": -1.0, "brier": -1.0}
SLICE_KEYS = ("slice", "value", "n", "challenger", "champion")

Check = tuple[str, bool, str]


@dataclass(frozen=True)
class GateConfig:
    """The gate's rule; ``min_improvement``, tolerances and margins are in ``metric``'s units."""

    metric: str = "logloss"
    min_improvement: float = 0.0
    slice_tolerance: float = 0.02
    min_slice_rows: int = 200
    floor_baselines: tuple[str, ...] = ("logistic_regression",)
    floor_margin: float = 0.0
    # With a calibration metric as the rule, ranking must not get worse either: the overall AUC
    # may fall at most this far below the champion's (None: no such check).
    max_auroc_drop: float | None = None


@dataclass
class GateInputs:
    """Everything the gate judges: overall metrics, the challenger-minus-champion interval, slices.

    ``improvement_ci`` is the raw interval of challenger minus champion for the gate's metric
    (a negative log-loss difference is an improvement); ``slices`` rows hold the metric per slice.
    """

    challenger: dict[str, float]
    champion: dict[str, float] | None = None
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)
    improvement_ci: tuple[float, float] | None = None
    slices: list[dict] = field(default_factory=list)


def gate_inputs_of(evaluation: Evaluation, metric: str) -> dict:
    """The gate's inputs from an evaluation of the challenger (with the champion, if any, and
    the baselines), as JSON (see ``GateInputs``): overall figures, the challenger-minus-champion
    interval of ``metric``, and ``metric`` per slice."""
    overall = overall_by_model(evaluation)

    def scores(model: str) -> dict[str, float | None]:
        return {m: finite(overall.loc[model, m]) for m in METRICS}

    slices = evaluation.slices
    wide = slices[slices.model.isin(["challenger", "champion"])].pivot_table(
        index=["slice", "value", "n"], columns="model", values=metric, dropna=False
    )
    interval = evaluation.comparison.get(metric)
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
                "challenger": finite(row.get("challenger")),
                "champion": finite(row.get("champion")),
            }
            for (s, v, n), row in wide.iterrows()
        ],
    }


@dataclass(frozen=True)
class Decision:
    """The verdict, one sentence saying why, and every check that led to it."""

    promote: bool
    reason: str
    checks: tuple[Check, ...]


def decide(inputs: GateInputs, config: GateConfig) -> Decision:
    """Promote a first model that beats the floor baselines by more than ``floor_margin`` (a
    negative one: is less than that much worse), or a challenger beating the champion.

    Against a champion the challenger must improve with the whole bootstrap interval above
    ``min_improvement`` and worsen no large enough slice by more than ``slice_tolerance``. A
    negative ``min_improvement`` is a non-inferiority margin: the challenger (newer data) wins
    unless it is likely worse by more than that.
    """
    metric = config.metric
    if metric not in DIRECTION:
        raise ValueError(f"unknown gate metric {metric!r}; known: {sorted(DIRECTION)}")
    challenger = _metric(inputs.challenger, metric, "challenger")
    if inputs.champion is None:
        checks = _floor_checks(challenger, inputs.baselines, config)
    else:
        if inputs.improvement_ci is None:
            raise ValueError(f"a champion is given but no improvement_ci for {metric}")
        _metric(inputs.champion, metric, "champion")
        checks = (_interval_check(inputs.improvement_ci, config), _slice_check(inputs, config))
        if config.max_auroc_drop is not None and metric != "auroc":
            checks += (_auroc_check(inputs, config.max_auroc_drop),)
    failed = [detail for _, passed, detail in checks if not passed]
    if failed:
        return Decision(False, f"Rejected: {'; '.join(failed)}.", checks)
    return Decision(True, f"Promoted: {'; '.join(d for _, _, d in checks)}.", checks)


def _floor_checks(
    challenger: float, baselines: dict[str, dict[str, float]], config: GateConfig
) -> tuple[Check, ...]:
    metric, sign = config.metric, DIRECTION[config.metric]
    checks = []
    for name in config.floor_baselines:
        if name not in baselines:
            raise ValueError(
                f"floor baseline {name!r} is missing from baselines {sorted(baselines)}"
            )
        floor = _metric(baselines[name], metric, f"baseline {name!r}")
        gain = sign * (challenger - floor)
        checks.append(
            (
                f"beats {name}" if config.floor_margin >= 0 else f"not worse than {name}",
                gain > config.floor_margin,
                f"{metric} {challenger:.4f} vs {name} {floor:.4f} is an improvement of "
                f"{gain:.4f} (needs more than {config.floor_margin:.4f})",
            )
        )
    if metric == "auroc":
        checks.append(("above chance", challenger > 0.5, f"auroc {challenger:.4f} (needs > 0.5)"))
    return tuple(checks)


def _interval_check(interval: tuple[float, float], config: GateConfig) -> Check:
    sign = DIRECTION[config.metric]
    low, high = sorted(sign * float(bound) for bound in interval)
    detail = (
        f"{config.metric} improvement over the champion has interval [{low:.4f}, {high:.4f}] "
        f"(lower bound must exceed {config.min_improvement:.4f})"
    )
    name = "improves on champion" if config.min_improvement >= 0 else "not worse than champion"
    return (name, low > config.min_improvement, detail)


def _auroc_check(inputs: GateInputs, max_drop: float) -> Check:
    ours = _metric(inputs.challenger, "auroc", "challenger")
    theirs = _metric(inputs.champion or {}, "auroc", "champion")
    drop = theirs - ours
    detail = f"auroc {ours:.4f} vs the champion's {theirs:.4f} (may fall at most {max_drop:.4f})"
    return ("ranks no worse", drop <= max_drop, detail)


def _slice_check(inputs: GateInputs, config: GateConfig) -> Check:
    sign, metric = DIRECTION[config.metric], config.metric
    compared, worst = 0, None
    for row in inputs.slices:
        if missing := [k for k in SLICE_KEYS if k not in row]:
            raise ValueError(f"slice row {row} lacks {missing}")
        ours, theirs = row["challenger"], row["champion"]
        # Small slices are too noisy to veto on, and a NaN (one class only) has no verdict.
        if row["n"] < config.min_slice_rows or not (_finite(ours) and _finite(theirs)):
            continue
        compared += 1
        worsening = -sign * (float(ours) - float(theirs))
        if worst is None or worsening > worst[0]:
            worst = (worsening, row)
    if worst is None:
        detail = f"no slice has {config.min_slice_rows}+ rows with {metric} for both models"
        return ("no slice regresses", True, detail)
    worsening, row = worst
    detail = (
        f"the worst of {compared} slices with {config.min_slice_rows}+ rows, "
        f"{row['slice']}={row['value']} (n={row['n']}), worsens {metric} by {worsening:+.4f} "
        f"(tolerance {config.slice_tolerance:.4f})"
    )
    return ("no slice regresses", worsening <= config.slice_tolerance, detail)


def _metric(metrics: dict[str, float], metric: str, whose: str) -> float:
    if metric not in metrics:
        raise ValueError(f"{whose} metrics lack {metric!r}; have {sorted(metrics)}")
    return float(metrics[metric])


def _finite(value: object) -> bool:
    return value is not None and math.isfinite(float(value))
