"""Configuration dataclasses of the data, the model, training and tuning."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class FeatureConfig:
    """Which columns of a split table are features, the label and identifiers."""

    categorical: tuple[str, ...]
    numeric: tuple[str, ...]
    label: str
    id_columns: tuple[str, ...] = ()
    # A column of per-row training weights (importance weights for labels that were not drawn
    # uniformly); None: every row weighs the same.
    weight: str | None = None
    # Categories seen fewer times than this in train share the out-of-vocabulary bucket.
    min_category_frequency: int = 1
    # None: a binary label (0/1 or booleans). Otherwise the label's K >= 3 values, in order
    # (an ordinal rating's, lowest first): the label column holds one of them per row, and
    # models predict K probabilities, column k for ``classes[k]``.
    classes: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.classes is not None:
            # Plain Python values (numpy scalars' .item()): the config stays JSON as it is.
            plain = tuple(
                v.item() if callable(getattr(v, "item", None)) else v for v in self.classes
            )
            object.__setattr__(self, "classes", plain)
            if len(self.classes) < 3:
                raise ValueError(
                    f"classes must list at least 3 label values (None for a binary label), "
                    f"got {self.classes!r}"
                )
            if len(set(self.classes)) != len(self.classes):
                raise ValueError(f"classes must be distinct, got {self.classes!r}")

    @property
    def n_outputs(self) -> int:
        """How many outputs a model of this label has: 1 (P(true)) for binary, else K."""
        return 1 if self.classes is None else len(self.classes)


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the tabular network."""

    arch: Literal["mlp", "resmlp"] = "resmlp"
    width: int = 128
    depth: int = 2
    dropout: float = 0.1
    embedding_dim_max: int = 16
    embedding_dim_min: int = 2
    # Networks of this configuration trained side by side from their own random initialisations;
    # the model's probability is their mean (a deep ensemble). 1: one network.
    members: int = 1

    def embedding_dim(self, cardinality: int) -> int:
        """Return the embedding width for a vocabulary size (fast.ai's 1.6 * n^0.56, clipped)."""
        dim = round(1.6 * cardinality**0.56)
        return max(self.embedding_dim_min, min(self.embedding_dim_max, dim))


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and hardware settings for one training run."""

    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 1024
    max_epochs: int = 20
    accumulate_grad_batches: int = 1
    # "auto" resolves to bf16-mixed on CUDA devices with bf16 support and 32-true elsewhere.
    precision: str = "auto"
    accelerator: str = "auto"
    devices: int | str = 1
    # "auto" becomes DDP when more than one device is configured.
    strategy: str = "auto"
    seed: int = 0
    early_stopping_patience: int | None = 5
    monitor: str = "val/logloss"
    checkpoint_dir: str | None = None
    # Deterministic kernels cost speed on GPUs; CPU training is deterministic without it.
    deterministic: bool = False
    gradient_clip_val: float | None = 1.0
    # "graphed": each step's forward, backward and clipping replayed as a CUDA graph (manual
    # optimisation; eager where no graph can be used, said in the log). "plain": Lightning's
    # automatic optimisation. "auto": graphed on one CUDA device without gradient accumulation
    # or fp16 loss scaling, plain elsewhere.
    step: Literal["auto", "graphed", "plain"] = "auto"


@dataclass(frozen=True)
class SearchSpace:
    """Bounds of the hyperparameter search (one Optuna objective reads all of them)."""

    lr: tuple[float, float] = (1e-4, 3e-2)
    weight_decay: tuple[float, float] = (1e-6, 1e-2)
    width: tuple[int, ...] = (64, 128, 256)
    depth: tuple[int, int] = (1, 4)
    dropout: tuple[float, float] = (0.0, 0.4)
    arch: tuple[str, ...] = ("mlp", "resmlp")


@dataclass(frozen=True)
class TuneConfig:
    """Budget, storage and pruning settings of a hyperparameter study."""

    n_trials: int | None = 20
    timeout_s: float | None = None
    # A file path selects a journal file; anything with "://" is an RDB URL passed to Optuna.
    storage: str = ".flywheel/optuna/study.journal"
    study_name: str = "study"
    # Each queued trial draws its configuration from this seed, the study's name and the trial's
    # slot (ml.tuning.slot_seed): the same draws in any worker, and after a kill.
    sampler_seed: int = 0
    min_resource: int = 1
    # The Hyperband maximum resource is TrainConfig.max_epochs, so both cannot disagree.
    reduction_factor: int = 3
    pruning: bool = True
    search_space: SearchSpace = field(default_factory=SearchSpace)
    # A new study's first trial is the ModelConfig and TrainConfig it was given (when inside
    # the search space); the others are sampled.
    defaults_first: bool = True
    # Worker processes on the study (ml.tuning.tune starts them); 1 tunes in this process.
    workers: int = 1
    # On an RDB storage each running trial beats every heartbeat_interval_s; one silent for
    # grace_period_s (its worker was killed) is failed and retried up to max_retry times.
    heartbeat_interval_s: int = 5
    grace_period_s: int = 20
    max_retry: int = 2


def config_to_dict(config: Any) -> dict[str, Any]:
    """Return a JSON-serialisable dict of a (possibly nested) config dataclass."""
    return asdict(config)


def config_from_dict(cls: type[T], state: dict[str, Any]) -> T:
    """Rebuild a flat config dataclass from ``config_to_dict`` output (lists back to tuples)."""
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in state.items()})
