"""Epoch-level validation metrics the Lightning module logs that torchmetrics lacks as needed."""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.functional.classification import binary_auroc
from torchmetrics.utilities import dim_zero_cat


class MacroAUROC(Metric):
    """Macro one-vs-rest AUROC over an epoch's rows, as ``ml.metrics.multiclass_auroc``: a
    class absent from the targets (or the only one present) is skipped. torchmetrics'
    ``MulticlassAUROC`` scores such a class 0 and averages it in, which would make a validation
    set without the rarest rating look worse than it ranks. NaN when no class has both."""

    full_state_update = False

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = num_classes
        self.add_state("probs", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, probs: Tensor, target: Tensor) -> None:
        """Keep a batch's (rows, K) probabilities and class indices."""
        self.probs.append(probs.detach().float())
        self.target.append(target.detach())

    def compute(self) -> Tensor:
        """The mean of the per-class one-vs-rest AUROCs over the classes that have one."""
        probs, target = dim_zero_cat(self.probs), dim_zero_cat(self.target)
        scores = []
        for k in range(self.num_classes):
            positive = target == k
            if 0 < int(positive.sum()) < target.numel():
                scores.append(binary_auroc(probs[:, k], positive.long(), thresholds=None))
        if not scores:
            return torch.tensor(float("nan"), device=probs.device)
        return torch.stack(scores).mean()
