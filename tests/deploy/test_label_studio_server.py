"""Starting the local Label Studio: how its credentials reach it, and a server that exits at
once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.label_studio import (
    VERSION,
    Credentials,
    LabelStudioServerError,
    LocalLabelStudio,
)


def fake_label_studio(venv: Path, script: str) -> None:
    """A `label-studio` executable in `venv`, marked installed, that runs `script` (sh)."""
    (venv / "bin").mkdir(parents=True)
    (venv / f".installed-{VERSION}").touch()
    executable = venv / "bin" / "label-studio"
    executable.write_text(f"#!/bin/sh\n{script}\n")
    executable.chmod(0o755)


def test_the_credentials_reach_label_studio_in_its_environment_not_its_command_line(
    tmp_path: Path,
):
    # What the server was started with, written down by a stand-in that then exits.
    seen = tmp_path / "seen"
    fake_label_studio(
        tmp_path / "venv",
        f'printf "%s\\n" "$@" > {seen}.args\n'
        f'printf "%s\\n" "$LABEL_STUDIO_USERNAME" "$LABEL_STUDIO_PASSWORD" '
        f'"$LABEL_STUDIO_USER_TOKEN" > {seen}.env\nexit 2',
    )
    studio = LocalLabelStudio(tmp_path / "home", port=18124, venv=tmp_path / "venv")
    # A generated password may begin with "-" (given as an option's value, argparse took it for
    # an option and the server exited): it arrives unchanged.
    studio.home.mkdir()
    creds = Credentials(studio.url, "admin@flywheel.local", "-Zx4_q", "ab" * 20)
    studio.credentials_file.write_text(json.dumps(creds.__dict__))

    with pytest.raises(LabelStudioServerError, match="exited while starting"):
        studio.start(timeout_s=60)

    args = Path(f"{seen}.args").read_text().splitlines()
    assert args[0] == "start" and "--enable-legacy-api-token" in args
    assert not [a for a in args if creds.password in a or creds.token in a]
    assert Path(f"{seen}.env").read_text().splitlines() == [
        creds.username,
        creds.password,
        creds.token,
    ]


def test_a_server_that_exits_while_starting_is_reported_at_once(tmp_path: Path):
    venv = tmp_path / "venv"
    fake_label_studio(venv, "echo 'label-studio start: error: bad arguments'\nexit 2")
    studio = LocalLabelStudio(tmp_path / "home", port=18125, venv=venv)
    started = time.monotonic()
    with pytest.raises(LabelStudioServerError, match=r"exited while starting(.|\n)*bad arguments"):
        studio.start(timeout_s=120)
    assert time.monotonic() - started < 30  # not the whole timeout


def test_a_server_found_dying_is_started_afresh(tmp_path: Path):
    """start() right after the server was killed can find its process still on the way out: it
    waits for that one to go, then starts its own, instead of reporting the dead one's exit."""
    site = tmp_path / "site"
    (site / "api").mkdir(parents=True)
    (site / "health").write_text("ok")
    (site / "api" / "projects").write_text("[]")
    venv = tmp_path / "venv"
    port = 18126
    fake_label_studio(
        venv, f"cd {site} && exec {sys.executable} -m http.server -b 127.0.0.1 {port}"
    )
    studio = LocalLabelStudio(tmp_path / "home", port=port, venv=venv)
    studio.home.mkdir()
    dying = subprocess.Popen(["sleep", "2"])
    studio.pid_file.write_text(str(dying.pid))
    try:
        studio.start(timeout_s=60)
        assert studio.pid() not in (None, dying.pid) and studio.healthy()
    finally:
        studio.stop()
    assert dying.poll() is not None
