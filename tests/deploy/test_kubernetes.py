"""The Kubernetes deployment, checked without a cluster or Docker (deploy/helm/README.md).

The instance the chart renders (deploy/dagster.prod.yaml) against Dagster's and dagster-k8s's
own config schemas; the retraining run's pod as dagster-k8s builds it; the Helm values against
the chart's JSON schema (deploy/helm/values.schema.json) and the Kubernetes API's models; the
image (deploy/Dockerfile) against the stack's code server and the lock file.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import tomllib
from pathlib import Path

import dagster_k8s.launcher
import jsonschema
import kubernetes.client as k8s
import kubernetes_validate
import pytest
import yaml
from dagster._config import process_config
from dagster._core.errors import DagsterInvalidConfigError
from dagster._core.instance.config import dagster_instance_config
from dagster._core.run_coordinator import QueuedRunCoordinator
from dagster._core.storage.dagster_run import DagsterRun
from dagster_k8s import K8sRunLauncher
from dagster_k8s.job import construct_dagster_k8s_job, get_user_defined_k8s_config
from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from deploy.stack.stack import Stack
from tests.deploy import pod_security
from tests.deploy.chart_pods import chart_pods

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
HELM = DEPLOY / "helm"
# What the chart's pods have in their environment for the names deploy/dagster.prod.yaml reads.
INSTANCE_ENV = {
    "DAGSTER_PG_HOST": "flywheel.cluster-example.us-east-1.rds.amazonaws.com",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "not-a-password",
    "DAGSTER_PG_DB": "dagster",
    "DAGSTER_K8S_PIPELINE_RUN_NAMESPACE": "flywheel",
    "DAGSTER_HOME": "/opt/dagster/dagster_home",
    "DAGSTER_K8S_INSTANCE_CONFIG_MAP": "dagster-instance",
    "DAGSTER_K8S_PG_PASSWORD_SECRET": "flywheel-postgresql",
}


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def instance(tmp_path: Path, text: str) -> dict:
    """The instance config `text` as Dagster validates a dagster.yaml in DAGSTER_HOME."""
    (tmp_path / "dagster.yaml").write_text(text)
    return dict(dagster_instance_config(str(tmp_path))[0])


@pytest.fixture
def prod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    for name, value in INSTANCE_ENV.items():
        monkeypatch.setenv(name, value)
    return instance(tmp_path, (DEPLOY / "dagster.prod.yaml").read_text())


@pytest.fixture
def launcher(prod: dict, monkeypatch: pytest.MonkeyPatch) -> K8sRunLauncher:
    """The run launcher the prod instance builds, minus the in-cluster Kubernetes credentials."""
    monkeypatch.setattr(dagster_k8s.launcher, "load_kubernetes_config", lambda **_: None)
    config = process_config(K8sRunLauncher.config_type(), prod["run_launcher"]["config"])
    assert config.success, config.errors
    return K8sRunLauncher.from_config_value(None, config.value)


# (a) the instance


def test_prod_instance_is_valid_for_dagster_and_dagster_k8s(prod: dict, launcher):
    assert prod["run_launcher"]["class"] == "K8sRunLauncher"
    assert launcher.instance_config_map == INSTANCE_ENV["DAGSTER_K8S_INSTANCE_CONFIG_MAP"]
    assert launcher.env_config_maps == ["flywheel-env"]
    assert launcher.env_secrets == ["flywheel-secrets"]
    coordinator = prod["run_coordinator"]
    assert coordinator["class"] == "QueuedRunCoordinator"
    assert process_config(QueuedRunCoordinator.config_type(), coordinator["config"]).success


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("    instance_config_map: {env: DAGSTER_K8S_INSTANCE_CONFIG_MAP}\n", ""),
        ("  max_retries: 1\n", "  max_retries: one\n"),
        ("    dequeue_interval_seconds: 2\n", "    max_concurrent_runs: 4\n"),
    ],
    ids=["launcher-without-instance-configmap", "retries-not-a-number", "limits-in-two-places"],
)
def test_instance_checks_reject_a_broken_instance(tmp_path, monkeypatch, old, new):
    for name, value in INSTANCE_ENV.items():
        monkeypatch.setenv(name, value)
    text = (DEPLOY / "dagster.prod.yaml").read_text()
    assert old in text
    with pytest.raises(DagsterInvalidConfigError):
        config = instance(tmp_path, text.replace(old, new))
        launcher = process_config(K8sRunLauncher.config_type(), config["run_launcher"]["config"])
        if not launcher.success:
            raise DagsterInvalidConfigError("run launcher", launcher.errors, None)


def test_prod_instance_queues_monitors_and_retries_as_the_stack(prod: dict, tmp_path: Path):
    stack_dir = tmp_path / "stack"
    stack_dir.mkdir()
    shutil.copy(DEPLOY / "dagster.stack.yaml", stack_dir / "dagster.yaml")
    stack = dict(dagster_instance_config(str(stack_dir))[0])
    for section in ("concurrency", "run_retries", "sensors", "schedules", "telemetry"):
        assert prod[section] == stack[section], section
    assert prod["run_coordinator"]["config"] == stack["run_coordinator"]["config"]
    monitoring = dict(prod["run_monitoring"])
    # A pod may wait for a GPU node to scale up: a longer start timeout, and no resumed runs.
    assert (
        monitoring.pop("start_timeout_seconds") >= stack["run_monitoring"]["start_timeout_seconds"]
    )
    assert monitoring.pop("max_resume_run_attempts") == 0
    assert monitoring == {k: v for k, v in stack["run_monitoring"].items() if k in monitoring}
    assert set(monitoring) == set(stack["run_monitoring"]) - {"start_timeout_seconds"}


# (b) the retraining run's pod


@pytest.fixture(scope="module")
def helm_defs(tmp_path_factory: pytest.TempPathFactory):
    """The code location as the image loads it: `prod`, with the settings of
    deploy/helm/flywheel-env.yaml."""
    from pipelines.definitions import build_definitions

    with pytest.MonkeyPatch.context() as env:
        for name, value in load_yaml(HELM / "flywheel-env.yaml")["data"].items():
            env.setenv(name, value)
        env.setenv("FLYWHEEL_HOME", str(tmp_path_factory.mktemp("home")))
        return build_definitions()


@pytest.fixture(scope="module")
def run_tags(helm_defs) -> dict[str, dict[str, str]]:
    """Each job's run tags."""
    jobs = ("retraining_job", "dataset_job")
    return {job: dict(helm_defs.resolve_job_def(job).tags) for job in jobs}


