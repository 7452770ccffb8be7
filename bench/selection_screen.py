"""Benchmark: which label selection serves production best, in a fast replay of the loop?

    python -m bench.selection_screen [--seeds 10] [--jobs 2] [--start 2013-04-01]
                                     [--scored-from 2013-04-08] [--max-iter 40]
                                     [--member-max-iter 20] [--out weeks.csv]

Replays the days from `--start` to the end of 2013 once per strategy and seed
(sim.judge.selection_screen): each day the reference learner, refitted every 7 days on the
replay's labels, scores the day's flights and the strategy picks 150 of them. Prints, per
strategy, the mean over seeds of its difference from uniform labels in mean weekly production
AUC, with Holm-adjusted seed-level t intervals, the minimal detectable effect at 80% power and
the winner by the rule: at least +0.003 with its adjusted interval above 0, else uniform.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import date

import pandas as pd

from sim.judge.screen_stats import compare, seed_means, winner
from sim.judge.selection_screen import ScreenConfig, World, replay
from sim.judge.selection_strategies import STRATEGIES

MIN_GAIN = 0.003


def one_seed(world: World, seed: int, strategies: list[str], config: ScreenConfig):
    """Every strategy's weekly AUCs under `seed`, and the seconds it took."""
    started = time.perf_counter()
    tables = [replay(world, s, seed, config).assign(strategy=s, seed=seed) for s in strategies]
    return pd.concat(tables, ignore_index=True), time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Run the screen and print its table."""
    from joblib import Parallel, delayed

    from pipelines.task import load_task
    from sim.judge.flight_table import flight_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--start", type=date.fromisoformat, default=date(2013, 4, 1))
    parser.add_argument("--end", type=date.fromisoformat, default=date(2014, 1, 1))
    parser.add_argument("--scored-from", type=date.fromisoformat, default=date(2013, 4, 8))
    parser.add_argument("--max-iter", type=int, default=40)
    parser.add_argument("--member-max-iter", type=int, default=20)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--out", help="write every week's AUC here (CSV)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    spec = load_task("flights").model
    world = World(flight_table(args.start, args.end), spec.features, spec.time_column)
    config = ScreenConfig(
        max_iter=args.max_iter, member_max_iter=args.member_max_iter, scored_from=args.scored_from
    )
    strategies = args.strategies.split(",")
    runs = Parallel(n_jobs=args.jobs, return_as="generator_unordered")(
        delayed(one_seed)(world, seed, strategies, config) for seed in range(args.seeds)
    )
    weeks = []
    for table, seconds in runs:
        weeks.append(table)
        means = table.groupby("strategy").auc.mean().round(4).to_dict()
        print(f"seed {table.seed.iloc[0]}: {seconds:.0f} s, {means}", file=sys.stderr)
    weeks = pd.concat(weeks, ignore_index=True)
    if args.out:
        weeks.to_csv(args.out, index=False)
    means = seed_means(weeks)
    table = compare(means, "uniform")
    print(f"mean weekly AUC over {len(means)} seeds:", means.mean().round(4).to_dict())
    print(table.round(4).to_string(index=False))
    print(
        f"winner (>= +{MIN_GAIN} and Holm interval above 0): {winner(table, MIN_GAIN, 'uniform')}"
    )
    print(f"wall {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
