"""Whether Kubernetes NetworkPolicies allow a connection, as the API defines them
(https://kubernetes.io/docs/concepts/services-networking/network-policies/): a connection from
one peer to another on a port is allowed when the source's egress and the destination's ingress
both allow it. A side no policy selects (for that direction) allows everything; a side some
policies select allows what any of their rules allows. Policies apply to the pods of their own
namespace only (`metadata.namespace`, as `kubectl apply -n` sets it). A peer outside the
cluster is an IP address, matched by `ipBlock` alone; pods are matched by selectors (the API
means `ipBlock` for addresses outside the cluster).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Peer:
    """A pod (its namespace and labels) or an address outside the cluster (`ip`)."""

    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    ip: str | None = None


def selects(selector: dict, labels: dict[str, str]) -> bool:
    """A label selector (`matchLabels`, `matchExpressions`) against `labels`; {} selects all."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if not {
            "In": present and labels.get(key) in (values or []),
            "NotIn": not present or labels[key] not in (values or []),
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]:
            return False
    return True


def _in_block(block: dict, ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    if address not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(address in ipaddress.ip_network(cidr) for cidr in block.get("except") or [])


def _peer_matches(rule_peer: dict, namespace: str, peer: Peer) -> bool:
    if "ipBlock" in rule_peer:
        return peer.ip is not None and _in_block(rule_peer["ipBlock"], peer.ip)
    if peer.ip is not None:
        return False
    if "namespaceSelector" in rule_peer:
        ns_labels = {"kubernetes.io/metadata.name": peer.namespace or ""}
        if not selects(rule_peer["namespaceSelector"], ns_labels):
            return False
    elif peer.namespace != namespace:
        return False
    return selects(rule_peer.get("podSelector") or {}, peer.labels)


def _ports_match(ports: list[dict] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for rule in ports:
        if rule.get("protocol", "TCP") != protocol:
            continue
        first, last = rule.get("port"), rule.get("endPort", rule.get("port"))
        if first is None or first <= port <= last:
            return True
    return False


def _types(policy: dict) -> set[str]:
    spec = policy["spec"]
    return set(spec.get("policyTypes") or ["Ingress", *(["Egress"] if "egress" in spec else [])])


def _side_allows(
    policies: list[dict], pod: Peer, other: Peer, port: int, protocol: str, direction: str
) -> bool:
    """Whether the policies of `pod`'s namespace let it send to (Egress) or take from (Ingress)
    `other`."""
    if pod.ip is not None:
        return True  # outside the cluster: no NetworkPolicy applies
    key, peers = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    applying = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and direction in _types(p)
        and selects(p["spec"]["podSelector"], pod.labels)
    ]
    if not applying:
        return True
    for policy in applying:
        namespace = policy["metadata"]["namespace"]
        for rule in policy["spec"].get(key) or []:
            matched = not rule.get(peers) or any(
                _peer_matches(r, namespace, other) for r in rule[peers]
            )
            if matched and _ports_match(rule.get("ports"), port, protocol):
                return True
    return False


def allowed(
    policies: list[dict], source: Peer, destination: Peer, port: int, protocol: str = "TCP"
) -> bool:
    """Whether `source` may open a connection to `destination` on `port`."""
    return _side_allows(policies, source, destination, port, protocol, "Egress") and _side_allows(
        policies, destination, source, port, protocol, "Ingress"
    )
