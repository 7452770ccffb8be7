"""Where a challenger's tuning workers run: processes beside the training step, or the pods of
one Kubernetes Job.

Both run the same worker (`ml.tuning.run_worker`) on the same study in the RDB study storage,
whose heartbeats fail and retry the trial of a worker that was killed. A pod has nothing but the
image, its settings (the `flywheel-env` ConfigMap and `flywheel-secrets` Secret) and the spec
in `FLYWHEEL_TUNING_SPEC`: it fetches the dataset version named by its DVC hash from the remote
and builds the same datamodule the step built (`python -m pipelines.tuning_pod`).

The Job's spec holds no secret, since whoever may read Jobs would read it: the study's storage
(an RDB URL with its password) is left out of the worker spec, and each pod takes it from the
Secret's `FLYWHEEL_OPTUNA_STORAGE` key.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import PrivateAttr

from pipelines.lib.errors import ConfigurationError, redact
from pipelines.settings import OPTUNA_STORAGE

if TYPE_CHECKING:  # torch and Lightning load in the training step only
    from kubernetes import client as k8s

    from ml.config import FeatureConfig
    from ml.data import TabularDataModule
    from ml.tuning import WorkerLauncher, WorkersOutcome

SPEC_VARIABLE = "FLYWHEEL_TUNING_SPEC"
# Kubernetes sets it in each pod of an Indexed Job: the worker's number, 0 .. workers - 1.
INDEX_VARIABLE = "JOB_COMPLETION_INDEX"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# Where a pod keeps the dataset it fetched (an emptyDir volume).
SCRATCH = "/scratch"
# A pod's root file system is read-only: it writes only to its empty folders, SCRATCH and
# these (its temporary files and the caches flywheel-env points at /tmp).
WRITABLE = {"tmp": "/tmp"}
# A pod that cannot start for one of these reasons never will: the Job is deleted and the step
# fails naming it, rather than waiting forever.
CANNOT_START = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
# Pods ended by the node rather than by their worker: lost, like a worker killed by a signal.
POD_LOST_REASONS = frozenset({"Evicted", "NodeLost", "Preempting", "Shutdown", "Terminated"})


@dataclass(frozen=True)
class DatasetRef:
    """The dataset a study tunes on, as a worker elsewhere finds it: by the DVC hash."""

    task: str
    dvc_hash: str
    seed: int
    min_steps_per_epoch: int = 1


def datamodule_for(
    folder: Path, features: FeatureConfig, seed: int, min_steps_per_epoch: int = 1
) -> TabularDataModule:
    """The datamodule the challenger is tuned and refitted on: the version's train and
    validation files (the training step and every worker build it alike)."""
    from ml.data import TabularDataModule

    return TabularDataModule(
        folder / "train.parquet",
        folder / "validation.parquet",
        features=features,
        seed=seed,
        min_steps_per_epoch=min_steps_per_epoch,
    )


class TuningWorkers(dg.ConfigurableResource, ABC):
    """Starts the workers of a challenger's study (`TrainingConfig.workers` of them)."""

    @abstractmethod
    def launcher(self, dataset: DatasetRef, run_id: str) -> WorkerLauncher:
        """The launcher for one tuning of `dataset` in run `run_id`."""


class LocalTuningWorkers(TuningWorkers):
    """Worker processes on the training step's machine, handed the step's datamodule."""

    def launcher(self, dataset: DatasetRef, run_id: str) -> WorkerLauncher:
        """Processes (`python -m ml.tuning work`)."""
        from ml.tuning import ProcessLauncher

        return ProcessLauncher()


class KubernetesTuningWorkers(TuningWorkers):
    """One pod per worker: an Indexed Kubernetes Job in the run's namespace, from the run's
    image (or `image`), with the code location's settings and secrets."""

    namespace: str = "default"
    # Default: the image of the run's code location, so workers run the step's exact code.
    image: str | None = None
    env_config_map: str = "flywheel-env"
    env_secret: str = "flywheel-secrets"
    service_account: str | None = None
    cpu: str = "2"
    memory: str = "8Gi"
    # GPUs per worker pod (on GPU nodes, as the training step's pod); 0: CPU workers.
    gpus: int = 0
    # Seconds between looks at the Job; seconds a finished Job (and its pods' logs) is kept.
    poll_s: float = 5.0
    keep_finished_s: int = 3600
    _run_image: str | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Remember the image of the run's code location."""
        run = context.dagster_run
        origin = run.job_code_origin if run is not None else None
        self._run_image = origin.repository_origin.container_image if origin else None

    def launcher(self, dataset: DatasetRef, run_id: str) -> WorkerLauncher:
        """A launcher for the run's image (or `image`); it reaches the cluster when it runs."""
        return KubernetesJobLauncher(self, self.image or self._run_image, dataset, run_id)