@pytest.fixture(scope="module")
def step_tags(helm_defs) -> dict[str, dict[str, str]]:
    """The retraining job's steps (op names) with their tags: what a step executor reads."""
    job = helm_defs.resolve_job_def("retraining_job")
    # As the execution plan hands them to the executor: a tag's value as a string.
    return {
        name: {k: v if isinstance(v, str) else json.dumps(v) for k, v in node.tags.items()}
        for name, node in job.graph.node_dict.items()
    }


def step_job(launcher: K8sRunLauncher, tags: dict[str, str], step: str) -> k8s.V1Job:
    """The Kubernetes Job dagster-k8s's step executor creates for `step` of a retraining run:
    the run launcher's settings without the run's tags, then the step's own (as
    `K8sStepHandler` merges them)."""
    from dagster_k8s.container_context import K8sContainerContext

    run = DagsterRun(job_name="retraining_job", run_id="0" * 32, tags={})
    context = K8sContainerContext.create_for_run(run, launcher, include_run_tags=False)
    context = context.merge(K8sContainerContext(run_k8s_config=get_user_defined_k8s_config(tags)))
    return construct_dagster_k8s_job(
        job_config=context.get_k8s_job_config("registry.example.com/flywheel:0.1.0", launcher),
        args=["dagster", "api", "execute_step", "{}"],
        job_name=f"dagster-step-{step.replace('_', '-')}",
        pod_name=f"dagster-step-{step.replace('_', '-')}",
        component="step_worker",
        user_defined_k8s_config=context.run_k8s_config,
        labels={"dagster/op": step},
    )


def run_pod(launcher: K8sRunLauncher, job: str, tags: dict[str, str]) -> k8s.V1PodSpec:
    """The pod spec of the Kubernetes Job the launcher would create for a run with `tags`."""
    return run_job(launcher, job, tags).spec.template.spec


