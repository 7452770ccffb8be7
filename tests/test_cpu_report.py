"""`pytest --cpu-report N` (tests/cpu_report.py): each phase counted once, from its own report."""

from __future__ import annotations

from types import SimpleNamespace

from tests.cpu_report import PROPERTY, cpu_by_test


def test_each_phase_s_cpu_is_counted_once_whether_reports_share_the_list_or_copy_it():
    shared = [(PROPERTY, 3.0), (PROPERTY, 1.5), (PROPERTY, 0.5), ("other", 9.0)]
    reports = [
        # In one process a test's reports share its list, which holds every phase's figure by
        # the end; from a pytest-xdist worker each carries the figures made until its phase.
        *(
            SimpleNamespace(nodeid="a.py::t", when=w, user_properties=shared)
            for w in ("setup", "call", "teardown")
        ),
        SimpleNamespace(nodeid="b.py::u", when="setup", user_properties=[(PROPERTY, 2.0)]),
        SimpleNamespace(
            nodeid="b.py::u", when="call", user_properties=[(PROPERTY, 2.0), (PROPERTY, 4.0)]
        ),
    ]
    assert cpu_by_test(reports) == {"a.py::t": 5.0, "b.py::u": 6.0}
