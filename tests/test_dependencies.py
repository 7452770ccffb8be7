"""The dependency set works together: Dagster's selection parser and the DVC commands we use.

Dagster's asset-selection grammar needs antlr4 4.13. DVC needs hydra and omegaconf, whose 1.3/2.3
releases pin antlr4 4.9; we pin the releases that bundle their own antlr runtime instead. These
tests prove each side gets a parser that works.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import dagster as dg

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_antlr_is_the_version_dagster_needs():
    assert version("antlr4-python3-runtime").startswith("4.13.")


def test_hydra_and_omegaconf_parse_with_their_bundled_antlr():
    # Lightning imports omegaconf to save checkpoints and hydra to launch DDP, when installed.
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    assert OmegaConf.create({"a": 1, "b": "${a}"}).b == 1
    assert OverridesParser.create().parse_overrides(["lr=0.1"])[0].value() == 0.1


def test_asset_selection_strings_parse():
    selection = dg.AssetSelection.from_string('key:"flights/raw_flights" or group:"warehouse"')
    assert isinstance(selection, dg.AssetSelection)


def test_dagster_cli_selects_assets(tmp_path):
    env = os.environ | {"DAGSTER_HOME": str(tmp_path), "FLYWHEEL_HOME": str(tmp_path)}
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    out = subprocess.run(
        [
            BIN / "dagster",
            "asset",
            "list",
            "-m",
            "pipelines.definitions",
            "-a",
            "defs",
            "--select",
            'key:"flights/raw_airlines" or key:"flights/raw_planes"',
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["flights/raw_airlines", "flights/raw_planes"]


def _run(cmd: list[str], cwd: Path) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}  # `dvc init` reports its use otherwise
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"{cmd}: {out.stdout}\n{out.stderr}"
    return out.stdout


def test_dvc_commands_the_project_uses(tmp_path):
    dvc = str(BIN / "dvc")
    repo, remote = tmp_path / "repo", tmp_path / "remote"
    (repo / "data").mkdir(parents=True)
    _run(["git", "init", "-q"], repo)
    _run([dvc, "init", "--subdir", "-q"], repo / "data")
    _run([dvc, "config", "core.analytics", "false"], repo / "data")
    _run([dvc, "remote", "add", "-d", "local", str(remote)], repo / "data")
    (repo / "data" / "train.csv").write_text("a,b\n1,2\n")
    _run([dvc, "add", "-q", "train.csv"], repo / "data")
    _run([dvc, "push", "-q"], repo / "data")
    (repo / "data" / "train.csv").unlink()
    _run([dvc, "pull", "-q"], repo / "data")
    assert (repo / "data" / "train.csv").read_text() == "a,b\n1,2\n"
    assert "up to date" in _run([dvc, "status"], repo / "data").lower()


def test_xdist_runs_a_group_on_one_worker(tmp_path):
    # `make test` keeps the stack tests (two modules, one xdist_group) on one worker, so two
    # stacks never start at once; pytest 9.2 with pytest-xdist 3.8 silently stops grouping.
    for module in ("test_a.py", "test_b.py"):
        (tmp_path / module).write_text(
            "import pytest\n\n"
            "pytestmark = pytest.mark.xdist_group('stack')\n\n"
            "@pytest.mark.parametrize('i', range(4))\n"
            "def test_it(i):\n    pass\n"
        )
    (tmp_path / "test_other.py").write_text("def test_other():\n    pass\n")
    # Its own basetemp: a pytest without one resets /tmp/pytest-of-<user> to 0700, which cuts
    # PostgreSQL's user off from the stacks the other worker's tests are running.
    command = [str(BIN / "pytest"), "-n", "2", "--dist", "loadgroup", "-v"]
    out = _run([*command, "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'bt'}"], tmp_path)
    workers = {
        line.split()[0] for line in out.splitlines() if "PASSED" in line and "test_it" in line
    }
    assert len(workers) == 1 and out.count("PASSED") == 9, out