def run_job(launcher: K8sRunLauncher, job: str, tags: dict[str, str]) -> k8s.V1Job:
    """The Kubernetes Job the launcher would create for a run of `job` with `tags`."""
    run = DagsterRun(job_name=job, run_id="0" * 32, tags=tags)
    context = launcher.get_container_context_for_run(run)
    return construct_dagster_k8s_job(
        job_config=context.get_k8s_job_config("registry.example.com/flywheel:0.1.0", launcher),
        args=["dagster", "api", "execute_run", "{}"],
        job_name="dagster-run-0",
        pod_name="dagster-run-0",
        component="run_worker",
        user_defined_k8s_config=context.run_k8s_config,
    )


# What a `dagster-k8s/config` tag typed into the launchpad could ask for beyond the GPU fields.
WIDENING_TAGS = {
    "host-pid": {"pod_spec_config": {"host_pid": True}},
    "host-path": {
        "pod_spec_config": {"volumes": [{"name": "host", "host_path": {"path": "/"}}]},
        "container_config": {"volume_mounts": [{"name": "host", "mount_path": "/host"}]},
    },
    "privileged": {"container_config": {"security_context": {"privileged": True}}},
    "service-account": {"pod_spec_config": {"service_account_name": "cluster-admin"}},
    "root": {"pod_spec_config": {"security_context": {"run_as_user": 0}}},
    "environment": {"container_config": {"env": [{"name": "PYTHONSTARTUP", "value": "/x"}]}},
    "command": {"container_config": {"command": ["sh", "-c", "env"]}},
}


@pytest.mark.parametrize("config", WIDENING_TAGS.values(), ids=list(WIDENING_TAGS))
def test_a_run_tag_cannot_widen_the_run_pod(launcher, run_tags, config):
    """The launch fails (the run is marked failed with this message); the GPU fields pass."""
    from pipelines.defs.training.assets import GPU_TAGS

    tags = {**run_tags["retraining_job"], "dagster-k8s/config": json.dumps(config)}
    with pytest.raises(Exception, match="violated the allowed list"):
        run_job(launcher, "retraining_job", tags)
    gpu = {**run_tags["retraining_job"], **{k: json.dumps(v) for k, v in GPU_TAGS.items()}}
    pod = run_pod(launcher, "retraining_job", gpu)
    assert pod.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    assert pod.node_selector == {"nvidia.com/gpu.present": "true"}
    assert pod.service_account_name == "dagster" and not pod.host_pid


def test_gpu_tag_parses_with_dagster_k8s(run_tags):
    from pipelines.defs.training.assets import GPU_TAGS

    config = get_user_defined_k8s_config({k: json.dumps(v) for k, v in GPU_TAGS.items()})
    assert config.container_config["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert config.pod_spec_config["node_selector"] == {"nvidia.com/gpu.present": "true"}
    toleration = k8s_model_from_dict(k8s.V1Toleration, config.pod_spec_config["tolerations"][0])
    assert (toleration.key, toleration.operator, toleration.effect) == (
        "nvidia.com/gpu",
        "Exists",
        "NoSchedule",
    )
    assert run_tags["retraining_job"]["flywheel/gpu"] == "1"


def limits(pod: k8s.V1PodSpec) -> dict[str, str]:
    return pod.containers[0].resources.limits or {}


def test_on_step_pods_the_training_step_alone_gets_a_gpu(helm_defs, launcher, run_tags, step_tags):
    # Each step of a retraining its own pod: the run's pod only orchestrates, on a CPU node.
    assert helm_defs.resolve_job_def("retraining_job").executor_def.name == "k8s_steps"
    run = run_pod(launcher, "retraining_job", run_tags["retraining_job"])
    assert "nvidia.com/gpu" not in run.containers[0].resources.limits
    assert not run.node_selector and not run.tolerations
    steps = {
        name: step_job(launcher, tags, name).spec.template.spec for name, tags in step_tags.items()
    }
    gpus = [name for name, pod in steps.items() if "nvidia.com/gpu" in limits(pod)]
    assert gpus == ["flights__challenger_model"]
    assert len(steps) >= 4  # the mart's dbt build, the dataset, training, evaluation, the gate
    pod = steps["flights__challenger_model"]
    container = pod.containers[0]
    assert container.resources.limits == {"memory": "8Gi", "nvidia.com/gpu": "1"}
    assert container.resources.requests == {"cpu": "1", "memory": "4Gi"}
    assert pod.node_selector == {"nvidia.com/gpu.present": "true"}
    assert [(t.key, t.operator, t.effect) for t in pod.tolerations] == [
        ("nvidia.com/gpu", "Exists", "NoSchedule")
    ]
    assert pod.security_context.run_as_non_root
    sources = [s.config_map_ref or s.secret_ref for s in container.env_from]
    assert [s.name for s in sources] == ["flywheel-env", "flywheel-secrets"]
    for name, other in steps.items():
        if name != "flights__challenger_model":
            assert not other.node_selector and not other.tolerations, name
    other = run_pod(launcher, "dataset_job", run_tags["dataset_job"])
    assert "nvidia.com/gpu" not in other.containers[0].resources.limits
    assert not other.node_selector and not other.tolerations


# (c) the Helm values


def schema_for_overrides() -> tuple[dict, Registry]:
    """The chart's schema as it applies to a values file Helm merges over the chart's own:
    a mapping may leave out what the chart's values set (its `required` go), a list replaces
    the chart's whole (its items keep theirs). The Kubernetes object schemas it refers to
    (kubernetesjsonschema.dev) are not fetched: any object passes them here, and
    test_helm_kubernetes_objects checks those objects against the Kubernetes API's models."""
    schema = json.loads((HELM / "values.schema.json").read_text())
    text = json.dumps(schema)
    items = set(re.findall(r'"items": \{"\$ref": "#/definitions/([^"]+)"', text))
    schema.pop("required")
    for name, definition in schema["definitions"].items():
        if name not in items:
            definition.pop("required", None)
    documents: dict[str, dict] = {}
    for url, pointer in re.findall(r'"\$ref": "(https://[^"#]+)#([^"]+)"', text):
        node = documents.setdefault(url, {})
        for part in pointer.strip("/").split("/"):
            node = node.setdefault(part, {})
    registry = Registry(retrieve=lambda url: Resource.from_contents(documents[url], DRAFT202012))
    return schema, registry


def schema_errors(values: dict) -> list[str]:
    schema, registry = schema_for_overrides()
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(values)]


