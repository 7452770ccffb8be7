"""`flywheel-sim label-studio`: generated credentials, the settings as export lines."""

from __future__ import annotations

import stat

from sim.driver.cli import main


def test_env_prints_the_settings_of_a_generated_admin_and_token_kept_private(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path))
    assert main(["label-studio", "env", "--port", "18123"]) == 0
    out, err = capsys.readouterr()
    exports = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines())
    assert exports["FLYWHEEL_LABELING"] == "label-studio"
    assert exports["FLYWHEEL_LABEL_STUDIO_URL"] == "http://127.0.0.1:18123"
    assert len(exports["FLYWHEEL_LABEL_STUDIO_TOKEN"]) == 40
    assert "admin@flywheel.local" in err  # what it did goes to standard error, not to eval
    credentials = tmp_path / "label-studio" / "credentials.json"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    assert main(["label-studio", "env", "--port", "18123"]) == 0
    assert capsys.readouterr().out == out  # generated once


def test_stop_when_nothing_runs_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path))
    assert main(["label-studio", "stop"]) == 0
    assert "was not running" in capsys.readouterr().err
