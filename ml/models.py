"""TabularNet (a plain nn.Module) and the LightningModule that trains and evaluates it.

A binary label (``FeatureConfig.classes`` None) gets one logit per row, BCE and P(true); a label
of K >= 3 classes gets K logits per row, cross-entropy and (rows, K) probabilities.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import BinaryAUROC

from ml.config import ModelConfig, config_from_dict, config_to_dict
from ml.graphed import GraphedStep
from ml.layers import CategoricalEmbeddings, Dropout, ResidualBlock
from ml.validation_metrics import MacroAUROC

__all__ = [
    "CategoricalEmbeddings",
    "Dropout",
    "ResidualBlock",
    "TabularClassifier",
    "TabularEnsemble",
    "TabularNet",
    "build_net",
]

# The same clipping as ml.metrics.logloss, so network and baseline loglosses compare directly.
PROB_EPS = 1e-7


class TabularNet(nn.Module):
    """Categorical embeddings and numeric inputs feeding an MLP or residual MLP, and a head of
    ``n_outputs`` logits (1: binary)."""

    def __init__(
        self, cardinalities: list[int], n_numeric: int, config: ModelConfig, n_outputs: int = 1
    ):
        super().__init__()
        dims = [config.embedding_dim(card) for card in cardinalities]
        self.embedding = CategoricalEmbeddings(list(cardinalities), dims)
        n_in = n_numeric + self.embedding.out_features
        if config.arch == "mlp":
            layers: list[nn.Module] = []
            for i in range(config.depth):
                layers += [nn.Linear(n_in if i == 0 else config.width, config.width), nn.GELU()]
                layers.append(Dropout(config.dropout))
            self.body = nn.Sequential(*layers)
            n_out = config.width if config.depth > 0 else n_in
        elif config.arch == "resmlp":
            blocks = [ResidualBlock(config.width, config.dropout) for _ in range(config.depth)]
            self.body = nn.Sequential(
                nn.Linear(n_in, config.width), *blocks, nn.LayerNorm(config.width)
            )
            n_out = config.width
        else:
            raise ValueError(f"unknown arch {config.arch!r}")
        self.head = nn.Linear(n_out, n_outputs)

    def forward(self, categorical: Tensor, numeric: Tensor) -> Tensor:
        """Return one logit per row, or (rows, n_outputs) logits with several outputs."""
        x = torch.cat([self.embedding(categorical), numeric], dim=1)
        return self.head(self.body(x)).squeeze(-1)

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        # Checkpoints written before the single table hold one `embeddings.<j>.weight` a column.
        old = [f"{prefix}embeddings.{j}.weight" for j in range(len(self.embedding.dims))]
        if old and all(key in state_dict for key in old):
            columns = [state_dict.pop(key) for key in old]
            state_dict[f"{prefix}embedding.weight"] = self.embedding.table_from_columns(columns)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class TabularEnsemble(nn.Module):
    """``config.members`` TabularNets of one configuration, each from its own initialisation
    (drawn one after the other from the same generator: the first is the single network's), each
    trained on its own loss; the ensemble's probability is the members' mean probability.

    Averaging what independently initialised networks predict removes much of the variance one
    draw carries: replayed on a year's training sets, a few networks' mean probability ranks the
    next 14 days of production better than one network, trained separately or side by side as
    here (bench/training_sets.py; figures in docs/benchmarks.md). Each member's gradient is the
    one it would get alone, on its own sequence of batches (``TabularClassifier.row_orders``);
    gradient clipping, though, bounds the members' joint norm.
    """

    def __init__(
        self, cardinalities: list[int], n_numeric: int, config: ModelConfig, n_outputs: int = 1
    ):
        super().__init__()
        self.members = nn.ModuleList(
            TabularNet(cardinalities, n_numeric, config, n_outputs) for _ in range(config.members)
        )

    def member_logits(self, categorical: Tensor, numeric: Tensor) -> Tensor:
        """(rows, members) logits ((rows, members, K) with K outputs): every member on every
        row; or, for inputs stacked one batch per member ((members, rows, ...)), each member on
        its own rows."""
        if categorical.dim() == 3:
            if categorical.shape[0] != len(self.members):
                raise ValueError(
                    f"{categorical.shape[0]} stacked batches for {len(self.members)} members"
                )
            return torch.stack(
                [m(c, x) for m, c, x in zip(self.members, categorical, numeric, strict=True)], dim=1
            )
        return torch.stack([m(categorical, numeric) for m in self.members], dim=1)

    def forward(self, categorical: Tensor, numeric: Tensor) -> Tensor:
        """One logit per row: that of the members' mean probability; with K outputs, (rows, K)
        logits whose softmax is the members' mean probabilities."""
        logits = self.member_logits(categorical, numeric).float()
        if logits.dim() == 3:
            # log(mean softmax), the log of the mean over members of each class's probability.
            return torch.logsumexp(F.log_softmax(logits, -1), 1) - math.log(logits.shape[1])
        # log(mean p) - log(mean (1 - p)), without leaving log space.
        return torch.logsumexp(F.logsigmoid(logits), 1) - torch.logsumexp(F.logsigmoid(-logits), 1)


def build_net(
    cardinalities: list[int], n_numeric: int, config: ModelConfig, n_outputs: int = 1
) -> nn.Module:
    """A TabularNet, or a TabularEnsemble of ``config.members`` of them, of ``n_outputs``
    logits (1: binary; K >= 3: one per class)."""
    if config.members < 1:
        raise ValueError(f"members must be at least 1, not {config.members}")
    if n_outputs != 1 and n_outputs < 3:
        raise ValueError(f"n_outputs must be 1 (binary) or at least 3 classes, not {n_outputs}")
    if config.members == 1:
        return TabularNet(cardinalities, n_numeric, config, n_outputs)
    return TabularEnsemble(cardinalities, n_numeric, config, n_outputs)


class TabularClassifier(L.LightningModule):
    """Trains a TabularNet (or a TabularEnsemble of them) with BCE-with-logits (with
    ``n_outputs`` K >= 3: cross-entropy over K classes, labels being class indices) and logs
    train/loss, val/loss, val/auroc, val/logloss (multi-class: macro one-vs-rest AUROC and
    cross-entropy, as ``ml.metrics.multiclass_metrics``).

    The fitted preprocessor state travels in every checkpoint, so a checkpoint alone rebuilds a
    predictor (see ``ml.inference.load_predictor``).
    """

    def __init__(
        self,
        cardinalities: list[int],
        n_numeric: int,
        model: dict[str, Any] | ModelConfig | None = None,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        preprocessor: dict[str, Any] | None = None,
        n_outputs: int = 1,
    ):
        super().__init__()
        model_config = model if isinstance(model, ModelConfig) else None
        if model_config is None:
            model_config = config_from_dict(ModelConfig, model) if model else ModelConfig()
        # Plain dicts keep the hyperparameters loadable without this package's classes; a single
        # network's leave `members` out, so code from before ensembles still loads them.
        model_state = config_to_dict(model_config)
        if model_config.members == 1:
            model_state.pop("members")
        hparams = {
            "cardinalities": list(cardinalities),
            "n_numeric": n_numeric,
            "model": model_state,
            "lr": lr,
            "weight_decay": weight_decay,
        }
        # A binary model's hyperparameters stay as they were before multi-class models.
        self.save_hyperparameters(hparams | ({"n_outputs": n_outputs} if n_outputs != 1 else {}))
        self.n_outputs = n_outputs
        self.preprocessor_state = preprocessor
        self.net = build_net(list(cardinalities), n_numeric, model_config, n_outputs)
        # The epoch's summed loss stays on the device: a step adds to it without a host sync
        # or a host-to-device copy (a MeanMetric would do both, for its NaN check and weight).
        self._train_loss_sum: Tensor | None = None
        self._train_rows = 0
        self.step: GraphedStep | None = None
        self._clip: float | None = None
        self.val_loss = MeanMetric()
        self.val_logloss = MeanMetric()
        self.val_auroc = BinaryAUROC() if n_outputs == 1 else MacroAUROC(n_outputs)

    def forward(self, categorical: Tensor, numeric: Tensor) -> Tensor:
        """Return logits for a batch."""
        return self.net(categorical, numeric)

    def use_manual_step(self, clip: float | None) -> None:
        """Optimise by hand: ``GraphedStep`` computes each step's gradients (replaying a CUDA
        graph where the device allows, eagerly otherwise) and clips them to ``clip``;
        Lightning's own clipping must then be off. Set before ``fit``."""
        self.automatic_optimization = False
        self._clip = clip

    @property
    def members(self) -> int:
        """How many networks the model holds (``ModelConfig.members``)."""
        return len(self.net.members) if isinstance(self.net, TabularEnsemble) else 1

    @property
    def row_orders(self) -> int:
        """How many row orders a training epoch should give (``TabularDataModule``): one per
        member, so each member of an ensemble sees its own sequence of batches, as it would
        trained alone."""
        return self.members

    def _loss(self, batch: Sequence[Tensor]) -> Tensor:
        """The batch's loss; an ensemble's is the sum of its members' own losses, so each member
        gets the gradient it would get trained alone. A batch stacked one per member
        ((members, rows, ...), from ``row_orders`` orders) gives each member its own rows."""
        categorical, numeric, y = batch[:3]
        if isinstance(self.net, TabularEnsemble):
            logits = self.net.member_logits(categorical, numeric).float()
            # (rows, members) targets and weights, whether the members share the rows or not.
            targets = y.T if y.dim() == 2 else y.unsqueeze(1).expand(logits.shape[:2])
            losses = self._row_losses(logits, targets)
            if len(batch) > 3:
                weight = batch[3]
                losses = losses * (weight.T if weight.dim() == 2 else weight.unsqueeze(1))
            return losses.mean(0).sum()
        if categorical.dim() == 3:
            raise ValueError("batches stacked one per member, but the model is one network")
        logits = self(categorical, numeric).float()
        if len(batch) == 3:
            if self.n_outputs > 1:
                return F.cross_entropy(logits, y)
            return F.binary_cross_entropy_with_logits(logits, y)
        # Weighted rows: the training split's weights have mean 1 (ml.data), so the batch mean
        # of weight x loss estimates the weighted loss without a per-batch normalisation.
        losses = self._row_losses(logits, y)
        return (losses * batch[3]).mean()

    def _row_losses(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Unreduced losses: BCE of each logit against its 0/1 target, or the cross-entropy of
        the K logits in the last dimension against each class index."""
        if self.n_outputs == 1:
            return F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
        return F.cross_entropy(logits.movedim(-1, 1), targets, reduction="none")

    def on_fit_start(self) -> None:
        """Build the manual step (its graphs are captured in the first steps)."""
        if not self.automatic_optimization:
            params = [p for p in self.parameters() if p.requires_grad]
            self.step = GraphedStep(self._loss, params, self._clip)

    def training_step(self, batch: Sequence[Tensor], batch_idx: int) -> Tensor:
        """One optimisation step on a batch; the epoch mean is logged without per-step syncs."""
        if self.automatic_optimization:
            loss = self._loss(batch)
        else:
            assert self.step is not None, "use_manual_step needs on_fit_start"
            step = self.step
            optimizer = self.optimizers()
            losses: list[Tensor] = []
            optimizer.step(closure=lambda: losses.append(step(batch)))
            loss = losses[0]
        rows = batch[2].numel()
        # train/loss is a member's mean loss, whatever the number of members and row orders.
        summed = (
            loss.detach() * rows if self.members == 1 else loss.detach() * (rows / self.members)
        )
        if self._train_loss_sum is not None:
            summed = self._train_loss_sum + summed
        self._train_loss_sum = summed
        self._train_rows += rows
        return loss

    def on_train_epoch_start(self) -> None:
        """Start the epoch's training loss afresh."""
        self._train_loss_sum, self._train_rows = None, 0

    def on_train_epoch_end(self) -> None:
        """Log the epoch's mean training loss (one value, one host sync)."""
        if self._train_loss_sum is not None:
            mean = self._train_loss_sum / self._train_rows
            self.log("train/loss", mean, on_step=False, on_epoch=True, prog_bar=True)

    def teardown(self, stage: str) -> None:
        """Drop the manual step and its graphs (and their memory pools) when a fit ends,
        finished or interrupted by a pruned trial."""
        self.step = None

    def validation_step(self, batch: Sequence[Tensor], batch_idx: int) -> None:
        """Accumulate val/loss, val/logloss and val/auroc over the epoch; with row weights,
        both losses are weighted means (the AUROC is not weighted)."""
        categorical, numeric, y = batch[:3]
        weight = batch[3] if len(batch) > 3 else 1.0
        logits = self(categorical, numeric).float()
        if self.n_outputs > 1:
            log_probs = F.log_softmax(logits, -1)
            p_true = log_probs.gather(1, y.unsqueeze(1)).squeeze(1).exp()
            self.val_loss.update(F.nll_loss(log_probs, y, reduction="none"), weight)
            self.val_logloss.update(-p_true.clamp(PROB_EPS, 1 - PROB_EPS).log(), weight)
            self.val_auroc.update(log_probs.exp(), y)
        else:
            probs = torch.sigmoid(logits).clamp(PROB_EPS, 1 - PROB_EPS)
            losses = F.binary_cross_entropy_with_logits(logits, y, reduction="none")
            self.val_loss.update(losses, weight)
            self.val_logloss.update(-(y * probs.log() + (1 - y) * (1 - probs).log()), weight)
            self.val_auroc.update(probs, y.long())
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True)
        self.log("val/logloss", self.val_logloss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/auroc", self.val_auroc, on_step=False, on_epoch=True, prog_bar=True)

    @torch.no_grad()
    def predict_proba(self, categorical: Tensor, numeric: Tensor) -> Tensor:
        """Return P(label = 1) per row; with K outputs, (rows, K) class probabilities."""
        logits = self(categorical, numeric).float()
        return torch.softmax(logits, -1) if self.n_outputs > 1 else torch.sigmoid(logits)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """AdamW with the configured learning rate and weight decay, fused (one kernel a step on
        CUDA; on the CPU it is also cheaper than the per-parameter loop) unless Lightning
        clips the gradients under its mixed-precision plugin, which refuses a fused optimizer
        (it would unscale them itself): there, the per-parameter loop."""
        trainer = self._trainer
        clipped_amp = (
            trainer is not None
            and self.automatic_optimization
            and isinstance(trainer.precision_plugin, MixedPrecision)
            and bool(trainer.gradient_clip_val)
        )
        return torch.optim.AdamW(
            self.parameters(),
            lr=self.hparams["lr"],
            weight_decay=self.hparams["weight_decay"],
            fused=not clipped_amp,
        )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Store the fitted preprocessor beside the weights."""
        checkpoint["preprocessor"] = self.preprocessor_state

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the preprocessor state saved by ``on_save_checkpoint``."""
        self.preprocessor_state = checkpoint.get("preprocessor")
