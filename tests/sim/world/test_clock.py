"""The simulated clock persists the last landed day."""

from __future__ import annotations

from datetime import date

import pytest

from sim.world.clock import clock_path, read_clock, write_clock


def test_clock_is_unset_until_written(tmp_path):
    assert read_clock(tmp_path) is None


def test_clock_round_trips(tmp_path):
    write_clock(tmp_path, date(2013, 3, 1))
    write_clock(tmp_path, date(2013, 3, 2))
    assert read_clock(tmp_path) == date(2013, 3, 2)
    assert clock_path(tmp_path) == tmp_path / "sim" / "clock.json"
    assert [p.name for p in clock_path(tmp_path).parent.iterdir()] == ["clock.json"]


def test_unreadable_clock_is_an_error(tmp_path):
    clock_path(tmp_path).parent.mkdir(parents=True)
    clock_path(tmp_path).write_text('{"last": 1}')
    with pytest.raises(ValueError, match="unreadable simulated clock"):
        read_clock(tmp_path)