def test_helm_values_match_the_chart_schema():
    assert schema_errors(load_yaml(HELM / "values.yaml")) == []


def _misspelt(values: dict) -> None:
    values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["maxRuns"] = 4


def _no_port(values: dict) -> None:
    del values["dagster-user-deployments"]["deployments"][0]["port"]


def _unknown_launcher(values: dict) -> None:
    values["runLauncher"]["type"] = "KubernetesRunLauncher"


@pytest.mark.parametrize("breaking", [_misspelt, _no_port, _unknown_launcher])
def test_chart_schema_rejects_broken_values(breaking):
    values = copy.deepcopy(load_yaml(HELM / "values.yaml"))
    breaking(values)
    assert schema_errors(values)


def test_helm_kubernetes_objects():
    values = load_yaml(HELM / "values.yaml")
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    launcher = values["runLauncher"]["config"]["customRunLauncher"]["config"]
    objects = [
        (k8s.V1PodSecurityContext, deployment["podSecurityContext"]),
        (k8s.V1SecurityContext, deployment["securityContext"]),
        (k8s.V1ResourceRequirements, deployment["resources"]),
        (k8s.V1SecurityContext, launcher["security_context"]),
        (k8s.V1ResourceRequirements, launcher["resources"]),
        (k8s.V1PodSpec, launcher["run_k8s_config"]["pod_spec_config"] | {"containers": []}),
    ]
    objects += [(k8s.V1ConfigMapEnvSource, ref) for ref in deployment["envConfigMaps"]]
    objects += [(k8s.V1SecretEnvSource, ref) for ref in deployment["envSecrets"]]
    for model, value in objects:
        k8s_model_from_dict(model, k8s_snake_case_dict(model, value))
    configmap = load_yaml(HELM / "flywheel-env.yaml")
    assert (configmap["kind"], configmap["metadata"]["name"]) == ("ConfigMap", "flywheel-env")
    assert all(isinstance(value, str) for value in configmap["data"].values())
    assert deployment["envConfigMaps"] == [{"name": "flywheel-env"}]
    assert launcher["env_config_maps"] == ["flywheel-env"]
    assert [s["name"] for s in deployment["envSecrets"]] == launcher["env_secrets"]


