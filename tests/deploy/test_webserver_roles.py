"""The viewers' webserver cannot launch a run; the operators' can (deploy/helm/values.yaml:
`enableReadOnly` starts `dagster-webserver --read-only` beside the full one, and
deploy/helm/ingress.yaml sends each group to its own).

Both serve one small code location from one instance, as the chart's two webservers do; the
launch is the UI's own GraphQL mutation.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from deploy.stack.processes import free_port

BIN = Path(sys.executable).parent
CODE = """
import dagster as dg


@dg.op
def hello():
    return 1


@dg.job
def hello_job():
    hello()


defs = dg.Definitions(jobs=[hello_job])
"""
LAUNCH = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on UnauthorizedError { message }
  }
}
"""
PARAMS = {
    "selector": {
        "repositoryLocationName": "defs.py",
        "repositoryName": "__repository__",
        "jobName": "hello_job",
    },
    "runConfigData": {},
}


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    reply = requests.post(
        f"http://127.0.0.1:{port}/graphql",
        json={"query": query, "variables": variables or {}},
        timeout=30,
    )
    reply.raise_for_status()
    return reply.json()["data"]


def serve(folder: Path, read_only: bool) -> tuple[subprocess.Popen, int]:
    """A webserver of the code location in `folder`, once it answers."""
    port = free_port()
    command = [str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port), "-f", "defs.py"]
    env = {"DAGSTER_HOME": str(folder / "home"), "PATH": str(BIN)}
    log = (folder / f"webserver-{port}.log").open("w")
    process = subprocess.Popen(
        [*command, *(["--read-only"] if read_only else [])],
        cwd=folder,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/server_info", timeout=2).ok:
                return process, port
        except requests.RequestException:
            pass
        assert process.poll() is None, (folder / f"webserver-{port}.log").read_text()
        time.sleep(0.5)
    process.kill()
    raise AssertionError(f"webserver on {port} did not answer")


@pytest.mark.integration
def test_the_viewers_webserver_refuses_a_launch_the_operators_makes(tmp_path: Path):
    (tmp_path / "defs.py").write_text(CODE)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    # One after the other: the first creates the instance's storage.
    operators, operators_port = serve(tmp_path, read_only=False)
    viewers, viewers_port = serve(tmp_path, read_only=True)
    try:
        refused = graphql(viewers_port, LAUNCH, {"params": PARAMS})["launchRun"]
        assert refused["__typename"] == "UnauthorizedError", refused
        launched = graphql(operators_port, LAUNCH, {"params": PARAMS})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        # The viewers see the operators' run: read-only is not blind.
        runs = graphql(viewers_port, "{ runsOrError { ... on Runs { results { runId } } } }")
        ids = [run["runId"] for run in runs["runsOrError"]["results"]]
        assert launched["run"]["runId"] in ids
    finally:
        for process in (operators, viewers):
            process.kill()
            process.wait()
