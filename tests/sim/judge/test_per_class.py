"""The report of a label of several classes: a class with fewer than `MIN_CLASS_EXAMPLES`
examples in a period is left out of that period's macro AUC, and every class is listed with its
own AUC and count; a binary report has no such section."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ml.labels import class_indices
from ml.metrics import auroc, class_aurocs, multiclass_auroc
from sim.judge.examples import Judged
from sim.judge.per_class import MIN_CLASS_EXAMPLES, class_figures, macro_auc
from sim.judge.reference import production_auc

STARS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0)
RARE = 3  # examples of the rare class: fewer than the minimum


def scored(rare: int = RARE, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Class indices (3 and 7 stars' classes common, class 0 rare) and probabilities that rank
    the common classes well and the rare one exactly wrong."""
    rng = np.random.default_rng(seed)
    y = np.r_[np.full(100, 3), np.full(100, 7), np.full(rare, 0)]
    probs = rng.dirichlet(np.ones(len(STARS)), size=y.size)
    probs[y == 3, 3] += 0.5
    probs[y == 7, 7] += 0.5
    probs[:, 0] = np.where(y == 0, 0.0, 0.05)
    return y, probs / probs.sum(axis=1, keepdims=True)


def test_a_class_below_the_minimum_is_left_out_of_the_macro() -> None:
    assert RARE < MIN_CLASS_EXAMPLES
    y, probs = scored()
    aucs, counts = class_aurocs(y, probs)
    assert counts[0] == RARE and aucs[0] == 0.0

    common = np.mean([auroc(y == k, probs[:, k]) for k in (3, 7)])
    assert macro_auc(y, probs) == pytest.approx(common)
    # Counted, as every class present was before: the rare class's 0 pulls a third off the figure.
    assert multiclass_auroc(y, probs) == pytest.approx((2 * common + 0.0) / 3)
    # With the minimum reached it counts again.
    y, probs = scored(rare=MIN_CLASS_EXAMPLES)
    assert macro_auc(y, probs) == pytest.approx(multiclass_auroc(y, probs))


def test_the_reports_every_macro_leaves_it_out() -> None:
    y, probs = scored()
    judged = Judged.of("movielens")
    stars = np.asarray(STARS)[y]
    assert judged.auc(stars, probs) == macro_auc(y, probs)
    assert judged.metrics(stars, probs)[0] == macro_auc(y, probs)
    assert production_auc(y, probs, STARS) == macro_auc(y, probs)


def test_a_period_with_no_class_at_the_minimum_has_no_macro() -> None:
    y = np.r_[np.zeros(MIN_CLASS_EXAMPLES - 1, int), np.ones(MIN_CLASS_EXAMPLES - 1, int)]
    probs = np.random.default_rng(1).dirichlet(np.ones(3), size=y.size)
    assert np.isnan(macro_auc(y, probs))
    assert np.isnan(macro_auc(np.zeros(50, int), probs[:1].repeat(50, axis=0)))


def test_each_class_is_listed_per_period_in_the_macro_or_not() -> None:
    y, probs = scored()
    periods = pd.Series(["2000-01-01"] * len(y))
    figures = class_figures(y, {"flywheel": probs}, periods, STARS)

    assert figures["class"].tolist() == [0.5, 2.0, 4.0]
    rare = figures.set_index("class").loc[0.5]
    assert rare.examples == RARE and not rare.in_macro and rare.flywheel == 0.0
    assert figures.set_index("class").loc[[2.0, 4.0], "in_macro"].all()


def movielens_examples() -> tuple[pd.DataFrame, np.ndarray]:
    """Production examples of two months, as the report reads them: the rating, its month and
    the flywheel's probability of each class; the rare class in the first month only."""
    judged = Judged.of("movielens")
    frames, statics = [], []
    for month, seed in (("2000-01-01", 0), ("2000-02-01", 1)):
        y, probs = scored(rare=RARE if seed == 0 else 0, seed=seed)
        frame = pd.DataFrame(probs, columns=judged.scored_columns)
        frame[judged.spec.label] = np.asarray(STARS)[y]
        frame[judged.spec.time_column] = pd.Timestamp(month).date()
        frames.append(frame)
        statics.append(np.full_like(probs, 0.1))
    return pd.concat(frames, ignore_index=True), np.concatenate(statics)


def test_the_report_has_a_per_class_section_for_several_classes() -> None:
    examples, static = movielens_examples()
    judged = Judged.of("movielens")

    text, figures = judged.class_report(examples, static)

    assert text.startswith("## Per class")
    assert f"at least {MIN_CLASS_EXAMPLES} examples in that month" in text
    # Every class scored is a row: the rare one with its count, counted in no month's macro.
    rows = [line for line in text.splitlines() if line.startswith("|")][2:]
    assert len(rows) == len(STARS)
    half = next(r for r in rows if r.split("|")[1].strip() == "0.5")
    assert [c.strip() for c in half.split("|")[2:5]] == [str(RARE), "1", "0"]
    assert set(figures.columns) == {"week", "class", "examples", "flywheel", "static", "in_macro"}
    assert len(figures) == 3 + 2 and figures.in_macro.sum() == 4
    y = class_indices(examples.rating, STARS)
    assert figures.static.dropna().eq(0.5).all() and len(y) == 2 * 200 + RARE


def test_a_binary_report_has_no_per_class_section() -> None:
    judged = Judged.of("flights")
    examples = pd.DataFrame({"flywheel": [0.2, 0.7], judged.spec.label: [0, 1]})
    assert judged.class_report(examples, np.array([0.3, 0.4])) is None
    assert Judged.of("movielens").class_report(pd.DataFrame(), np.array([])) is None
