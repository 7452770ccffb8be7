"""The namespace's NetworkPolicies and the webservers' Ingresses (deploy/helm/): each object valid
for the Kubernetes API (strict), and the table of who may reach whom asserted against the
policies, with the pods' labels as the chart and dagster-k8s write them."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
import yaml

from tests.deploy.network_policy import Peer, allowed
from tests.deploy.test_kubernetes import (  # noqa: F401  (fixtures)
    HELM,
    KUBERNETES,
    helm_defs,
    launcher,
    prod,
    rendered,
    run_tags,
    step_tags,
)

NAMESPACE = "flywheel"


def documents(name: str) -> list[dict]:
    return list(yaml.safe_load_all((HELM / name).read_text()))


def policies() -> list[dict]:
    """The policies as `kubectl apply -n flywheel` creates them."""
    found = documents("network-policies.yaml")
    for policy in found:
        policy["metadata"]["namespace"] = NAMESPACE
    return found


def chart(component: str) -> Peer:
    labels = {"app.kubernetes.io/name": "dagster", "app.kubernetes.io/instance": "dagster"}
    return Peer(NAMESPACE, {**labels, "component": component})


def pod_labels(obj: dict) -> dict[str, str]:
    return obj["spec"]["template"]["metadata"]["labels"]


@pytest.fixture
def peers(rendered) -> dict[str, Peer]:  # noqa: F811
    """Every party of the table, by name."""
    return {
        "webserver": chart("dagster-webserver"),
        "read-only webserver": chart("dagster-webserver-read-only"),
        "daemon": chart("dagster-daemon"),
        "code server": Peer(
            NAMESPACE,
            {
                "app.kubernetes.io/name": "dagster-user-deployments",
                "component": "user-deployments",
                "deployment": "flywheel",
            },
        ),
        "run": Peer(NAMESPACE, pod_labels(rendered["retraining run"])),
        "step": Peer(NAMESPACE, pod_labels(rendered["retraining step flights__challenger_model"])),
        "tuning worker": Peer(NAMESPACE, pod_labels(rendered["tuning workers"])),
        "ingress controller": Peer("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"}),
        "mlflow": Peer("mlflow", {"app.kubernetes.io/name": "mlflow"}),
        "dns": Peer("kube-system", {"k8s-app": "kube-dns"}),
        "kube-system pod": Peer("kube-system", {"k8s-app": "metrics-server"}),
        "other namespace": Peer("team-b", {"app": "notebook"}),
        "database": Peer(ip="10.0.40.10"),
        "kubernetes api": Peer(ip="10.0.0.5"),
        "s3": Peer(ip="52.216.0.10"),
        "vpc host": Peer(ip="10.1.2.3"),
        "instance metadata": Peer(ip="169.254.169.254"),
    }


OURS = ("webserver", "read-only webserver", "daemon", "code server", "run", "step", "tuning worker")
ALLOWED = [
    *[("ingress controller", web, 80) for web in ("webserver", "read-only webserver")],
    *[(caller, "code server", 4000) for caller in ("webserver", "read-only webserver", "daemon")],
    *[(caller, "kubernetes api", 443) for caller in ("webserver", "daemon", "run", "step")],
    *[(caller, "mlflow", 5000) for caller in ("code server", "run", "step", "tuning worker")],
    *[(pod, "database", 5432) for pod in OURS],
    *[(pod, "s3", 443) for pod in OURS],
    *[(pod, "dns", 53) for pod in OURS],
]
DENIED = [
    # Nothing reaches the webservers but the ingress controller, nor the code server but them
    # and the daemon.
    *[(caller, "webserver", 80) for caller in ("other namespace", "run", "step", "mlflow")],
    *[
        (caller, "code server", 4000)
        for caller in ("ingress controller", "other namespace", "run", "step", "tuning worker")
    ],
    ("ingress controller", "daemon", 80),
    ("mlflow", "run", 8080),
    # Runs and workers reach only what their steps use.
    ("tuning worker", "kubernetes api", 443),
    ("code server", "kubernetes api", 443),
    *[(caller, "mlflow", 5000) for caller in ("webserver", "daemon")],
    ("run", "database", 22),
    ("run", "vpc host", 443),
    ("run", "other namespace", 8888),
    ("run", "kube-system pod", 443),
    *[(pod, "instance metadata", 80) for pod in OURS],
]


def test_each_object_is_valid_for_the_kubernetes_api():
    objects = [*documents("network-policies.yaml"), *documents("ingress.yaml")]
    kinds = [obj["kind"] for obj in objects]
    assert kinds.count("Ingress") == 2 and kinds.count("NetworkPolicy") == 8
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
    broken = copy.deepcopy(objects[0])
    broken["spec"]["policyType"] = ["Ingress"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


@pytest.mark.parametrize(("source", "destination", "port"), ALLOWED)
def test_allowed(peers, source, destination, port):
    protocol = "UDP" if port == 53 else "TCP"
    assert allowed(policies(), peers[source], peers[destination], port, protocol)


@pytest.mark.parametrize(("source", "destination", "port"), DENIED)
def test_denied(peers, source, destination, port):
    assert not allowed(policies(), peers[source], peers[destination], port)


def test_without_the_policies_every_denied_pair_is_open(peers):
    """The namespace as it was before: no policy, every pair of the table open."""
    assert all(allowed([], peers[s], peers[d], port) for s, d, port in DENIED)


def test_the_ingresses_send_operators_and_viewers_to_their_webservers():
    backends = {}
    for ingress in documents("ingress.yaml"):
        (rule,) = ingress["spec"]["rules"]
        (path,) = rule["http"]["paths"]
        auth = ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/auth-url"]
        backends[ingress["metadata"]["name"]] = (path["backend"]["service"]["name"], auth)
    webserver, auth = backends["flywheel-operators"]
    assert webserver == "dagster-webserver" and auth.endswith("allowed_groups=flywheel-operators")
    webserver, auth = backends["flywheel-viewers"]
    assert webserver == "dagster-webserver-read-only" and "flywheel-viewers" in auth
