"""A new dataset repository (`init_repository`): DVC's, in a git repository, telling nobody."""

from __future__ import annotations

import socket
import subprocess

from pipelines.lib.datasets import dvc_executable, init_repository


def test_a_new_dataset_repository_sends_dvc_no_usage_report(tmp_path, monkeypatch):
    # `dvc init` writes its usage report to the temporary folder and starts a process that sends
    # it and then removes it; the repository's own setting, made after, comes too late for it.
    # The report's address here takes the request and never answers, so a report stays there.
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    with socket.create_server(("127.0.0.1", 0)) as silent:
        monkeypatch.setenv("DVC_ANALYTICS_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setenv("TMPDIR", str(temporary))
        monkeypatch.delenv("DVC_NO_ANALYTICS", raising=False)
        init_repository(tmp_path / "checkout" / "data")
        assert list(temporary.iterdir()) == []
    found = subprocess.run(
        [dvc_executable(), "config", "core.analytics"],
        cwd=tmp_path / "checkout" / "data",
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == "false"
