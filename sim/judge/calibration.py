"""Calibration of the live scores under a moving late rate, and of their prior-shift correction.

The flights' late rate moves from 13% in September to 32% in December, while a model keeps the
late rate of the labels it trained on until it is replaced: its scores are then too low or too
high as a whole, however well they rank. The report measures, per week, the expected
calibration error (ECE, ten equal-width bins) of the live scores (`probability`), and of the
scores the loop serves corrected for the shift of the prior (`calibrated_probability`, each
day's moved by the uniform labels of the 14 days before it:
pipelines/monitoring/recalibration.py), with the corrected scores' log loss. Binary labels only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ml.metrics import expected_calibration_error, logloss


def weekly_calibration(
    y: np.ndarray, week: pd.Series, columns: dict[str, np.ndarray]
) -> pd.DataFrame:
    """Per week: the ECE of each of `columns`' scores (`<name>_ece`) and, for the corrected
    scores, their log loss too (`corrected_logloss`)."""
    rows = []
    for period in sorted(week.unique()):
        at = np.flatnonzero((week == period).to_numpy())
        row: dict = {"week": period}
        for name, probs in columns.items():
            row[f"{name}_ece"] = expected_calibration_error(y[at], probs[at])
        if "corrected" in columns:
            row["corrected_logloss"] = logloss(y[at], columns["corrected"][at])
        rows.append(row)
    return pd.DataFrame(rows)
