"""The promotion gate as a table of cases: inputs, settings, and the verdict they must give."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from ml.promotion import Decision, GateConfig, GateInputs, decide

LOGLOSS = GateConfig()
AUROC = GateConfig(metric="auroc")
FLOOR = {"logistic_regression": {"auroc": 0.70, "logloss": 0.50}}


def first(challenger: dict[str, float], **changes) -> GateInputs:
    """A first model: no champion, judged against the floor baselines."""
    return replace(GateInputs(challenger=challenger, baselines=FLOOR), **changes)


def slice_row(n: int, challenger: float, champion: float, value: str = "EV") -> dict:
    return {
        "slice": "carrier",
        "value": value,
        "n": n,
        "challenger": challenger,
        "champion": champion,
    }


def versus(ci: tuple[float, float], *slices: dict) -> GateInputs:
    """A challenger against a champion with the interval of challenger minus champion."""
    overall = {"auroc": 0.75, "logloss": 0.45}
    return GateInputs(
        challenger=overall,
        champion=overall,
        baselines=FLOOR,
        improvement_ci=ci,
        slices=list(slices),
    )


CASES = {
    # No champion: beat every floor baseline in the metric's better direction.
    "first-logloss-below-floor": (first({"logloss": 0.45}), LOGLOSS, True),
    "first-logloss-above-floor": (first({"logloss": 0.55}), LOGLOSS, False),
    "first-logloss-equal-floor": (first({"logloss": 0.50}), LOGLOSS, False),
    "first-within-margin": (
        first({"logloss": 0.49}),
        replace(LOGLOSS, floor_margin=0.02),
        False,
    ),
    # A negative margin: a first model may be less than that much worse than the floor.
    "first-worse-within-negative-margin": (
        first({"logloss": 0.52}),
        replace(LOGLOSS, floor_margin=-0.03),
        True,
    ),
    "first-worse-beyond-negative-margin": (
        first({"logloss": 0.54}),
        replace(LOGLOSS, floor_margin=-0.03),
        False,
    ),
    "first-auroc-above-floor": (first({"auroc": 0.75}), AUROC, True),
    "first-auroc-below-floor": (first({"auroc": 0.65}), AUROC, False),
    "first-auroc-not-above-chance": (
        first({"auroc": 0.5}, baselines={"logistic_regression": {"auroc": 0.4}}),
        AUROC,
        False,
    ),
    "first-nan-metric": (first({"logloss": math.nan}), LOGLOSS, False),
    "first-no-floor-baselines": (
        first({"logloss": 9.0}),
        replace(LOGLOSS, floor_baselines=()),
        True,
    ),
    # A champion: the whole improvement interval must clear min_improvement.
    "champion-logloss-better": (versus((-0.03, -0.01)), LOGLOSS, True),
    "champion-logloss-worse": (versus((0.01, 0.03)), LOGLOSS, False),
    "champion-ci-straddles-zero": (versus((-0.02, 0.01)), LOGLOSS, False),
    "champion-better-but-below-min": (
        versus((-0.03, -0.01)),
        replace(LOGLOSS, min_improvement=0.015),
        False,
    ),
    # A negative min_improvement is a non-inferiority margin (log loss: challenger minus
    # champion below +0.03 at the interval's worst end).
    "non-inferior-within-margin": (
        versus((-0.02, 0.025)),
        replace(LOGLOSS, min_improvement=-0.03),
        True,
    ),
    "non-inferior-beyond-margin": (
        versus((-0.01, 0.035)),
        replace(LOGLOSS, min_improvement=-0.03),
        False,
    ),
    "champion-auroc-better": (versus((0.01, 0.03)), AUROC, True),
    "champion-auroc-worse": (versus((-0.03, -0.01)), AUROC, False),
    # The same raw interval means opposite things for log loss and AUROC.
    "direction-negative-diff-auroc": (versus((-0.03, -0.01)), AUROC, False),
    "direction-positive-diff-auroc": (versus((0.01, 0.03)), AUROC, True),
    # Slices: a large enough slice may not worsen by more than the tolerance.
    "slice-regression-beyond-tolerance": (
        versus((-0.03, -0.01), slice_row(500, 0.53, 0.50)),
        LOGLOSS,
        False,
    ),
    "slice-regression-within-tolerance": (
        versus((-0.03, -0.01), slice_row(500, 0.51, 0.50)),
        LOGLOSS,
        True,
    ),
    "slice-small-ignored": (versus((-0.03, -0.01), slice_row(199, 0.90, 0.50)), LOGLOSS, True),
    "slice-nan-ignored": (
        versus((-0.03, -0.01), slice_row(500, math.nan, 0.50), slice_row(500, 0.5, None)),
        LOGLOSS,
        True,
    ),
    "slice-auroc-drop-beyond-tolerance": (
        versus((0.01, 0.03), slice_row(500, 0.70, 0.75)),
        AUROC,
        False,
    ),
    "slice-auroc-rise-is-fine": (versus((0.01, 0.03), slice_row(500, 0.85, 0.75)), AUROC, True),
    # Better log loss but worse ranking: vetoed only when the AUROC guard is on.
    "logloss-better-auroc-worse-guarded": (
        replace(versus((-0.03, -0.01)), challenger={"auroc": 0.72, "logloss": 0.44}),
        replace(LOGLOSS, max_auroc_drop=0.01),
        False,
    ),
    "logloss-better-auroc-within-guard": (
        replace(versus((-0.03, -0.01)), challenger={"auroc": 0.745, "logloss": 0.44}),
        replace(LOGLOSS, max_auroc_drop=0.01),
        True,
    ),
    "logloss-better-auroc-worse-unguarded": (
        replace(versus((-0.03, -0.01)), challenger={"auroc": 0.72, "logloss": 0.44}),
        LOGLOSS,
        True,
    ),
}


@pytest.mark.parametrize("inputs, config, promote", CASES.values(), ids=CASES.keys())
def test_gate(inputs: GateInputs, config: GateConfig, promote: bool) -> None:
    decision = decide(inputs, config)
    assert isinstance(decision, Decision)
    assert decision.promote is promote
    assert all(passed for _, passed, _ in decision.checks) is promote
    assert decision.reason.startswith("Promoted" if promote else "Rejected")


def test_reason_names_the_numbers() -> None:
    rejected = decide(versus((-0.03, -0.01), slice_row(500, 0.53, 0.50)), LOGLOSS)
    assert "carrier=EV" in rejected.reason and "+0.0300" in rejected.reason
    assert "0.0200" in rejected.reason
    promoted = decide(first({"logloss": 0.45}), LOGLOSS)
    assert "0.4500" in promoted.reason and "0.5000" in promoted.reason
    assert [name for name, _, _ in promoted.checks] == ["beats logistic_regression"]
    within = decide(first({"logloss": 0.52}), replace(LOGLOSS, floor_margin=-0.03))
    assert [name for name, _, _ in within.checks] == ["not worse than logistic_regression"]
    assert "-0.0200" in within.reason and "-0.0300" in within.reason


ERRORS = {
    "missing-floor-baseline": (
        first({"logloss": 0.4}, baselines={}),
        LOGLOSS,
        "logistic_regression",
    ),
    "baseline-lacks-metric": (
        first({"auroc": 0.8}, baselines={"logistic_regression": {"logloss": 0.5}}),
        AUROC,
        "lack 'auroc'",
    ),
    "other-floor-baseline-missing": (
        first({"auroc": 0.8}),
        replace(AUROC, floor_baselines=("logistic_regression", "hist_gradient_boosting")),
        "hist_gradient_boosting",
    ),
    "champion-without-ci": (
        replace(versus((0.0, 0.0)), improvement_ci=None),
        LOGLOSS,
        "improvement_ci",
    ),
    "unknown-metric": (first({"f1": 0.4}), GateConfig(metric="f1"), "f1"),
    "challenger-lacks-metric": (first({"auroc": 0.8}), LOGLOSS, "challenger"),
    "slice-lacks-key": (versus((-0.03, -0.01), {"slice": "carrier"}), LOGLOSS, "lacks"),
}


@pytest.mark.parametrize("inputs, config, message", ERRORS.values(), ids=ERRORS.keys())
def test_gate_refuses_incomplete_inputs(
    inputs: GateInputs, config: GateConfig, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        decide(inputs, config)