# The image's own user (deploy/Dockerfile), not root.
IMAGE_USER = 10001


def worker_job(
    workers: KubernetesTuningWorkers, image: str, run_id: str, spec: str, count: int
) -> k8s.V1Job:
    """The Indexed Job of `count` worker pods, each running the worker with `spec`.

    A pod that fails is not replaced (`backoffLimitPerIndex: 0`): its trial is retried by the
    other workers, and the step reports it lost or failed; the other pods go on.
    """
    from kubernetes import client as k8s

    labels = {
        "app.kubernetes.io/name": "flywheel",
        "app.kubernetes.io/component": "tuning-worker",
        "dagster/run-id": run_id,
    }
    limits = {"memory": workers.memory}
    folders = {"scratch": SCRATCH, **WRITABLE}
    node_selector, tolerations = None, None
    if workers.gpus:
        limits["nvidia.com/gpu"] = str(workers.gpus)
        node_selector = {"nvidia.com/gpu.present": "true"}
        tolerations = [
            k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        ]
    container = k8s.V1Container(
        name="worker",
        image=image,
        command=["python", "-m", "pipelines.tuning_pod"],
        env=[
            k8s.V1EnvVar(name=SPEC_VARIABLE, value=spec),
            k8s.V1EnvVar(name="FLYWHEEL_DATASET_CACHE", value=f"{SCRATCH}/datasets"),
            # Named, not only among the Secret's variables: a Secret without it keeps the pod
            # from starting (CreateContainerConfigError), which fails the step at once.
            k8s.V1EnvVar(
                name=OPTUNA_STORAGE.name,
                value_from=k8s.V1EnvVarSource(
                    secret_key_ref=k8s.V1SecretKeySelector(
                        name=workers.env_secret, key=OPTUNA_STORAGE.name
                    )
                ),
            ),
        ],
        env_from=[
            k8s.V1EnvFromSource(
                config_map_ref=k8s.V1ConfigMapEnvSource(name=workers.env_config_map)
            ),
            k8s.V1EnvFromSource(secret_ref=k8s.V1SecretEnvSource(name=workers.env_secret)),
        ],
        resources=k8s.V1ResourceRequirements(
            requests={"cpu": workers.cpu, "memory": workers.memory}, limits=limits
        ),
        volume_mounts=[
            k8s.V1VolumeMount(name=name, mount_path=path) for name, path in folders.items()
        ],
        # Kubernetes' `restricted` Pod Security Standard and a read-only root file system, as
        # the run pods (deploy/helm).
        security_context=k8s.V1SecurityContext(
            allow_privilege_escalation=False,
            read_only_root_filesystem=True,
            capabilities=k8s.V1Capabilities(drop=["ALL"]),
        ),
    )
    pod = k8s.V1PodSpec(
        containers=[container],
        restart_policy="Never",
        security_context=k8s.V1PodSecurityContext(
            run_as_non_root=True,
            run_as_user=IMAGE_USER,
            run_as_group=IMAGE_USER,
            seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
        ),
        service_account_name=workers.service_account,
        node_selector=node_selector,
        tolerations=tolerations,
        volumes=[
            k8s.V1Volume(name=name, empty_dir=k8s.V1EmptyDirVolumeSource()) for name in folders
        ],
    )
    return k8s.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=k8s.V1ObjectMeta(generate_name="flywheel-tune-", labels=labels),
        spec=k8s.V1JobSpec(
            completion_mode="Indexed",
            completions=count,
            parallelism=count,
            backoff_limit_per_index=0,
            ttl_seconds_after_finished=workers.keep_finished_s,
            template=k8s.V1PodTemplateSpec(metadata=k8s.V1ObjectMeta(labels=labels), spec=pod),
        ),
    )


