"""Kubernetes' `restricted` Pod Security Standard, as the admission controller checks a pod spec
(https://kubernetes.io/docs/concepts/security/pod-security-standards/): what a pod of the
project must pass to run in a namespace labelled `pod-security.kubernetes.io/enforce: restricted`.
"""

from __future__ import annotations

ALLOWED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
SECCOMP = {"RuntimeDefault", "Localhost"}


def violations(pod: dict) -> list[str]:
    """Every rule of the restricted profile (and of baseline, which it includes) that the pod
    spec `pod` (camelCase, as the API takes it) breaks, named."""
    found = []
    pod_context = pod.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            found.append(f"{flag} is set")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            found.append(f"volume {volume['name']!r} is of a restricted type: {sorted(kinds)}")
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    for container in containers:
        name, context = container["name"], container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"container {name!r} is privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"container {name!r} does not set allowPrivilegeEscalation: false")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"container {name!r} does not drop ALL capabilities")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"container {name!r} adds capabilities {capabilities['add']}")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            found.append(f"container {name!r} may run as root (runAsNonRoot)")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            found.append(f"container {name!r} runs as user 0")
        seccomp = context.get("seccompProfile") or pod_context.get("seccompProfile") or {}
        if seccomp.get("type") not in SECCOMP:
            found.append(f"container {name!r} has no seccompProfile RuntimeDefault or Localhost")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"container {name!r} uses a host port")
    return found
