"""The embedded instance's compute logs: Dagster's files, copied to the process's own output.

A run in process writes its standard output and error to the files the UI reads, and the same
bytes reach the process's streams once it ends (failed or not), exactly once; no process is
started for it (Dagster's own manager starts a `tail` and a watcher per stream).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Runs two jobs in process on the instance of DAGSTER_HOME: one that prints and succeeds, one
# that prints and fails. Records every process started meanwhile; prints what it found as JSON
# on the last line of its standard output (after the runs' own output).
SCRIPT = textwrap.dedent(
    """
    import json, os, subprocess, sys
    import dagster as dg

    started = []
    popen_init = subprocess.Popen.__init__

    def recording_init(self, args, *rest, **kwargs):
        started.append(" ".join(map(str, args)) if not isinstance(args, str) else args)
        popen_init(self, args, *rest, **kwargs)

    @dg.op
    def speaks(context):
        print("printed by the op", flush=True)
        os.write(2, b"written to descriptor 2 by the op\\n")
        context.log.info("logged by the op")

    @dg.op
    def fails():
        print("printed before failing", flush=True)
        raise RuntimeError("the op failed on purpose")

    @dg.job
    def speaking():
        speaks()

    @dg.job
    def failing():
        fails()

    with dg.DagsterInstance.get() as instance:
        subprocess.Popen.__init__ = recording_init
        try:
            ok = speaking.execute_in_process(instance=instance)
            bad = failing.execute_in_process(instance=instance, raise_on_error=False)
        finally:
            subprocess.Popen.__init__ = popen_init
        manager = type(instance.compute_log_manager).__name__
    sys.stdout.flush()
    print(json.dumps({"manager": manager, "started": started,
                      "runs": [ok.run_id, bad.run_id], "failed": not bad.success}))
    """
)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "deploy" / "dagster.yaml").read_text())
    return home


def test_a_run_s_output_is_in_its_files_and_copied_once_to_the_process_streams(
    home: Path, tmp_path: Path
) -> None:
    out, err = tmp_path / "process.out", tmp_path / "process.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            cwd=REPO,
            env={"DAGSTER_HOME": str(home), "PATH": "/usr/bin:/bin"},
            stdout=stdout,
            stderr=stderr,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, err.read_text()
    process_out, process_err = out.read_text(), err.read_text()
    found = json.loads(process_out.splitlines()[-1])
    assert found["manager"] == "FileComputeLogManager"
    assert found["failed"]
    # Dagster's mirror starts `tail -F` and a watcher per stream; nothing is started here.
    assert found["started"] == []

    succeeded, failed = (home / "storage" / run_id / "compute_logs" for run_id in found["runs"])
    [succeeded_out] = succeeded.glob("*.out")
    assert "printed by the op" in succeeded_out.read_text()
    [succeeded_err] = succeeded.glob("*.err")
    assert "written to descriptor 2 by the op" in succeeded_err.read_text()
    assert "logged by the op" in succeeded_err.read_text()
    assert list(succeeded.glob("*.complete"))
    [failed_out] = failed.glob("*.out")
    assert "printed before failing" in failed_out.read_text()
    assert "the op failed on purpose" in "".join(p.read_text() for p in failed.glob("*.err"))

    # The same bytes on the process's streams, once each: the successful run's and the failed one's.
    assert process_out.count("printed by the op") == 1
    assert process_out.count("printed before failing") == 1
    assert process_err.count("written to descriptor 2 by the op") == 1
    assert succeeded_err.read_text() in process_err
    assert process_out.index("printed by the op") < process_out.index("printed before failing")
