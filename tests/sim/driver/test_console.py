"""The simulation's terminal: its own lines only; libraries' output in the log file; errors once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

LIBRARY_NOISE = """
import logging, os, sys, warnings
from pathlib import Path
from sim.driver.console import output_to_log, say
with output_to_log(Path(sys.argv[1])):
    say("day 1 done")
    print("a library printing")
    sys.stdout.write("a library writing to sys.stdout\\n")
    logging.getLogger("dagster").error("a DEBUG event of a run")
    warnings.warn("a library's warning")
    os.write(1, b"a subprocess's stdout\\n")
    os.write(2, b"a subprocess's stderr\\n")
    sys.stderr.write("a progress bar\\n")
print("after")
"""


def test_only_the_simulations_lines_reach_the_terminal(tmp_path) -> None:
    log = tmp_path / "logs" / "simulation.log"
    done = subprocess.run(
        [sys.executable, "-c", LIBRARY_NOISE, str(log)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "day 1 done\nafter\n"
    assert done.stderr == ""
    written = log.read_text()
    for line in ("a library printing", "a library writing to sys.stdout", "a DEBUG event of a run"):
        assert line in written
    for line in ("a library's warning", "a subprocess's stdout"):
        assert line in written
    assert "a subprocess's stderr" in written and "a progress bar" in written
    assert "day 1 done" not in written


FAILING_RUN = """
import atexit, os, sys
import sim.driver.cli
# What a library prints while the interpreter shuts down (e.g. a binding's leak report).
atexit.register(lambda: os.write(2, b"teardown noise\\n"))
from sim.driver.executor import RunFailedError
from sim.driver.console import say
def run(days, start, options):
    say("[1/2 3s] 2013-01-01: daily_warehouse 3s")
    print("a library's line")
    print("dbt chatter", file=sys.stderr)
    raise RunFailedError("run abc of daily_warehouse_job (partition 2013-01-02) failed\\n"
                         "step daily_dbt_models:\\n  Database Error: boom")
sim.driver.cli.run = run
sys.exit(sim.driver.cli.main(["run", "--days", "2"]))
"""


def test_a_failed_run_prints_its_error_once_and_the_log_then_exits_1(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FAILING_RUN],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FLYWHEEL_HOME": str(tmp_path), "HOME": str(tmp_path)},
    )
    assert done.returncode == 1
    (log,) = (tmp_path / "logs").glob("simulation-*.log")
    assert done.stdout.splitlines() == [
        f"logs (Dagster, dbt, training): {log}",
        "[1/2 3s] 2013-01-01: daily_warehouse 3s",
        f"logs: {log}",
    ]
    assert done.stderr.count("Database Error: boom") == 1
    assert done.stderr.startswith("error: run abc of daily_warehouse_job (partition 2013-01-02)")
    written = log.read_text()
    assert "dbt chatter" in written and "a library's line" in written
    assert "teardown noise" in written


def test_the_day_loop_shows_the_time_left_at_its_pace():
    from sim.driver.simulation import remaining

    assert remaining(60.0, 10, 20) == ", ~2 min left"  # 6 s a day, 20 days
    assert remaining(5.0, 10, 3) == ", <1 min left"
    assert remaining(60.0, 10, 0) == ""  # the last day
    assert remaining(0.0, 0, 5) == ""