def snake_case(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def snake(value):
    """The chart's camelCase values with the snake_case keys of Dagster's instance config."""
    if isinstance(value, dict):
        return {snake_case(key): snake(inner) for key, inner in value.items()}
    return [snake(inner) for inner in value] if isinstance(value, list) else value


def test_prod_instance_is_what_the_chart_renders_from_the_values(prod: dict):
    """The sections of deploy/dagster.prod.yaml that the chart's instance ConfigMap template
    writes from the values, written from deploy/helm/values.yaml the way that template does."""
    values = load_yaml(HELM / "values.yaml")
    daemon = values["dagsterDaemon"]
    queued = daemon["runCoordinator"]["config"]["queuedRunCoordinator"]
    assert prod["run_coordinator"]["class"] == daemon["runCoordinator"]["type"]
    assert prod["run_coordinator"]["config"] == snake(queued)
    assert values["concurrency"]["enabled"]
    assert prod["concurrency"] == snake({k: values["concurrency"][k] for k in ("pools", "runs")})
    for section in ("runMonitoring", "runRetries", "sensors", "schedules"):
        assert prod[snake_case(section)] == snake(daemon[section]), section
    assert prod["telemetry"] == values["telemetry"]
    # A `CustomRunLauncher`: the chart writes its module, class and config as they are.
    assert values["runLauncher"]["type"] == "CustomRunLauncher"
    custom = values["runLauncher"]["config"]["customRunLauncher"]
    assert load_yaml(DEPLOY / "dagster.prod.yaml")["run_launcher"] == custom
    assert values["serviceAccount"]["name"] == custom["config"]["service_account_name"]
    postgres = values["postgresql"]
    db = prod["storage"]["postgres"]["postgres_db"]
    assert (db["params"], db["scheme"]) == (
        postgres["postgresqlParams"],
        postgres["postgresqlScheme"],
    )
    assert not postgres["enabled"] and not values["generatePostgresqlPasswordSecret"]
    assert (
        values["global"]["postgresqlSecretName"] == INSTANCE_ENV["DAGSTER_K8S_PG_PASSWORD_SECRET"]
    )


# (d) the image


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Each stage of deploy/Dockerfile as (instruction, arguments), continuation lines joined."""
    lines = [line for line in (DEPLOY / "Dockerfile").read_text().splitlines()]
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    stages: list[list[tuple[str, str]]] = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        instruction, _, arguments = line.strip().partition(" ")
        if instruction == "FROM":
            stages.append([])
        if stages and instruction:
            stages[-1].append((instruction, arguments.strip()))
    return stages


def arguments(stage: list[tuple[str, str]], instruction: str) -> list[str]:
    return [rest for name, rest in stage if name == instruction]


def code_server(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """A `dagster code-server start` command: its words before the options, and its options."""
    words = [Path(argv[0]).name, *argv[1:]]
    first = next(i for i, word in enumerate(words) if word.startswith("-"))
    options = words[first:]
    assert len(options) % 2 == 0 and len(set(options[::2])) == len(options) // 2, options
    return words[:first], dict(zip(options[::2], options[1::2], strict=True))


def test_image_runs_the_stacks_code_server_on_all_interfaces(tmp_path: Path):
    final = dockerfile_stages()[-1]
    # The chart's `args` and the run launcher's command replace a CMD; an ENTRYPOINT would stay.
    assert not arguments(final, "ENTRYPOINT")
    image = code_server(json.loads(arguments(final, "CMD")[-1]))
    stack = code_server(list(Stack(tmp_path).services()["code_server"].command))
    assert image[0] == stack[0] == ["dagster", "code-server", "start"]
    assert image[1] == stack[1] | {"-h": "0.0.0.0", "-p": "4000"}
    # What the chart runs: `dagster code-server start -h 0.0.0.0 -p <port> <codeServerArgs>`.
    (deployment,) = load_yaml(HELM / "values.yaml")["dagster-user-deployments"]["deployments"]
    port = str(deployment["port"])
    chart = ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", port]
    assert code_server(chart + deployment["codeServerArgs"]) == image
    assert arguments(final, "EXPOSE") == [port]
    assert arguments(final, "USER") == ["10001:10001"]


def locked(lock: str = "requirements.lock") -> dict[str, tuple[str, int]]:
    """A lock file of deploy/: each package's version and number of hashes."""
    packages: dict[str, tuple[str, int]] = {}
    name = None
    for line in (DEPLOY / lock).read_text().splitlines():
        if pin := re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line):
            name = canonicalize_name(pin[1])
            packages[name] = (pin[2], 0)
        elif name and "--hash=sha256:" in line:
            packages[name] = (packages[name][0], packages[name][1] + 1)
    return packages


