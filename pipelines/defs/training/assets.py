"""The challenger model: tuned with Optuna, tracked and registered in MLflow."""

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pandas as pd
import pyarrow.parquet as pq

from ml.config import FeatureConfig, ModelConfig, TrainConfig, TuneConfig
from ml.model_cache import CacheEntry, ModelCache, cache_key
from pipelines.lib.asset_keys import task_key, task_prefix
from pipelines.lib.datasets import DvcDatasetStore
from pipelines.lib.registry import DATASET_TAG, log_baselines, registered_name, seal
from pipelines.lib.runs import earlier_attempts
from pipelines.lib.tracking import MlflowTracker, TuningStorage, git_commit
from pipelines.lib.tuning_workers import DatasetRef, TuningWorkers, datamodule_for
from pipelines.settings import retraining_default

# torch, Lightning and scikit-learn load in the training step only, not in every step process
# that loads the code location.
if TYPE_CHECKING:
    from ml.challenger import Challenger
    from ml.time_tracking import TimeTrend

GROUP = "training"
TRAINING_POOL = "training"
DATASET = "training_dataset"
# A Kubernetes run launcher or executor gives the training step's pod one GPU, on a node labelled
# and tainted for GPUs (deploy/helm/README.md); other pods stay off those nodes.
GPU_TAGS = {
    "dagster-k8s/config": {
        "container_config": {"resources": {"limits": {"nvidia.com/gpu": "1"}}},
        "pod_spec_config": {
            "node_selector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }
}


class TrainingConfig(dg.Config):
    """What an operator may turn for one training run; everything else is an ml default."""

    n_trials: int = retraining_default("FLYWHEEL_TRIALS")
    timeout_s: float | None = None
    max_epochs: int = retraining_default("FLYWHEEL_MAX_EPOCHS")
    # Networks in the challenger: the best trial's configuration trained this many times side by
    # side, from their own initialisations, and averaged (ml.models.TabularEnsemble).
    members: int = retraining_default("FLYWHEEL_MEMBERS")
    seed: int = 0
    # Workers on the study (processes, or pods on Kubernetes); above 1 they need an RDB storage
    # (heartbeats, retries).
    workers: int = retraining_default("FLYWHEEL_TUNING_WORKERS")
    # A small dataset trains in smaller batches, so that every epoch takes at least this many
    # optimizer steps (a bootstrap's 900 training rows at a batch of 1,024 would take one).
    min_steps_per_epoch: int = 32
    # A folder of challengers shared by runs that would train the same one (the same dataset
    # version, seed and settings: ml.model_cache), e.g. the plays of one policy comparison;
    # none: every run trains its own.
    model_cache: str | None = None


@dataclass(frozen=True)
class TrainingDataset:
    """The latest materialization of the training dataset: its folder and DVC hash."""

    path: Path
    dvc_hash: str

    def split(self, name: str) -> Path:
        """The Parquet file of split `name` (train, validation, test)."""
        return self.path / f"{name}.parquet"


def latest_dataset(
    instance: dg.DagsterInstance, store: DvcDatasetStore, task_name: str
) -> TrainingDataset:
    """The version recorded by the latest `training_dataset` materialization of `task_name`,
    fetched by its DVC hash from the remote (cached by hash): a step on another machine or pod
    than the dataset step's trains on exactly that version's files."""
    key = task_key(task_name, DATASET)
    event = instance.get_latest_materialization_event(key)
    if event is None or event.asset_materialization is None:
        raise dg.Failure(f"{key.to_user_string()} was never materialized: materialize it first")
    metadata = event.asset_materialization.metadata
    if "dvc_hash" not in metadata:
        raise dg.Failure(f"{key.to_user_string()} metadata lacks 'dvc_hash'")
    dvc_hash = str(metadata["dvc_hash"].value)
    return TrainingDataset(store.fetch(dvc_hash), dvc_hash)


def time_tracking(
    dataset: TrainingDataset, features: FeatureConfig, time_column: str
) -> list["TimeTrend"]:
    """The numeric features that track time over the partitions (`time_column`) the challenger
    is fit on (train and validation; ml.time_tracking)."""
    from ml.time_tracking import time_tracking_features

    columns = [*features.numeric, time_column]
    frame = pd.concat(
        [
            pd.read_parquet(dataset.split(split), columns=columns)
            for split in ("train", "validation")
        ]
    )
    return time_tracking_features(frame, features.numeric, time_column)


def warn_time_tracking(log: dg.DagsterLogManager, flagged: list["TimeTrend"]) -> None:
    """A warning in the run's log for each feature that tracks time: not a refusal."""
    for trend in flagged:
        log.warning(
            f"{trend.describe()}: it stands in for the date, so production will bring values "
            "past those the model learned (drift on every day, a decaying model); a running "
            "count is better kept over a trailing window"
        )


def ml_configs(
    config: TrainingConfig, study_name: str, storage: TuningStorage
) -> tuple[TuneConfig, TrainConfig]:
    """Turn the run config into the tuning and training configs of `ml`."""
    tune = TuneConfig(
        n_trials=config.n_trials,
        timeout_s=config.timeout_s,
        storage=storage.for_study(study_name),
        study_name=study_name,
        sampler_seed=config.seed,
        workers=config.workers,
    )
    return tune, TrainConfig(max_epochs=config.max_epochs, seed=config.seed)


def train_or_reuse(
    config: TrainingConfig, dataset_hash: str, fit: Callable[[], "Challenger"]
) -> CacheEntry:
    """The challenger of `dataset_hash` with the run config's seed and settings: from its model
    cache where a run trained it already, else trained by `fit` (and stored there)."""
    began = time.monotonic()
    # A tuning cut by a clock is not a function of its inputs: never cached.
    if not config.model_cache or config.timeout_s is not None:
        return CacheEntry(fit(), time.monotonic() - began, hit=False)
    cache = ModelCache(config.model_cache)
    settings = config.model_dump(exclude={"model_cache", "seed"})
    key = cache_key(dataset_hash, config.seed, settings)
    if (entry := cache.load(key)) is not None:
        return entry
    challenger = fit()
    inputs = {"dataset": dataset_hash, "seed": config.seed, **settings}
    return cache.store(key, challenger, time.monotonic() - began, inputs)


def results_metadata(
    challenger: "Challenger", registered: str, version: int, run_id: str, run_url: str | None
) -> dict[str, object]:
    """Materialization metadata: the challenger beside the baselines, and where it is tracked."""
    rows = [{"model": f"challenger ({challenger.model_config.arch})", **challenger.metrics}]
    rows += [{"model": name, **scores} for name, scores in challenger.baselines.items()]
    tuning = challenger.tuning
    return {
        "registered_model": f"models:/{registered}/{version}",
        "registered_model_version": version,
        "mlflow_run_id": run_id,
        "mlflow_run": dg.MetadataValue.url(run_url) if run_url else f"runs:/{run_id}",
        "best_params": dg.MetadataValue.json(tuning.best_params),
        "val/auroc": challenger.metrics["auroc"],
        "val/logloss": challenger.metrics["logloss"],
        "validation_metrics": dg.MetadataValue.md(
            pd.DataFrame(rows).to_markdown(index=False, floatfmt=".4f")
        ),
        "study": tuning.study_name,
        "trials_complete": tuning.n_complete,
        "trials_pruned": tuning.n_pruned,
        "tuning_compute_seconds": round(tuning.total_compute_seconds, 3),
        "device": challenger.fit.device,
    }


def build_training_assets(
    task_name: str, features: FeatureConfig, time_column: str
) -> list[dg.AssetsDefinition]:
    """The training assets of `task_name`: the challenger model trained on its dataset, whose
    partitions are `time_column`'s values."""
    registered = registered_name(task_name)

    @dg.asset(
        name="challenger_model",
        key_prefix=task_prefix(task_name),
        group_name=GROUP,
        deps=[task_key(task_name, DATASET)],
        kinds={"pytorch", "mlflow", "optuna"},
        op_tags=GPU_TAGS,
        pool=TRAINING_POOL,
    )
    def challenger_model(
        context: dg.AssetExecutionContext,
        config: TrainingConfig,
        tracker: MlflowTracker,
        tuning_storage: TuningStorage,
        dataset_store: DvcDatasetStore,
        tuning_workers: TuningWorkers,
    ) -> dg.MaterializeResult:
        """Tune, fit the best on train and validation, register it as the challenger."""
        from ml.challenger import fit_challenger

        dataset = latest_dataset(context.instance, dataset_store, task_name)
        flagged = time_tracking(dataset, features, time_column)
        warn_time_tracking(context.log, flagged)
        # One study per dataset version: a retried run resumes it, a larger n_trials extends it.
        study = f"{task_name}-{dataset.dvc_hash[:12]}"
        tune_config, train_config = ml_configs(config, study, tuning_storage)
        datamodule = datamodule_for(dataset.path, features, config.seed, config.min_steps_per_epoch)
        # The batch the data module trains with, as the run's parameters record it.
        train_config = replace(train_config, batch_size=datamodule.batch_size)
        launcher = tuning_workers.launcher(
            DatasetRef(task_name, dataset.dvc_hash, config.seed, config.min_steps_per_epoch),
            context.run_id,
        )
        # An earlier attempt killed mid-training left its MLflow run RUNNING: it ends here.
        tracker.end_abandoned(earlier_attempts(context.instance, context.run))
        tags = {
            DATASET_TAG: dataset.dvc_hash,
            "git.commit": git_commit(),
            "dagster.run_id": context.run_id,
        }
        with (
            tracker.start_run(run_name=f"{registered}-{context.run_id[:8]}", tags=tags) as run,
            tempfile.TemporaryDirectory() as checkpoints,
        ):
            callback = tracker.trial_callback(run.info.run_id, train_config.monitor)
            trained = train_or_reuse(
                config,
                dataset.dvc_hash,
                lambda: fit_challenger(
                    datamodule,
                    tune_config,
                    ModelConfig(),
                    train_config,
                    checkpoints,
                    trial_callback=callback,
                    launcher=launcher,
                    members=config.members,
                ),
            )
            challenger = trained.result
            version = log_challenger(
                tracker, run.info.run_id, challenger, dataset, registered, features
            )
        metadata = results_metadata(
            challenger, registered, version, run.info.run_id, tracker.run_url(run.info.run_id)
        )
        cached = config.model_cache and config.timeout_s is None
        cache = "hit" if trained.hit else ("stored" if cached else "off")
        return dg.MaterializeResult(
            metadata={
                **metadata,
                "dataset_dvc_hash": dataset.dvc_hash,
                "model_cache": cache,
                "time_tracking_features": dg.MetadataValue.json([t.as_dict() for t in flagged]),
                # What training the challenger took, in the run that trained it.
                "training_seconds": round(trained.seconds, 3),
            },
            data_version=dg.DataVersion(f"{registered}/{version}"),
        )

    return [challenger_model]


def log_challenger(
    tracker: MlflowTracker,
    run_id: str,
    challenger: "Challenger",
    dataset: TrainingDataset,
    registered: str,
    features: FeatureConfig,
) -> int:
    """Log the challenger's parameters, metrics and model to the run; return its new version."""
    # Imported here: logging a model pulls in the MLflow model flavours, which loading the
    # definitions does not need.
    from ml.pyfunc import log_model

    fit = challenger.train_config
    settings = {
        "max_epochs": fit.max_epochs,
        "batch_size": fit.batch_size,
        "seed": fit.seed,
        "members": challenger.model_config.members,
    }
    tracker.log_params(run_id, challenger.tuning.best_params | settings)
    baselines = {
        f"baseline/{name}/{metric}": value
        for name, scores in challenger.baselines.items()
        for metric, value in scores.items()
    }
    val = {f"val/{metric}": value for metric, value in challenger.metrics.items()}
    tuning = {"tuning/compute_seconds": challenger.tuning.total_compute_seconds}
    # The final fit's learning curve has its own names: it trains on the validation rows too, so
    # its scores there are not validation scores; val/* are the best trial's.
    curve = [
        {
            "epoch": record["epoch"],
            **{f"final_fit/{k}": v for k, v in record.items() if k != "epoch"},
        }
        for record in challenger.fit.history
    ]
    tracker.log_metrics(run_id, val | baselines | tuning, curve)
    examples = next(pq.ParquetFile(dataset.split("validation")).iter_batches(5)).to_pandas()
    log_baselines(tracker, run_id, challenger.fitted_baselines)
    info = log_model(challenger.checkpoint, examples, registered, features)
    version = int(info.registered_model_version)
    seal(tracker, registered, version)
    return version
