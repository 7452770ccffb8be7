"""TabularNet (a plain nn.Module) and the LightningModule that trains and evaluates it."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import BinaryAUROC

from ml.config import ModelConfig, config_from_dict, config_to_dict

# The same clipping as ml.metrics.logloss, so network and baseline loglosses compare directly.
PROB_EPS = 1e-7


class ResidualBlock(nn.Module):
    """Pre-norm residual block: x + Dropout(Linear(GELU(Linear(LayerNorm(x)))))."""

    def __init__(self, width: int, dropout: float):
        super().__init__()
        self.body = nn.Sequential(
            nn.LayerNorm(width),
            nn.Linear(width, width),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(width, width),
        )

    def forward(self, x: Tensor) -> Tensor:
        """Add the block's residual to its input."""
        return x + self.body(x)


class TabularNet(nn.Module):
    """Per-column categorical embeddings and numeric inputs feeding an MLP or residual MLP."""

    def __init__(self, cardinalities: list[int], n_numeric: int, config: ModelConfig):
        super().__init__()
        self.embeddings = nn.ModuleList(
            nn.Embedding(card, config.embedding_dim(card)) for card in cardinalities
        )
        n_in = n_numeric + sum(e.embedding_dim for e in self.embeddings)
        if config.arch == "mlp":
            layers: list[nn.Module] = []
            for i in range(config.depth):
                layers += [nn.Linear(n_in if i == 0 else config.width, config.width), nn.GELU()]
                layers.append(nn.Dropout(config.dropout))
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
        self.head = nn.Linear(n_out, 1)

    def forward(self, categorical: Tensor, numeric: Tensor) -> Tensor:
        """Return one logit per row."""
        embedded = [emb(categorical[:, j]) for j, emb in enumerate(self.embeddings)]
        x = torch.cat([*embedded, numeric], dim=1)
        return self.head(self.body(x)).squeeze(-1)


class TabularClassifier(L.LightningModule):
    """Trains TabularNet with BCE-with-logits and logs train/loss, val/loss, val/auroc, val/logloss.

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
    ):
        super().__init__()
        model_config = model if isinstance(model, ModelConfig) else None
        if model_config is None:
            model_config = config_from_dict(ModelConfig, model) if model else ModelConfig()
        # Plain dicts keep the hyperparameters loadable without this package's classes.
        self.save_hyperparameters(
            {
                "cardinalities": list(cardinalities),
                "n_numeric": n_numeric,
                "model": config_to_dict(model_config),
                "lr": lr,
                "weight_decay": weight_decay,
            }
        )
        self.preprocessor_state = preprocessor
        self.net = TabularNet(list(cardinalities), n_numeric, model_config)
        self.train_loss = MeanMetric()
        self.val_loss = MeanMetric()
        self.val_logloss = MeanMetric()
        self.val_auroc = BinaryAUROC()

    def forward(self, categorical: Tensor, numeric: Tensor) -> Tensor:
        """Return logits for a batch."""
        return self.net(categorical, numeric)

    def training_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int) -> Tensor:
        """One optimisation step on a batch; the epoch mean is logged without per-step syncs."""
        categorical, numeric, y = batch
        loss = F.binary_cross_entropy_with_logits(self(categorical, numeric).float(), y)
        self.train_loss.update(loss.detach(), weight=y.shape[0])
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int) -> None:
        """Accumulate val/loss, val/logloss and val/auroc over the epoch."""
        categorical, numeric, y = batch
        logits = self(categorical, numeric).float()
        probs = torch.sigmoid(logits).clamp(PROB_EPS, 1 - PROB_EPS)
        self.val_loss.update(F.binary_cross_entropy_with_logits(logits, y, reduction="none"))
        self.val_logloss.update(-(y * probs.log() + (1 - y) * (1 - probs).log()))
        self.val_auroc.update(probs, y.long())
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True)
        self.log("val/logloss", self.val_logloss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/auroc", self.val_auroc, on_step=False, on_epoch=True, prog_bar=True)

    @torch.no_grad()
    def predict_proba(self, categorical: Tensor, numeric: Tensor) -> Tensor:
        """Return P(label = 1) per row."""
        return torch.sigmoid(self(categorical, numeric).float())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """AdamW with the configured learning rate and weight decay."""
        return torch.optim.AdamW(
            self.parameters(), lr=self.hparams["lr"], weight_decay=self.hparams["weight_decay"]
        )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Store the fitted preprocessor beside the weights."""
        checkpoint["preprocessor"] = self.preprocessor_state

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the preprocessor state saved by ``on_save_checkpoint``."""
        self.preprocessor_state = checkpoint.get("preprocessor")