class KubernetesJobLauncher:
    """Runs the workers as one Indexed Job and waits for it (an `ml.tuning.WorkerLauncher`)."""

    def __init__(
        self,
        workers: KubernetesTuningWorkers,
        image: str | None,
        dataset: DatasetRef,
        run_id: str,
        batch: k8s.BatchV1Api | None = None,
        core: k8s.CoreV1Api | None = None,
    ):
        self.workers, self.image, self.dataset, self.run_id = workers, image, dataset, run_id
        self.batch, self.core = batch, core

    def connect(self) -> None:
        """The cluster's API clients: in-cluster credentials (a run's pod), else a kubeconfig."""
        from kubernetes import client, config

        if self.batch is not None and self.core is not None:
            return
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        self.batch, self.core = client.BatchV1Api(), client.CoreV1Api()

    def run(
        self, spec: dict[str, object], datamodule: TabularDataModule, workers: int
    ) -> WorkersOutcome:
        """Create the Job, wait until it ended; delete it (and its pods) if interrupted."""
        if not self.image:
            raise ConfigurationError(
                "the tuning workers' image is unknown: the run names no container image; set "
                "FLYWHEEL_TUNING_IMAGE"
            )
        study = self._without_storage(spec)
        self.connect()
        payload = json.dumps({"study": study, "dataset": asdict(self.dataset)})
        job = worker_job(self.workers, self.image, self.run_id, payload, workers)
        namespace = self.workers.namespace
        name = self.batch.create_namespaced_job(namespace, job).metadata.name
        finished = False
        try:
            while not (finished := self._finished(name)):
                self._check_pods_can_start(name)
                time.sleep(self.workers.poll_s)
            return self._outcome(name, workers)
        finally:
            if not finished:
                # Interrupted, or pods that cannot start: no worker outlives the step.
                self.batch.delete_namespaced_job(name, namespace, propagation_policy="Foreground")

    def _without_storage(self, spec: dict[str, object]) -> dict[str, object]:
        """The worker spec without the study's storage, which each pod reads from the Secret.

        That is the step's own `FLYWHEEL_OPTUNA_STORAGE` (the `tuning_storage` resource's); a
        study kept elsewhere (the resource's config overridden in a run) would leave the pods
        on another study, so it is refused, its URL redacted.
        """
        tune = dict(spec.get("tune") or {})
        storage = tune.pop("storage", None)
        if storage is not None and storage != OPTUNA_STORAGE.get():
            raise ConfigurationError(
                f"the tuning worker pods open the study storage of {OPTUNA_STORAGE.name} in "
                f"Secret {self.workers.env_secret}; this study is in {redact(str(storage))}: "
                f"set {OPTUNA_STORAGE.name} to its RDB URL, there and in the run's environment"
            )
        return {**spec, "tune": tune} if "tune" in spec else dict(spec)

    def _finished(self, name: str) -> bool:
        status = self.batch.read_namespaced_job_status(name, self.workers.namespace).status
        return any(
            c.type in ("Complete", "Failed") and c.status == "True"
            for c in (status.conditions or [])
        )

    def _pods(self, name: str) -> list[k8s.V1Pod]:
        selector = f"{JOB_NAME_LABEL}={name}"
        return self.core.list_namespaced_pod(self.workers.namespace, label_selector=selector).items

    def _check_pods_can_start(self, name: str) -> None:
        for pod in self._pods(name):
            for container in pod.status.container_statuses or []:
                waiting = container.state.waiting if container.state else None
                if waiting is not None and waiting.reason in CANNOT_START:
                    raise ConfigurationError(
                        f"tuning worker pod {pod.metadata.name} cannot start: {waiting.reason}: "
                        f"{waiting.message or ''} (image {self.image})"
                    )

    def _outcome(self, name: str, count: int) -> WorkersOutcome:
        from ml.tuning import WorkersOutcome

        outcome = WorkersOutcome()
        by_index = {int(p.metadata.annotations[INDEX_ANNOTATION]): p for p in self._pods(name)}
        for index in range(count):
            pod = by_index.get(index)
            if pod is None:
                outcome.lost.append(index)  # deleted with its node before it could report
                continue
            if pod.status.phase == "Succeeded":
                continue
            ended = _termination(pod)
            killed = ended is None or ended.exit_code >= 128 or ended.reason == "OOMKilled"
            if killed or pod.status.reason in POD_LOST_REASONS:
                outcome.lost.append(index)
            else:
                log = self.core.read_namespaced_pod_log(
                    pod.metadata.name, self.workers.namespace, tail_lines=60
                )
                outcome.failed.append(
                    f"tuning worker {index} (pod {pod.metadata.name}) exited with status "
                    f"{ended.exit_code}:\n{log[-3000:]}"
                )
        return outcome


def _termination(pod: k8s.V1Pod) -> k8s.V1ContainerStateTerminated | None:
    """How the pod's worker container ended (None: it never ran, or the node went away)."""
    for container in pod.status.container_statuses or []:
        if container.state is not None and container.state.terminated is not None:
            return container.state.terminated
    return None
