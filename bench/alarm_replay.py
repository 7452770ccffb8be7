"""Benchmark: how often does the excess-loss alarm fire on the replayed year, and how soon after
a planted concept break?

    python -m bench.alarm_replay [--seeds 3] [--carrier B6] [--break-day 2013-10-01]
                                 [--start 2013-04-01] [--max-iter 40]

Replays April to December once per seed with uniform labels and the reference learner refitted
weekly (sim.judge.alarm_replay), once as the source has it and once with the concept break
(`concept:CARRIER@DAY`), and runs the pipeline's alarm with the flights task's settings on each
delivery day. Prints, per seed: the alarms on the ordinary replay and the days between them,
the alarms before the break in the broken one, and the delay from the break to its first alarm.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import date, timedelta

import numpy as np

from sim.judge.alarm_replay import alarms, concept_break, first_alarm_after


def main(argv: list[str] | None = None) -> int:
    """Replay, judge and print the table."""
    from pipelines.task import load_task
    from sim.judge.flight_table import flight_table
    from sim.judge.selection_screen import ScreenConfig, World

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--carrier", default="B6")
    parser.add_argument("--break-day", type=date.fromisoformat, default=date(2013, 10, 1))
    parser.add_argument("--start", type=date.fromisoformat, default=date(2013, 4, 1))
    parser.add_argument("--max-iter", type=int, default=40)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    task = load_task("flights")
    spec, monitoring = task.model, task.monitoring
    world = World(flight_table(args.start, date(2014, 1, 1)), spec.features, spec.time_column)
    broken = concept_break(world, args.carrier, args.break_day)
    # The first Monday a week after the start: the first model is trained by then.
    scored_from = args.start + timedelta(days=7 + (7 - args.start.weekday()) % 7)
    config = ScreenConfig(max_iter=args.max_iter, scored_from=scored_from)
    print(
        f"seed  ordinary: alarms, days between  |  concept:{args.carrier}@{args.break_day}: "
        "alarms before, delay to the first after"
    )
    delays = []
    for seed in range(args.seeds):
        ordinary = alarms(world, seed, config, monitoring)
        armed = ordinary[~ordinary.status.str.startswith("not armed")]
        fired = int(ordinary.is_alarm.sum())
        between = len(armed) / fired if fired else float("inf")
        planted = alarms(broken, seed, config, monitoring)
        before = int((planted.is_alarm & (planted.monitored_on < args.break_day)).sum())
        first = first_alarm_after(planted, args.break_day)
        delay = (first - args.break_day).days if first else None
        delays.append(np.inf if delay is None else delay)
        print(
            f"{seed:4d}  {fired:3d} in {len(armed)} armed days, {between:.1f}  |  "
            f"{before:3d}, {delay if delay is not None else 'none'} days",
            flush=True,
        )
    print(
        f"median delay {np.median(delays):.0f} days; {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
