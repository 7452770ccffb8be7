"""Figures by month of a simulation's terminal output (`make flywheel ... > FILE`).

    python -m bench.simulation_months FILE

Reads the lines the simulation prints for each day (`[n/N Ts] YYYY-MM-DD: job Xs, ...`) and prints,
by month: days, wall seconds, seconds a day, retrainings, their seconds (as the lines round
them), and seconds a day without them; then the whole span.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

DAY = re.compile(r"^\[(\d+)/(\d+) (\d+)s\] (\d{4}-\d\d)-\d\d: (.*)$")
RETRAINING = re.compile(r"retraining (\d+)s")


def months(lines: list[str]) -> dict[str, list[float]]:
    """Per month: [days, wall s, retrainings, their s]."""
    figures: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0, 0.0])
    previous = 0.0
    for line in lines:
        match = DAY.match(line)
        if not match:
            continue
        elapsed, month, runs = float(match.group(3)), match.group(4), match.group(5)
        row = figures[month]
        row[0] += 1
        row[1] += elapsed - previous
        previous = elapsed
        for seconds in RETRAINING.findall(runs):
            row[2] += 1
            row[3] += float(seconds)
    return figures


def main() -> int:
    """Print the table; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("output", type=Path, help="the simulation's terminal output")
    args = parser.parse_args()
    figures = months(args.output.read_text().splitlines())
    if not figures:
        raise SystemExit(f"{args.output}: no day line of the simulation in it")
    print("| month | days | wall s | s a day | retrainings | their s | s a day without them |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    total = [0, 0.0, 0, 0.0]
    for month, (days, wall, count, spent) in sorted(figures.items()):
        total = [total[0] + days, total[1] + wall, total[2] + count, total[3] + spent]
        print(
            f"| {month} | {days:.0f} | {wall:,.0f} | {wall / days:.1f} | {count:.0f} | "
            f"{spent:,.0f} | {(wall - spent) / days:.1f} |"
        )
    days, wall, count, spent = total
    print(
        f"| all | {days:.0f} | {wall:,.0f} | {wall / days:.1f} | {count:.0f} | {spent:,.0f} | "
        f"{(wall - spent) / days:.1f} |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