def test_image_installs_the_lock_and_the_pinned_torch():
    build = dockerfile_stages()[0]
    args = dict(arg.split("=", 1) for arg in arguments(build, "ARG") if "=" in arg)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = [
        Requirement(text)
        for text in project["dependencies"] + project["optional-dependencies"]["prod"]
    ]
    torch = next(r for r in requirements if r.name == "torch")
    assert str(torch.specifier) == f"=={args['TORCH_VERSION']}"
    assert f"torch=={args['TORCH_VERSION']}" in (REPO / "Makefile").read_text()
    runs = arguments(build, "RUN")
    assert any("--require-hashes" in run and "requirements.lock" in run for run in runs)
    # The installer too: uv, the version the Makefile's set-up installs, hash-checked by pip.
    (installer,) = [run for run in runs if "installer.lock" in run]
    assert "--require-hashes" in installer and "uv==" not in installer
    [(uv, (version, hashes))] = locked("installer.lock").items()
    assert uv == "uv" and hashes and f"uv=={version}" in (REPO / "Makefile").read_text()
    packages = locked()
    assert not [
        p for p in packages if p in {"torch", "triton"} or p.startswith(("nvidia-", "cuda-"))
    ]
    assert all(hashes for _, hashes in packages.values())
    for requirement in requirements:
        if requirement is not torch:
            version, _ = packages[canonicalize_name(requirement.name)]
            assert requirement.specifier.contains(version, prereleases=True), (requirement, version)
    assert packages["dagster-k8s"][0] == packages["dagster-postgres"][0] == "0.29.27"


def test_dockerignore_admits_exactly_what_the_image_copies():
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[0] == "**"
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = set()
    for copy_arguments in arguments(dockerfile_stages()[0], "COPY"):
        *sources, _ = copy_arguments.split()
        copied |= set(sources)
    assert copied == admitted
    assert all((REPO / path).exists() for path in admitted)
    assert "dbt_project/target/" in lines


# Where the stack's settings are on Kubernetes when not in flywheel-env (deploy/helm/README.md,
# section 3, says how).
NOT_IN_CONFIGMAP = {
    "FLYWHEEL_HOME",  # the image
    "FLYWHEEL_DVC_REPO",  # the image
    "DAGSTER_HOME",  # the chart
    "FLYWHEEL_COMPUTE_LOG_DIR",  # none: a pod stages its compute logs in its own /tmp
    "DAGSTER_PG_HOST",  # the values (postgresql)
    "DAGSTER_PG_PORT",
    "DAGSTER_PG_USER",
    "DAGSTER_PG_DB",
    "DAGSTER_PG_PASSWORD",  # the Secret flywheel-postgresql
    "AWS_ACCESS_KEY_ID",  # the Secret flywheel-secrets, where the pods have no role
    "AWS_SECRET_ACCESS_KEY",
    "FLYWHEEL_OPTUNA_STORAGE",  # the Secret flywheel-secrets
    "FLYWHEEL_WAREHOUSE_PASSWORD",  # the Secret flywheel-secrets
    "FLYWHEEL_DBT_PASSWORD",  # the Secret flywheel-secrets
    "MLFLOW_TRACKING_PASSWORD",  # the Secret flywheel-secrets
    # Clients of the webserver, not the code location.
    *("FLYWHEEL_DAGSTER_URL", "FLYWHEEL_DAGSTER_USER", "FLYWHEEL_DAGSTER_PASSWORD"),
    # The landing producer's, outside the cluster.
    *("FLYWHEEL_LANDING_KEY_ID", "FLYWHEEL_LANDING_SECRET_KEY"),
}


def test_every_stack_setting_has_a_place_on_kubernetes(tmp_path: Path):
    settings = Stack(tmp_path).environment()
    text = (HELM / "flywheel-env.yaml").read_text()
    data = yaml.safe_load(text)["data"]
    optional = set(re.findall(r"^\s*# ([A-Z][A-Z0-9_]+): ", text, re.MULTILINE))
    assert set(settings) - set(data) - optional - NOT_IN_CONFIGMAP == set()
    assert data["FLYWHEEL_ENV"] == settings["FLYWHEEL_ENV"] == "prod"
    readme = (HELM / "README.md").read_text()
    assert [name for name in settings if f"`{name}`" not in readme] == []
    image_env = " ".join(arguments(dockerfile_stages()[-1], "ENV"))
    for name in ("FLYWHEEL_ENV", "FLYWHEEL_HOME", "FLYWHEEL_DVC_REPO"):
        assert f"{name}=" in image_env


