"""Secrets stay secret: with secrets planted in a production-like environment, none of their
values is in what the UI shows of the code location, in a run's records, events and logs, or
in the Kubernetes objects the deployment creates; and the scanner that says so finds a
planted leak in each place it searches (deploy/secret_scan.py)."""

# No `from __future__ import annotations`: Dagster reads the asset's parameter types.
import hashlib
import json
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import dagster as dg
import pytest
from dagster._core.remote_representation.external_data import (
    RepositorySnap,
    ResourceConfigEnvVarSnap,
)

from deploy.secret_scan import MIN_LENGTH, Hit, SecretScanner
from pipelines.lib.label_exchange import LabelExchange, LabelStudioExchange
from pipelines.lib.warehouse import PostgresWarehouse, Warehouse
from tests.deploy.test_kubernetes import HELM, load_yaml

IMAGE = "registry.example.com/flywheel:0.1.0"


def planted() -> dict[str, str]:
    """A value of its own for each secret of a deployment, new in every test."""
    password = secrets.token_urlsafe(16)
    return {
        "FLYWHEEL_WAREHOUSE_PASSWORD": secrets.token_urlsafe(16),
        "FLYWHEEL_LABEL_STUDIO_TOKEN": secrets.token_hex(20),
        "FLYWHEEL_OPTUNA_STORAGE": (
            f"postgresql+psycopg2://flywheel:{password}@optuna.example.internal:5432/optuna"
        ),
        "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
        "DAGSTER_PG_PASSWORD": secrets.token_urlsafe(16),
    }


