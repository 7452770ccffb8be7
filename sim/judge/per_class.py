"""The report's figures of a label of several classes: the macro AUC each period is judged by,
and the one-vs-rest AUC and count of every class beside it.

A macro AUC gives every class the same weight. A class seen a handful of times in a period would
carry as much of that period's figure as the commonest, with an AUC that says more about chance
than about the model: so a class enters a period's macro only with `MIN_CLASS_EXAMPLES` examples
in it or more. The per-class table shows every class, counted in the macro or not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ml.metrics import class_aurocs, multiclass_auroc

# The one-vs-rest AUC of a class from n examples (and many more of the other classes) has a
# standard error near 0.3 / sqrt(n) for an AUC near 0.7 (Hanley and McNeil's): below this count it
# is wider than the gaps between the models the report compares, and one class's chance would
# outweigh them. The rarest star classes of a month of ratings fall below it.
MIN_CLASS_EXAMPLES = 20


def macro_auc(y_index: np.ndarray, probs: np.ndarray) -> float:
    """The report's macro one-vs-rest AUC of (n, K) `probs` on class indices `y_index`: over
    the classes with `MIN_CLASS_EXAMPLES` examples or more; NaN when none has (or `y_index`
    holds one class only)."""
    counts = np.bincount(np.asarray(y_index), minlength=probs.shape[1])
    if len(y_index) == 0 or not ((counts >= MIN_CLASS_EXAMPLES) & (counts < len(y_index))).any():
        return float("nan")
    return multiclass_auroc(y_index, probs, min_count=MIN_CLASS_EXAMPLES)


def class_figures(
    y_index: np.ndarray,
    scores: Mapping[str, np.ndarray],
    periods: pd.Series,
    classes: Sequence,
) -> pd.DataFrame:
    """Per period (`week`, as in the report's weekly table) and class: the class's examples,
    each model's one-vs-rest AUC (`scores`: (n, K) probabilities per model) and whether the
    class counts in the period's macro AUC."""
    rows = []
    for period in sorted(periods.unique()):
        at = np.flatnonzero((periods == period).to_numpy())
        aucs = {name: class_aurocs(y_index[at], probs[at]) for name, probs in scores.items()}
        counts = np.bincount(y_index[at], minlength=len(classes))
        for k, label in enumerate(classes):
            if counts[k] == 0:
                continue
            row = {"week": period, "class": label, "examples": int(counts[k])}
            row |= {name: float(auc[k]) for name, (auc, _) in aucs.items()}
            row["in_macro"] = bool(counts[k] >= MIN_CLASS_EXAMPLES and counts[k] < len(at))
            rows.append(row)
    return pd.DataFrame(rows)


def class_summary(
    figures: pd.DataFrame, y_index: np.ndarray, scores: Mapping[str, np.ndarray], classes: Sequence
) -> pd.DataFrame:
    """Per class over every period of `figures` (see `class_figures`): its examples, the periods
    it appeared in and those it counted in the macro AUC, and each model's one-vs-rest AUC on
    all the examples together."""
    aucs = {name: class_aurocs(y_index, probs)[0] for name, probs in scores.items()}
    rows = []
    for k, label in enumerate(classes):
        mine = figures[figures["class"] == label] if len(figures) else figures
        row = {
            "class": label,
            "examples": int(mine["examples"].sum()) if len(mine) else 0,
            "periods": len(mine),
            "in_macro": int(mine["in_macro"].sum()) if len(mine) else 0,
        }
        rows.append(row | {name: float(auc[k]) for name, auc in aucs.items()})
    return pd.DataFrame(rows)


def class_report(
    y_index: np.ndarray,
    scores: Mapping[str, np.ndarray],
    periods: pd.Series,
    classes: Sequence,
    period: str,
) -> tuple[str, pd.DataFrame]:
    """The report's section on the classes (each model's one-vs-rest AUC and the count of each
    class over all the `periods`, named `period`: week, month) and each period's figures
    (`class_figures`)."""
    figures = class_figures(y_index, scores, periods, classes)
    summary = class_summary(figures, y_index, scores, classes)
    text = (
        f"## Per class\n\nOne-vs-rest AUC of each class over every scored example of the "
        f"production {period}s, and its count (`examples`). A class counts in a {period}'s macro "
        f"AUC only with at least {MIN_CLASS_EXAMPLES} examples in that {period} (`in_macro`: "
        f"how many of the `periods` it appeared in); with fewer, its AUC says more about chance "
        f"than about the model, yet would weigh as much as the commonest class's. Each "
        f"{period}'s figures: `classes.csv`.\n\n"
        # The classes and counts as they are, the AUCs to three places.
        + summary.to_markdown(index=False, floatfmt=["g"] * 4 + [".3f"] * len(scores))
    )
    return text, figures
