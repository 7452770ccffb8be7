"""Where the suite's CPU goes: `pytest --cpu-report N` prints the N test files and the N tests
that took the most CPU seconds (user and system, of the test's process and of the processes it
started and waited for: what `/usr/bin/time` counts of the suite), setup and teardown included,
so a module's shared fixture counts where it is first made. Services started apart from the
test (a stack's supervisord and what it runs) are not counted, as `/usr/bin/time` does not.

Each phase's figure travels in its report's `user_properties`, so it works under pytest-xdist.
"""

from __future__ import annotations

import resource
from collections import Counter
from collections.abc import Iterator

import pytest

PROPERTY = "cpu_s"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-report",
        type=int,
        default=0,
        metavar="N",
        help="print the N test files and the N tests that took the most CPU seconds",
    )


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


def _measured(item: pytest.Item) -> Iterator[None]:
    began = _cpu_s()
    yield
    item.user_properties.append((PROPERTY, _cpu_s() - began))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item)


def cpu_by_test(reports) -> Counter[str]:
    """CPU seconds by test id, from each phase's report (a phase's figure is in the report of
    that phase and every later one of the test: each is counted once, from its own phase)."""
    totals: Counter[str] = Counter()
    for report in reports:
        figures = [value for name, value in report.user_properties if name == PROPERTY]
        phase = ("setup", "call", "teardown").index(report.when)
        if len(figures) > phase:
            totals[report.nodeid] += figures[phase]
    return totals


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    shown = config.getoption("--cpu-report")
    if not shown:
        return
    reports = [r for reports in terminalreporter.stats.values() for r in reports]
    tests = cpu_by_test(r for r in reports if getattr(r, "when", None) and r.user_properties)
    files: Counter[str] = Counter()
    for nodeid, seconds in tests.items():
        files[nodeid.split("::")[0]] += seconds
    write = terminalreporter.write_line
    terminalreporter.section(f"CPU seconds: {sum(tests.values()):,.0f} in the tests")
    for title, counts in (("files", files), ("tests", tests)):
        write(f"the {shown} {title} that took the most:")
        for name, seconds in counts.most_common(shown):
            write(f"{seconds:9.1f} s  {name}")
