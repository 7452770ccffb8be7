"""The pods the official Dagster chart (1.13) starts for its own components, as its templates
write them from the values: the webserver, the read-only webserver (`enableReadOnly`), the daemon
and the migration Job's pod. Their security settings, volumes and mounts come from the values
exactly where the templates take them; images and commands are the chart's defaults, which the
checks here do not depend on.
"""

from __future__ import annotations

# The templates' init containers: each waits for a dependency with the component's own
# securityContext (`check-db-ready` for the database, `init-user-deployment-<name>` for each
# code server).
POSTGRES_IMAGE = "docker.io/library/postgres:14.6"
BUSYBOX_IMAGE = "docker.io/library/busybox:1.28"
DAGSTER_IMAGE = "docker.io/dagster/dagster-celery-k8s:1.13.27"


def _instance_mount(values: dict) -> dict:
    home = values.get("global", {}).get("dagsterHome", "/opt/dagster/dagster_home")
    return {
        "name": "dagster-instance",
        "mountPath": f"{home}/dagster.yaml",
        "subPath": "dagster.yaml",
    }


def _pod(values: dict, component: str, name: str, command: list[str], waits: bool) -> dict:
    settings = values[component]
    context = settings["securityContext"]
    deployments = values["dagster-user-deployments"]["deployments"]
    init = []
    if waits:
        init.append({
            "name": "check-db-ready", "image": POSTGRES_IMAGE,
            "command": ["sh", "-c", "until pg_isready -h $PGHOST; do sleep 2; done"],
            "securityContext": context,
        })  # fmt: skip
        init += [
            {
                "name": f"init-user-deployment-{deployment['name']}",
                "image": BUSYBOX_IMAGE,
                "command": ["sh", "-c", f"until nslookup {deployment['name']}; do sleep 2; done"],
                "securityContext": context,
            }
            for deployment in deployments
        ]
    container = {
        "name": "dagster",
        "image": DAGSTER_IMAGE,
        "command": command,
        "securityContext": context,
        "volumeMounts": [_instance_mount(values), *(settings.get("volumeMounts") or [])],
    }
    spec = {
        "serviceAccountName": values["serviceAccount"]["name"],
        "securityContext": settings["podSecurityContext"],
        **({"initContainers": init} if init else {}),
        "containers": [container],
        "volumes": [
            {"name": "dagster-instance", "configMap": {"name": "dagster-instance"}},
            *(settings.get("volumes") or []),
        ],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def chart_pods(values: dict) -> dict[str, dict]:
    """The chart's own pods the values give, by what they are."""
    webserver = ["dagster-webserver", "-h", "0.0.0.0", "-p", "80", "-w", "/dagster-workspace/"]
    pods = {
        "webserver": _pod(values, "dagsterWebserver", "dagster-webserver", webserver, True),
        "daemon": _pod(values, "dagsterDaemon", "dagster-daemon", ["dagster-daemon", "run"], True),
        # The migration Job takes the webserver's settings (`migrate.enabled`, once per upgrade).
        "migrate job": _pod(
            values,
            "dagsterWebserver",
            "dagster-instance-migrate",
            ["dagster", "instance", "migrate"],
            False,
        ),
    }
    if values["dagsterWebserver"].get("enableReadOnly"):
        pods["read-only webserver"] = _pod(
            values, "dagsterWebserver", "dagster-webserver-read-only",
            [*webserver, "--read-only"], True,
        )  # fmt: skip
    return pods
