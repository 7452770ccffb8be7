"""Starting the local Label Studio: its command line and a server that exits at once."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest

from sim.world.label_studio_server import (
    VERSION,
    Credentials,
    LabelStudioServerError,
    LocalLabelStudio,
)


def test_a_password_beginning_with_a_dash_reaches_label_studio_as_the_password(tmp_path):
    studio = LocalLabelStudio(tmp_path, port=18124)
    creds = Credentials(studio.url, "admin@flywheel.local", "-Zx4_q", "ab" * 20)
    # `label-studio start` declares these options as argparse options of one argument each.
    parser = argparse.ArgumentParser(exit_on_error=False)
    for option in ("--username", "--password", "--user-token"):
        parser.add_argument(option)
    parsed, _ = parser.parse_known_args(studio.command(creds)[2:])
    assert (parsed.username, parsed.password, parsed.user_token) == (
        creds.username,
        "-Zx4_q",
        creds.token,
    )
    # Given as two words, the same password is taken for an option (what broke a start).
    with pytest.raises(argparse.ArgumentError, match="expected one argument"):
        parser.parse_known_args(["--password", "-Zx4_q"])


def test_a_server_that_exits_while_starting_is_reported_at_once(tmp_path: Path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / f".installed-{VERSION}").touch()
    executable = venv / "bin" / "label-studio"
    executable.write_text("#!/bin/sh\necho 'label-studio start: error: bad arguments'\nexit 2\n")
    executable.chmod(0o755)
    studio = LocalLabelStudio(tmp_path / "home", port=18125, venv=venv)
    started = time.monotonic()
    with pytest.raises(LabelStudioServerError, match=r"exited while starting(.|\n)*bad arguments"):
        studio.start(timeout_s=120)
    assert time.monotonic() - started < 30  # not the whole timeout
