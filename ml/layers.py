"""The tabular network's building blocks: CPU dropout, residual blocks, one embedding table."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Dropout(nn.Dropout):
    """``nn.Dropout`` whose training mask on the CPU is drawn with ``torch.rand_like``.

    torch's CPU ``bernoulli_``, behind ``nn.Dropout``, was a large share of a CPU training step
    of this network, and a uniform draw and a comparison cost a fraction of it. The same
    distribution (each element kept with probability 1 - p and scaled by 1 / (1 - p)), the same
    seeded generator, another sequence of masks. Other devices, other dtypes than float32 and
    float64 (a bf16 uniform draw rounds to 1.0 too often), evaluation and p = 0 or 1 are
    ``nn.Dropout``'s own.
    """

    def forward(self, input: Tensor) -> Tensor:
        """Drop and rescale ``input``'s elements in training (see the class)."""
        if (
            not self.training
            or input.device.type != "cpu"
            or input.dtype not in (torch.float32, torch.float64)
            or not 0 < self.p < 1
        ):
            return super().forward(input)
        keep = torch.rand_like(input).ge_(self.p).mul_(1.0 / (1.0 - self.p))
        return input.mul_(keep) if self.inplace else input * keep


class ResidualBlock(nn.Module):
    """Pre-norm residual block: x + Dropout(Linear(GELU(Linear(LayerNorm(x)))))."""

    def __init__(self, width: int, dropout: float):
        super().__init__()
        self.body = nn.Sequential(
            nn.LayerNorm(width),
            nn.Linear(width, width),
            nn.GELU(),
            Dropout(dropout),
            nn.Linear(width, width),
        )

    def forward(self, x: Tensor) -> Tensor:
        """Add the block's residual to its input."""
        return x + self.body(x)


class CategoricalEmbeddings(nn.Module):
    """Every categorical column's embedding in one table: one lookup and one backward a step.

    Column j owns rows ``offsets[j]`` .. ``offsets[j] + cardinality_j`` and the first ``dims[j]``
    columns of the table; the output is each column's embedding, in column order, exactly as one
    ``nn.Embedding(cardinality_j, dims[j])`` per column concatenated (and initialised with the
    same random draws). Seven small tables would cost seven lookups and seven sorting backwards,
    a large share of a graphed step's GPU time.
    """

    def __init__(self, cardinalities: list[int], dims: list[int]):
        super().__init__()
        self.cardinalities, self.dims = list(cardinalities), list(dims)
        width = max(dims, default=0)
        starts = [sum(cardinalities[:j]) for j in range(len(cardinalities))]
        self.weight = nn.Parameter(torch.zeros(sum(cardinalities), width))
        with torch.no_grad():
            for start, card, dim in zip(starts, cardinalities, dims, strict=True):
                # The draws, order and shapes of nn.Embedding's own initialisation.
                self.weight[start : start + card, :dim] = torch.empty(card, dim).normal_()
        used = [j * width + d for j, dim in enumerate(dims) for d in range(dim)]
        self.register_buffer("offsets", torch.tensor(starts, dtype=torch.long), persistent=False)
        self.register_buffer("used", torch.tensor(used, dtype=torch.long), persistent=False)

    @property
    def out_features(self) -> int:
        """Width of the concatenated embeddings."""
        return sum(self.dims)

    def forward(self, categorical: Tensor) -> Tensor:
        """(rows, columns) category codes to (rows, sum of dims) embeddings."""
        rows = F.embedding(categorical + self.offsets, self.weight)
        return rows.flatten(1).index_select(1, self.used)

    def table_from_columns(self, columns: list[Tensor]) -> Tensor:
        """The table holding per-column embedding weights (the former layout's parameters)."""
        table = torch.zeros_like(self.weight)
        start = 0
        for weight in columns:
            table[start : start + weight.shape[0], : weight.shape[1]] = weight
            start += weight.shape[0]
        return table
