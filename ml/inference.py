"""Rebuild a predictor (preprocessor + network) from a training checkpoint alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ml.labels import score_of
from ml.models import TabularClassifier
from ml.preprocessing import Preprocessor


@dataclass
class Predictor:
    """Scores raw feature tables with the preprocessor and model stored in one checkpoint."""

    preprocessor: Preprocessor
    module: TabularClassifier
    batch_size: int = 65_536

    @classmethod
    def from_checkpoint(cls, path: str | Path, map_location: str = "cpu") -> Predictor:
        """Load the network weights, configs and fitted preprocessor from ``path``."""
        module = TabularClassifier.load_from_checkpoint(path, map_location=map_location)
        if module.preprocessor_state is None:
            raise ValueError(f"checkpoint {path} carries no preprocessor state")
        module.eval()
        return cls(Preprocessor.from_dict(module.preprocessor_state), module)

    @property
    def classes(self) -> tuple | None:
        """The label's classes (None: binary), column k of a multi-class ``predict_proba``
        being ``classes[k]``."""
        return self.preprocessor.features.classes

    def predict_proba(self, frame: pd.DataFrame) -> np.ndarray:
        """Return P(label = 1) for every row of ``frame`` as a float64 vector; for a label of
        K classes, an (n, K) float64 matrix of class probabilities (rows sum to 1)."""
        categorical, numeric = self.preprocessor.transform(frame)
        device = self.module.device
        out = []
        for start in range(0, len(frame), self.batch_size):
            cat = torch.from_numpy(categorical[start : start + self.batch_size]).to(device)
            num = torch.from_numpy(numeric[start : start + self.batch_size]).to(device)
            out.append(self.module.predict_proba(cat, num).cpu().numpy())
        if not out:
            k = self.preprocessor.features.n_outputs
            return np.zeros(0) if k == 1 else np.zeros((0, k))
        return np.concatenate(out).astype(np.float64)

    def predict_score(self, frame: pd.DataFrame) -> np.ndarray:
        """One score per row (``ml.labels.score_of``): P(label = 1) for binary, the expected
        class index over K - 1 for K classes."""
        return score_of(self.predict_proba(frame))


def load_predictor(path: str | Path, map_location: str = "cpu") -> Predictor:
    """Return a Predictor rebuilt from a checkpoint written by ``ml.training.train``."""
    return Predictor.from_checkpoint(path, map_location=map_location)