@pytest.fixture
def prod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The code location's environment on Kubernetes (deploy/helm/flywheel-env.yaml, Label
    Studio labeling) with planted secrets, which it returns by name."""
    planted_secrets = planted()
    settings = {
        **load_yaml(HELM / "flywheel-env.yaml")["data"],
        "FLYWHEEL_HOME": str(tmp_path / "home"),
        "FLYWHEEL_LABELING": "label-studio",
        "FLYWHEEL_LABEL_STUDIO_URL": "http://label-studio.example.internal:8080",
        "AWS_ACCESS_KEY_ID": "AKIAFLYWHEELEXAMPLE",
        **planted_secrets,
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    return planted_secrets


def test_the_ui_shows_each_secret_by_its_variables_name_and_no_value(prod):
    from pipelines.definitions import build_definitions

    defs = build_definitions()
    snap = RepositorySnap.from_def(defs.get_repository_def())

    assert SecretScanner(prod).repository(snap) == []
    shown = {r.name: r.configured_values for r in snap.resources}
    for resource, field, variable in [
        ("warehouse", "password", "FLYWHEEL_WAREHOUSE_PASSWORD"),
        ("label_exchange", "token", "FLYWHEEL_LABEL_STUDIO_TOKEN"),
        ("tuning_storage", "location", "FLYWHEEL_OPTUNA_STORAGE"),
    ]:
        assert shown[resource][field] == ResourceConfigEnvVarSnap(name=variable)


def test_a_secret_given_as_a_value_is_found_in_the_resources_config(prod):
    from pipelines.definitions import build_definitions

    leaky = PostgresWarehouse(
        host="warehouse.example.internal",
        user="flywheel",
        password=prod["FLYWHEEL_WAREHOUSE_PASSWORD"],
        database="warehouse",
    )
    defs = build_definitions(resources={"warehouse": leaky})

    assert SecretScanner(prod).repository(defs) == [
        Hit("resource 'warehouse'", "FLYWHEEL_WAREHOUSE_PASSWORD")
    ]


class RecordingCluster:
    """The Kubernetes API calls of a tuning: records the Job, whose pods all succeed at once."""

    def __init__(self) -> None:
        self.jobs: list[object] = []

    def create_namespaced_job(self, namespace: str, body):
        from kubernetes import client as k8s

        self.jobs.append(body)
        return k8s.V1Job(metadata=k8s.V1ObjectMeta(name="flywheel-tune-0"))

    def read_namespaced_job_status(self, name: str, namespace: str):
        from kubernetes import client as k8s

        complete = k8s.V1JobCondition(type="Complete", status="True")
        return k8s.V1Job(status=k8s.V1JobStatus(conditions=[complete]))

    def list_namespaced_pod(self, namespace: str, label_selector: str):
        from kubernetes import client as k8s

        from pipelines.lib.tuning_workers import INDEX_ANNOTATION

        pods = [
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name=f"pod-{i}", annotations={INDEX_ANNOTATION: str(i)}),
                status=k8s.V1PodStatus(phase="Succeeded"),
            )
            for i in range(2)
        ]
        return k8s.V1PodList(items=pods)


def test_the_tuning_job_takes_the_study_storage_from_the_secret(prod):
    from ml.config import ModelConfig, TrainConfig, TuneConfig
    from ml.tuning.workers import worker_spec
    from pipelines.lib.tuning_workers import DatasetRef
    from pipelines.resources import tuning_workers

    # The spec of the training step, whose study is in the storage of the planted URL.
    tune = TuneConfig(storage=prod["FLYWHEEL_OPTUNA_STORAGE"], study_name="flights-0", workers=2)
    spec = worker_spec(tune, ModelConfig(), TrainConfig())
    launcher = tuning_workers("prod").launcher(DatasetRef("flights", "0" * 32, 0), "run-1")
    launcher.image = IMAGE
    launcher.batch = launcher.core = cluster = RecordingCluster()

    launcher.run(spec, None, 2)

    scanner = SecretScanner(prod)
    assert scanner.objects({"the step's worker spec": spec}) == [
        Hit("the step's worker spec", "FLYWHEEL_OPTUNA_STORAGE")
    ]
    (job,) = cluster.jobs
    assert scanner.objects({"tuning Job": job}) == []
    (container,) = job.spec.template.spec.containers
    (storage,) = [v for v in container.env if v.name == "FLYWHEEL_OPTUNA_STORAGE"]
    reference = storage.value_from.secret_key_ref
    assert (reference.name, reference.key) == ("flywheel-secrets", "FLYWHEEL_OPTUNA_STORAGE")


def test_a_run_pod_takes_its_secrets_from_the_secrets(prod, tmp_path, monkeypatch):
    import dagster_k8s.launcher
    from dagster._config import process_config
    from dagster_k8s import K8sRunLauncher

    from pipelines.definitions import build_definitions
    from tests.deploy.test_kubernetes import DEPLOY, INSTANCE_ENV, instance, run_pod

    for name, value in {**INSTANCE_ENV, "DAGSTER_PG_PASSWORD": prod["DAGSTER_PG_PASSWORD"]}.items():
        monkeypatch.setenv(name, value)
    config = instance(tmp_path, (DEPLOY / "dagster.prod.yaml").read_text())
    monkeypatch.setattr(dagster_k8s.launcher, "load_kubernetes_config", lambda **_: None)
    processed = process_config(K8sRunLauncher.config_type(), config["run_launcher"]["config"])
    launcher = K8sRunLauncher.from_config_value(None, processed.value)
    tags = dict(build_definitions().resolve_job_def("retraining_job").tags)

    pod = run_pod(launcher, "retraining_job", tags)

    assert SecretScanner(prod).objects({"retraining run's pod": pod}) == []
    (password,) = [v for v in pod.containers[0].env if v.name == "DAGSTER_PG_PASSWORD"]
    assert password.value_from.secret_key_ref.name == "flywheel-postgresql"


@dg.asset
def probe(
    context: dg.AssetExecutionContext, warehouse: Warehouse, label_exchange: LabelExchange
) -> dg.MaterializeResult:
    """Logs and prints where its resources point, and records the label token's digest."""
    context.log.info(f"warehouse {warehouse.dialect}, labels to {label_exchange.where}")
    print(f"publishing to {label_exchange.where}")
    # The token of the run's resource, as a digest: the value reached the run.
    digest = hashlib.sha256(label_exchange.token.encode()).hexdigest()
    return dg.MaterializeResult(metadata={"token_sha256": digest})


