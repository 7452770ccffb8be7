"""Tuning workers as the pods of one Kubernetes Job.

No cluster runs here, so the Kubernetes API the launcher calls is a small stand-in whose pods are
real processes: each runs the Job's container command with the container's environment (its
ConfigMap and Secret, its own variables, `JOB_COMPLETION_INDEX`), on a dataset it can only get
from the DVC remote by its hash. What is tested is the launcher's side of the API (create, watch,
read the pods and their logs, delete) and the pod's entrypoint, not Kubernetes.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict
from kubernetes import client as k8s
from optuna.trial import TrialState

from ml.config import ModelConfig
from ml.tuning import create_study, tune
from pipelines.lib.datasets import DvcDatasetStore
from pipelines.lib.errors import ConfigurationError
from pipelines.lib.tuning_workers import (
    INDEX_ANNOTATION,
    INDEX_VARIABLE,
    JOB_NAME_LABEL,
    SCRATCH,
    DatasetRef,
    KubernetesJobLauncher,
    KubernetesTuningWorkers,
    datamodule_for,
    worker_job,
)
from pipelines.task import load_task
from tests.ml.conftest import REPO
from tests.ml.test_parallel_tuning import ONE_EPOCH, kill_worker_mid_trial
from tests.pipelines.conftest import make_dvc_repo

RBAC = REPO / "deploy" / "helm" / "tuning-workers-rbac.yaml"
IMAGE = "registry.example/flywheel:abc123"
# The API group, resource and verb each call of the launcher needs the right to.
PERMISSIONS = {
    "create_namespaced_job": ("batch", "jobs", "create"),
    "read_namespaced_job_status": ("batch", "jobs/status", "get"),
    "delete_namespaced_job": ("batch", "jobs", "delete"),
    "list_namespaced_pod": ("", "pods", "list"),
    "read_namespaced_pod_log": ("", "pods/log", "get"),
}
MISSING_IMAGE = "registry.example/flywheel:no-such-tag"


class Pod:
    """A pod of the stand-in: one process, or none and why it cannot start."""

    def __init__(
        self,
        name: str,
        index: int,
        process: subprocess.Popen | None,
        log: Path,
        waiting: tuple[str, str] = ("ImagePullBackOff", "not found"),
    ):
        self.name, self.index, self.process, self.log = name, index, process, log
        self.waiting = waiting


class ProcessCluster:
    """The BatchV1Api and CoreV1Api calls the launcher makes, with pods as local processes.

    The image is this checkout and its environment. An emptyDir volume is a folder of the pod's
    own: its mount path is replaced by that folder in the container's environment. A variable
    taken from a key of a Secret that lacks it keeps the pod from starting, as on a cluster
    (CreateContainerConfigError). A pod killed
    by a signal ends with 128 + the signal, as a container does. The Job is Complete when every
    pod exited 0, Failed when all ended and one did not (`backoffLimitPerIndex: 0`: a failed
    index is not run again).
    """

    def __init__(self, root: Path, config_maps: dict, secrets_: dict):
        self.root, self.config_maps, self.secrets = root, config_maps, secrets_
        self.jobs: dict[str, list[Pod]] = {}
        self.deleted: list[str] = []
        self.calls: set[str] = set()

    def __getattribute__(self, name: str):
        if name in PERMISSIONS:
            object.__getattribute__(self, "calls").add(name)
        return object.__getattribute__(self, name)

    def create_namespaced_job(self, namespace: str, body: k8s.V1Job) -> k8s.V1Job:
        name = body.metadata.generate_name + secrets.token_hex(3)
        spec = body.spec
        assert spec.completion_mode == "Indexed" and spec.completions == spec.parallelism
        (container,) = spec.template.spec.containers
        pods = []
        for index in range(spec.completions):
            folder = self.root / f"{name}-{index}"
            (folder / "scratch").mkdir(parents=True)
            # The image's environment comes first on its PATH, as in deploy/Dockerfile.
            path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
            env = dict(os.environ, PATH=path)
            for source in container.env_from:
                if source.config_map_ref is not None:
                    env |= self.config_maps[source.config_map_ref.name]
                if source.secret_ref is not None:
                    env |= self.secrets[source.secret_ref.name]
            missing = []
            for variable in container.env:
                if variable.value_from is not None:
                    ref = variable.value_from.secret_key_ref
                    if ref.key not in self.secrets.get(ref.name, {}):
                        missing.append(f"couldn't find key {ref.key} in Secret {ref.name}")
                        continue
                    env[variable.name] = self.secrets[ref.name][ref.key]
                else:
                    env[variable.name] = variable.value.replace(SCRATCH, str(folder / "scratch"))
            env[INDEX_VARIABLE] = str(index)
            log = folder / "log"
            process = None
            if container.image != MISSING_IMAGE and not missing:
                with log.open("w") as out:
                    process = subprocess.Popen(
                        container.command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT
                    )
            pod = Pod(f"{name}-{index}-{secrets.token_hex(2)}", index, process, log)
            if missing and container.image != MISSING_IMAGE:  # the image is pulled first
                pod.waiting = ("CreateContainerConfigError", missing[0])
            pods.append(pod)
        self.jobs[name] = pods
        return k8s.V1Job(metadata=k8s.V1ObjectMeta(name=name))

    def read_namespaced_job_status(self, name: str, namespace: str) -> k8s.V1Job:
        codes = [p.process.poll() if p.process else None for p in self.jobs[name]]
        conditions = []
        if None not in codes:
            ended = "Complete" if all(c == 0 for c in codes) else "Failed"
            conditions.append(k8s.V1JobCondition(type=ended, status="True"))
        return k8s.V1Job(status=k8s.V1JobStatus(conditions=conditions))

    def delete_namespaced_job(self, name: str, namespace: str, propagation_policy: str) -> None:
        for pod in self.jobs[name]:
            if pod.process is not None and pod.process.poll() is None:
                pod.process.kill()
                pod.process.wait()
        self.deleted.append(name)

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> k8s.V1PodList:
        key, name = label_selector.split("=")
        assert key == JOB_NAME_LABEL
        return k8s.V1PodList(items=[self._pod(p) for p in self.jobs[name]])

    def _pod(self, pod: Pod) -> k8s.V1Pod:
        reason, message = pod.waiting
        state = k8s.V1ContainerState(
            waiting=k8s.V1ContainerStateWaiting(reason=reason, message=message)
        )
        phase = "Pending"
        if pod.process is not None:
            code = pod.process.poll()
            if code is None:
                phase, state = "Running", k8s.V1ContainerState(running={})
            else:
                code = 128 - code if code < 0 else code
                phase = "Succeeded" if code == 0 else "Failed"
                reason = "Completed" if code == 0 else "Error"
                terminated = k8s.V1ContainerStateTerminated(exit_code=code, reason=reason)
                state = k8s.V1ContainerState(terminated=terminated)
        status = k8s.V1ContainerStatus(
            name="worker", image=IMAGE, image_id="", ready=False, restart_count=0, state=state
        )
        return k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(
                name=pod.name, annotations={INDEX_ANNOTATION: str(pod.index)}
            ),
            status=k8s.V1PodStatus(phase=phase, container_statuses=[status]),
        )

    def read_namespaced_pod_log(self, name: str, namespace: str, tail_lines: int) -> str:
        (pod,) = [p for pods in self.jobs.values() for p in pods if p.name == name]
        return "\n".join(pod.log.read_text().splitlines()[-tail_lines:])


def test_the_job_runs_one_indexed_pod_per_worker_with_the_deployments_settings():
    workers = KubernetesTuningWorkers(namespace="flywheel", service_account="trainer", gpus=1)
    job = worker_job(workers, IMAGE, "run-1", '{"study": {}}', 3)

    manifest = k8s.ApiClient().sanitize_for_serialization(job)
    spec = manifest["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["backoffLimitPerIndex"] == 0 and spec["ttlSecondsAfterFinished"] == 3600
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == "trainer"
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["command"] == ["python", "-m", "pipelines.tuning_pod"]
    assert container["envFrom"] == [
        {"configMapRef": {"name": "flywheel-env"}},
        {"secretRef": {"name": "flywheel-secrets"}},
    ]
    assert {"name": "FLYWHEEL_TUNING_SPEC", "value": '{"study": {}}'} in container["env"]
    # The study's storage (its URL holds the database's password) from the Secret, by name.
    reference = {"name": "flywheel-secrets", "key": "FLYWHEEL_OPTUNA_STORAGE"}
    storage = {"name": "FLYWHEEL_OPTUNA_STORAGE", "valueFrom": {"secretKeyRef": reference}}
    assert storage in container["env"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert manifest["metadata"]["labels"]["dagster/run-id"] == "run-1"
    # Without GPUs: no GPU limit, no GPU node.
    cpu = k8s.ApiClient().sanitize_for_serialization(
        worker_job(KubernetesTuningWorkers(), IMAGE, "run-1", "{}", 2)
    )["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in cpu["containers"][0]["resources"]["limits"]
    assert "nodeSelector" not in cpu


@pytest.fixture()
def pushed_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, splits: dict[str, pd.DataFrame]
) -> tuple[str, Path]:
    """A dataset version pushed to a DVC remote: its hash and the remote."""
    repo = make_dvc_repo(tmp_path, monkeypatch)
    remote = tmp_path / "remote"
    store = DvcDatasetStore(repo_dir=str(repo / "data"), remote_url=str(remote))
    version = store.save("flights", {"train": splits["train"], "validation": splits["val"]})
    return version.dvc_hash, remote


def test_worker_pods_fetch_the_dataset_by_hash_and_a_killed_pod_loses_nothing(
    tmp_path: Path, pushed_dataset: tuple[str, Path], study_config, monkeypatch
):
    dvc_hash, remote = pushed_dataset
    # The step's own storage setting; the pods get the same from the Secret, not from the Job.
    monkeypatch.setenv("FLYWHEEL_OPTUNA_STORAGE", study_config.storage)
    # What the ConfigMap and Secret hold on a cluster; the remote is a folder here, S3 there.
    settings = {
        "FLYWHEEL_ENV": "local",
        "FLYWHEEL_HOME": str(remote.parent),
        "FLYWHEEL_DVC_REPO": str(tmp_path / "no-repository"),
    }
    (remote.parent / "dvc-remote").symlink_to(remote)
    cluster = ProcessCluster(
        tmp_path / "pods",
        {"flywheel-env": settings},
        {"flywheel-secrets": {"FLYWHEEL_OPTUNA_STORAGE": study_config.storage}},
    )
    workers = KubernetesTuningWorkers(namespace="flywheel", poll_s=0.5)
    launcher = KubernetesJobLauncher(
        workers, IMAGE, DatasetRef("flights", dvc_hash, 0), "run-1", cluster, cluster
    )
    config = replace(study_config, n_trials=6)
    create_study(config, max_epochs=1)
    killed: list[tuple[int, int]] = []
    done = threading.Event()
    killer = threading.Thread(target=kill_worker_mid_trial, args=(config, killed, done))
    killer.start()
    # The step's own datamodule: built as each pod builds it from the fetched version.
    local = DvcDatasetStore(repo_dir=str(tmp_path / "step"), remote_url=str(remote))
    features = load_task("flights").model.features
    datamodule = datamodule_for(local.fetch(dvc_hash), features, 0)

    try:
        result = tune(
            datamodule, config, ModelConfig(), replace(ONE_EPOCH, max_epochs=4), launcher=launcher
        )
    finally:
        done.set()
        killer.join()

    assert len(killed) == 1, "no pod was ever seen running a trial"
    ((_, victim),) = killed
    assert result.workers_lost == [victim] and result.n_complete == 6 and result.n_failed == 1
    trials = create_study(config, max_epochs=1).get_trials()
    assert {t.user_attrs["worker"] for t in trials} == {0, 1}
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    # Each pod fetched the version into its own scratch volume, by hash.
    for pod in cluster.jobs[next(iter(cluster.jobs))]:
        fetched = list((pod.log.parent / "scratch" / "datasets").iterdir())
        assert [p.name for p in fetched] == [dvc_hash.removesuffix(".dir")]
    assert cluster.deleted == []  # the Job ended by itself; its TTL removes it


def launcher_on(cluster: ProcessCluster, image: str, poll_s: float = 0.1) -> KubernetesJobLauncher:
    """A launcher of workers from `image` on `cluster`, for a dataset no pod gets to fetch."""
    workers = KubernetesTuningWorkers(poll_s=poll_s)
    dataset = DatasetRef("flights", "0" * 32 + ".dir", 0)
    return KubernetesJobLauncher(workers, image, dataset, "run-1", cluster, cluster)


def test_pods_that_cannot_start_fail_the_step_and_the_job_is_deleted(tmp_path: Path):
    cluster = ProcessCluster(tmp_path / "pods", {"flywheel-env": {}}, {"flywheel-secrets": {}})
    launcher = launcher_on(cluster, MISSING_IMAGE)
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match=r"cannot start: ImagePullBackOff.*no-such-tag"):
        launcher.run({}, None, 2)
    assert time.monotonic() - started < 30
    assert cluster.deleted == list(cluster.jobs)
    assert_granted(cluster.calls)


def test_a_secret_without_the_study_storage_fails_the_step_naming_the_key(tmp_path: Path):
    cluster = ProcessCluster(tmp_path / "pods", {"flywheel-env": {}}, {"flywheel-secrets": {}})
    launcher = launcher_on(cluster, IMAGE)
    with pytest.raises(
        ConfigurationError,
        match="CreateContainerConfigError: couldn't find key FLYWHEEL_OPTUNA_STORAGE in Secret",
    ):
        launcher.run({}, None, 2)
    assert cluster.deleted == list(cluster.jobs)


def test_a_study_outside_the_secrets_storage_is_refused_without_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("FLYWHEEL_OPTUNA_STORAGE", "postgresql://flywheel:pw@db.example/optuna")
    cluster = ProcessCluster(tmp_path / "pods", {}, {})
    launcher = KubernetesJobLauncher(
        KubernetesTuningWorkers(), IMAGE, DatasetRef("flights", "0", 0), "run-1", cluster, cluster
    )
    elsewhere = {"tune": {"storage": "postgresql://flywheel:s3cret@other.example/optuna"}}
    with pytest.raises(ConfigurationError, match="FLYWHEEL_OPTUNA_STORAGE") as refused:
        launcher.run(elsewhere, None, 2)
    assert "s3cret" not in str(refused.value) and "flywheel:***@other.example" in str(refused.value)
    assert cluster.jobs == {}


def test_a_pod_that_fails_is_reported_with_its_log(tmp_path: Path):
    # A spec the worker cannot read: the pod exits with an error and its log's end is shown.
    cluster = ProcessCluster(
        tmp_path / "pods",
        {"flywheel-env": {}},
        {"flywheel-secrets": {"FLYWHEEL_OPTUNA_STORAGE": "sqlite:///unused.db"}},
    )
    launcher = KubernetesJobLauncher(
        KubernetesTuningWorkers(poll_s=0.2),
        IMAGE,
        DatasetRef("flights", "not-a-hash", 0),
        "run-1",
        cluster,
        cluster,
    )
    outcome = launcher.run({"tune": {}}, None, 1)
    assert outcome.lost == []
    (message,) = outcome.failed
    assert message.startswith("tuning worker 0 (pod flywheel-tune-") and "status 1" in message
    assert "is not a DVC directory hash" in message
    assert_granted(cluster.calls)


def assert_granted(calls: set[str]) -> None:
    """The Role of tuning-workers-rbac.yaml allows every call the launcher made."""
    role, binding = yaml.safe_load_all(RBAC.read_text())
    role = k8s_model_from_dict(k8s.V1Role, k8s_snake_case_dict(k8s.V1Role, role))
    allowed = {
        (group, resource, verb)
        for rule in role.rules
        for group in rule.api_groups
        for resource in rule.resources
        for verb in rule.verbs
    }
    assert calls and {PERMISSIONS[call] for call in calls} <= allowed
    assert binding["roleRef"]["name"] == role.metadata.name


def test_without_an_image_the_settings_to_set_are_named(tmp_path: Path):
    cluster = ProcessCluster(tmp_path / "pods", {}, {})
    ref = DatasetRef("flights", "0" * 32 + ".dir", 0)
    launcher = KubernetesTuningWorkers().launcher(ref, "run-1")
    launcher.batch = launcher.core = cluster
    with pytest.raises(ConfigurationError, match="FLYWHEEL_TUNING_IMAGE"):
        launcher.run({}, None, 2)
    assert cluster.jobs == {}
