"""The `flywheel-sim` command line, run in-process against a temporary state directory."""

from __future__ import annotations

import csv
import io
import json
import re
import runpy
import sys
from pathlib import Path

import pytest

from sim.driver.cli import main

OUTCOMES = {"dep_time", "dep_delay", "arr_time", "arr_delay", "air_time"}


def _clock(home: Path) -> str:
    return json.loads((home / "sim" / "clock.json").read_text())["last_landed_day"]


def _landed(home: Path) -> dict[str, bytes]:
    root = home / "landing" / "flights"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*.csv")}


def _row_count(data: bytes) -> int:
    return sum(1 for _ in csv.DictReader(io.StringIO(data.decode())))


def test_advance_lands_days_from_the_task_start(home, capsys, source_counts):
    assert main(["advance", "--days", "3"]) == 0
    landed = _landed(home)
    days = ["2013-01-01", "2013-01-02", "2013-01-03"]
    expected = {f"{feed}/{d}.csv" for feed in ("flights", "weather") for d in days}
    expected |= {f"dimension/{name}.csv" for name in ("planes", "airports", "airlines")}
    assert set(landed) == expected
    for d in days:
        assert _row_count(landed[f"flights/{d}.csv"]) == source_counts["flights"][d]
        assert _row_count(landed[f"weather/{d}.csv"]) == source_counts["weather"][d]
    assert _clock(home) == "2013-01-03"
    rows = sum(source_counts["flights"][d] for d in days)
    out = capsys.readouterr().out
    assert f"landed 3 days (2013-01-01..2013-01-03) into {home / 'landing'}" in out
    assert f"9 files written, 0 unchanged, {rows:,} flights rows, " in out
    assert "clock at 2013-01-03" in out


def test_advance_continues_after_the_clock(home, capsys):
    main(["advance", "--days", "2"])
    main(["advance", "--days", "1"])
    assert _clock(home) == "2013-01-03"
    assert "landed 1 days (2013-01-03..2013-01-03)" in capsys.readouterr().out


def test_advance_is_idempotent(home, capsys):
    main(["advance", "--days", "2", "--start", "2013-04-01"])
    before = {p: p.stat().st_mtime_ns for p in (home / "landing" / "flights").rglob("*")}
    capsys.readouterr()
    assert main(["advance", "--days", "2", "--start", "2013-04-01"]) == 0
    assert "0 files written, 7 unchanged" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in (home / "landing" / "flights").rglob("*")} == before
    assert _clock(home) == "2013-04-02"


def test_replaying_an_earlier_day_keeps_the_clock(home):
    main(["advance", "--days", "1", "--start", "2013-06-10"])
    main(["advance", "--days", "1", "--start", "2013-06-01"])
    assert _clock(home) == "2013-06-10"
    assert "flights/2013-06-01.csv" in _landed(home)


def test_advance_clamps_at_the_end_of_the_year(home, capsys):
    main(["advance", "--days", "10", "--start", "2013-12-30"])
    out = capsys.readouterr().out
    assert "clamped to the task's last day 2013-12-31: landing 2 days" in out
    assert _clock(home) == "2013-12-31"
    landed = _landed(home)
    assert sorted(k for k in landed if k.startswith("flights/")) == [
        "flights/2013-12-30.csv",
        "flights/2013-12-31.csv",
    ]
    assert landed["weather/2013-12-31.csv"].count(b"\n") == 1
    assert main(["advance", "--days", "1"]) == 0
    assert "already reached the task's last day 2013-12-31" in capsys.readouterr().out
    assert _clock(home) == "2013-12-31"


def test_a_whole_year_lands_with_every_source_row(home, capsys, source_counts):
    assert main(["advance", "--days", "400"]) == 0
    landed = _landed(home)
    for feed in ("flights", "weather"):
        days = sorted(k for k in landed if k.startswith(f"{feed}/"))
        assert len(days) == 365
        counts = {k[len(feed) + 1 : -4]: _row_count(landed[k]) for k in days}
        assert {d: n for d, n in counts.items() if n} == dict(source_counts[feed])
    assert "landed 365 days (2013-01-01..2013-12-31)" in capsys.readouterr().out
    assert _clock(home) == "2013-12-31"


def test_landed_flights_hold_no_outcomes(home):
    main(["advance", "--days", "1"])
    header = _landed(home)["flights/2013-01-01.csv"].split(b"\n", 1)[0].decode().split(",")
    assert OUTCOMES.isdisjoint(header)


def test_status_shows_the_clock_and_landing_zone(home, capsys):
    main(["status"])
    assert "clock: not started (next day 2013-01-01" in capsys.readouterr().out
    main(["advance", "--days", "1"])
    capsys.readouterr()
    main(["status"])
    out = capsys.readouterr().out
    assert "clock: 2013-01-01 (next day 2013-01-02" in out
    assert f"landing zone: {home / 'landing'}" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required"),
        (["advance"], "--days"),
        (["advance", "--days", "0"], "expected a whole number >= 1"),
        (["advance", "--days", "two"], "expected a whole number >= 1"),
        (["advance", "--days", "1", "--start", "2013-13-01"], "expected a date as YYYY-MM-DD"),
        (["advance", "--days", "1", "--start", "2014-01-01"], "outside task 'flights'"),
        (["advance", "--days", "1", "--env", "staging"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_with_a_usage_error(home, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (home / "sim").exists()


def test_module_entry_point(home, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["sim", "status"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("sim", run_name="__main__")
    assert exit_info.value.code == 0
    assert "clock: not started" in capsys.readouterr().out


def test_every_example_under_help_is_a_command_the_parser_takes() -> None:
    import shlex

    from sim.driver.arguments import EXAMPLES
    from sim.driver.cli import build_parser

    parsed = 0
    for text in EXAMPLES.values():
        for line in text.replace("\\\n", " ").splitlines():
            if not re.match(r"\s*([A-Z_]+=\S+ )*flywheel-sim ", line):
                continue
            words = shlex.split(line, comments=True)
            while words and "=" in words[0]:  # FLYWHEEL_TASK=movielens before the command
                words.pop(0)
            if words[:1] == ["flywheel-sim"]:
                build_parser().parse_args(words[1:])  # exits 2 on a flag it does not take
                parsed += 1
    assert parsed >= 10