@pytest.mark.parametrize("leak", [None, "value", "tag"])
def test_a_run_shows_no_secret_it_was_not_given_as_a_value(prod, tmp_path, leak):
    """The project's warehouse and label exchange, as built for prod, in an embedded run whose
    asset logs, prints and records metadata: nothing of their secrets is in the instance or the
    compute logs. Given as a value (not a variable) or in a run tag, the token is found."""
    from pipelines.resources import label_exchange, warehouse

    token = prod["FLYWHEEL_LABEL_STUDIO_TOKEN"]

    exchange = label_exchange("prod")
    if leak == "value":
        exchange = LabelStudioExchange(
            url=exchange.url,
            token=token,
            project_title=exchange.project_title,
            store=exchange.store,
        )
    tags = {"team": token} if leak == "tag" else {}
    home = tmp_path / "instance"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        result = dg.materialize(
            [probe],
            resources={"warehouse": warehouse("prod"), "label_exchange": exchange},
            instance=instance,
            tags=tags,
        )
        scanner = SecretScanner(prod)
        # The compute logs: each step's stdout and stderr, as the UI shows them.
        hits = scanner.instance(instance) + scanner.folder(home / "storage")

    printed = [p for p in (home / "storage").rglob("*.out") if "publishing" in p.read_text()]
    assert printed, "the compute logs scanned hold nothing the asset printed"
    event = result.asset_materializations_for_node("probe")[0]
    assert event.metadata["token_sha256"].value == hashlib.sha256(token.encode()).hexdigest()
    run = f"run {result.run_id}"
    where = {None: [], "value": [f"{run}'s job snapshot"], "tag": [f"{run} (tags, config)"]}
    assert hits == [Hit(place, "FLYWHEEL_LABEL_STUDIO_TOKEN") for place in where[leak]]


def test_a_secret_on_a_command_line_or_in_another_variable_is_found(prod):
    token, password = prod["FLYWHEEL_LABEL_STUDIO_TOKEN"], prod["FLYWHEEL_WAREHOUSE_PASSWORD"]
    env = {"FLYWHEEL_LABEL_STUDIO_TOKEN": token, "PGPASSWORD": password}
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", token], env=env
    )
    try:  # Popen returns once the child runs the interpreter: its command line is final
        hits = [
            hit
            for hit in SecretScanner(prod).processes()
            if hit.where.startswith(f"process {sleeper.pid} ")
        ]
    finally:
        sleeper.kill()
        sleeper.wait()
    assert {(hit.where.split(") ", 1)[1], hit.secret) for hit in hits} == {
        ("command line", "FLYWHEEL_LABEL_STUDIO_TOKEN"),
        ("environment variable PGPASSWORD", "FLYWHEEL_WAREHOUSE_PASSWORD"),
    }


def test_a_secret_in_an_mlflow_run_is_found(prod, tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("flywheel-flights")
    clean = client.create_run(experiment, tags={"dagster.run_id": "abc"})
    client.log_param(clean.info.run_id, "max_epochs", "12")
    leaky = client.create_run(experiment)
    client.set_tag(leaky.info.run_id, "storage", prod["FLYWHEEL_OPTUNA_STORAGE"])

    assert SecretScanner(prod).tracking_store(uri) == [
        Hit(f"MLflow run {leaky.info.run_id} tag 'storage'", "FLYWHEEL_OPTUNA_STORAGE")
    ]


def test_a_secret_is_found_escaped_quoted_or_as_a_urls_password(tmp_path):
    value = 'pa"ss/wörd\\x'
    url = "postgresql://flywheel:s3cr%2Ft-pw@db.example:5432/optuna"
    scanner = SecretScanner({"PASSWORD": value, "STORAGE": url})
    logs = tmp_path / "logs"
    (logs / "run").mkdir(parents=True)
    (logs / "run" / "step.err").write_text(json.dumps({"config": json.dumps({"p": value})}))
    (logs / "run" / "step.out").write_text("connecting with password s3cr/t-pw\n")
    (logs / "clean.out").write_text("postgresql://flywheel:***@db.example:5432/optuna\n")

    assert scanner.folder(logs) == [
        Hit(f"file {logs / 'run' / 'step.err'}", "PASSWORD"),
        Hit(f"file {logs / 'run' / 'step.out'}", "STORAGE"),
    ]
    assert scanner.text(f"?password={quote(value, safe='')}", "a URL") == [Hit("a URL", "PASSWORD")]


def test_a_value_too_short_to_look_for_is_refused():
    with pytest.raises(ValueError, match="TOKEN: shorter than"):
        SecretScanner({"TOKEN": "x" * (MIN_LENGTH - 1)})