# (d) every object the project makes, against the Kubernetes API's schemas and the `restricted`
# Pod Security Standard

# The Kubernetes release whose API schemas the objects are validated against (kubernetes-validate
# ships them; its newest).
KUBERNETES = kubernetes_validate.latest_version()


def api_dict(model) -> dict:
    """A kubernetes-client model as the API takes it (camelCase, no unset fields)."""
    return k8s.ApiClient().sanitize_for_serialization(model)


def code_server_pod() -> dict:
    """The code server's pod as the chart renders it from the values: their security settings
    on the chart's container."""
    (deployment,) = load_yaml(HELM / "values.yaml")["dagster-user-deployments"]["deployments"]
    container = {
        "name": deployment["name"],
        "image": f"{deployment['image']['repository']}:{deployment['image']['tag']}",
        "securityContext": deployment["securityContext"],
        "resources": deployment["resources"],
        "volumeMounts": deployment["volumeMounts"],
    }
    spec = {
        "securityContext": deployment["podSecurityContext"],
        "containers": [container],
        "volumes": deployment["volumes"],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "flywheel-code-server"},
        "spec": spec,
    }


@pytest.fixture
def rendered(launcher, run_tags, step_tags) -> dict[str, dict]:
    """Every Kubernetes object the project renders, by what it is."""
    from pipelines.lib.tuning_workers import KubernetesTuningWorkers, worker_job

    image = "registry.example.com/flywheel:0.1.0"
    steps = {
        f"retraining step {name}": api_dict(step_job(launcher, tags, name))
        for name, tags in step_tags.items()
    }
    return {
        **steps,
        "retraining run": api_dict(run_job(launcher, "retraining_job", run_tags["retraining_job"])),
        "dataset run": api_dict(run_job(launcher, "dataset_job", run_tags["dataset_job"])),
        "tuning workers": api_dict(
            worker_job(KubernetesTuningWorkers(gpus=1), image, "run-1", "{}", 2)
        ),
        "code server": code_server_pod(),
        **chart_pods(load_yaml(HELM / "values.yaml")),
    }


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]


def test_every_rendered_object_is_valid_for_the_kubernetes_api_and_restricted(rendered):
    step = "retraining step flights__challenger_model"
    for what, obj in rendered.items():
        # strict: a field the API does not know is an error, not silently dropped
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        assert pod_security.violations(pod_spec(obj)) == [], what
    # Every pod writes only to its empty folders (tests/deploy/test_read_only_root.py and
    # test_read_only_run.py run the processes so), each run's and step's to every folder that
    # flywheel-env points a tool at.
    folders = [v for v in load_yaml(HELM / "flywheel-env.yaml")["data"].values() if v[:1] == "/"]
    for what, obj in rendered.items():
        pod = pod_spec(obj)
        empty = {v["name"] for v in pod.get("volumes") or [] if "emptyDir" in v}
        for container in pod["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"], what
            mounts = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in empty]
            assert "/tmp" in mounts, what
            if what.endswith(" run") or what.startswith("retraining step "):
                for folder in folders:
                    assert any(Path(folder).is_relative_to(m) for m in mounts), (what, folder)
    training = pod_spec(rendered[step])["containers"][0]["resources"]["limits"]
    assert training["nvidia.com/gpu"] == "1"


def test_the_checks_catch_a_broken_object(rendered):
    job = copy.deepcopy(rendered["tuning workers"])
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limitz"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES, strict=True)
    pod = copy.deepcopy(pod_spec(rendered["code server"]))
    del pod["securityContext"]["seccompProfile"]
    pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    pod["volumes"] = [{"name": "host", "hostPath": {"path": "/"}}]
    assert pod_security.violations(pod) == [
        "volume 'host' is of a restricted type: ['hostPath']",
        "container 'flywheel' does not set allowPrivilegeEscalation: false",
        "container 'flywheel' has no seccompProfile RuntimeDefault or Localhost",
    ]
