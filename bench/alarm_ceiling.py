"""Benchmark: how precise could an alarm built on the loop's own labels be at best?

    python -m bench.alarm_ceiling --home DIR [--boot 100]

Reads a finished simulation's state (its FLYWHEEL_HOME). The report judges each retraining on every
flight of the 14 days after its event day (sim.judge.alarms: its challenger's AUC minus the
champion's). The loop itself only ever learns the outcomes of the flights it labels. Here each
retraining is judged again the same way on those flights alone: all the labelled flights of the
same days, and only the uniformly drawn ones (audit and random picks, whose AUC is unbiased).
An alarm that fired whenever that gain reached `alarms.WORTH` would see the very outcomes it
is judged on, which no alarm can before the fact: its precision is a ceiling for any alarm made
from the loop's label budget. Beside it, the judgement's own noise: the bootstrap standard error
of each gain over the flights it is measured on.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

Predict = Callable[[int, pd.DataFrame], np.ndarray]


class ScoresOnce:
    """`predict` that scores each version once: the windows it is asked for later are taken from
    the scores it already gave (a subset of flights already scored)."""

    def __init__(self, predict: Predict) -> None:
        self.predict, self.scores = predict, {}

    def __call__(self, version: int, frame: pd.DataFrame) -> np.ndarray:
        known = self.scores.get(version)
        if known is None or not frame.index.isin(known.index).all():
            fresh = pd.Series(self.predict(version, frame), index=frame.index)
            known = fresh if known is None else pd.concat([known, fresh]).groupby(level=0).last()
            self.scores[version] = known
        return known.loc[frame.index].to_numpy()


def _judged():
    """The served task as the judge sees it (imported here: the judge needs the pipelines)."""
    from pipelines.task import load_task
    from sim.judge.examples import Judged

    return Judged(load_task())


def judged_on(
    runs: pd.DataFrame,
    flights: pd.DataFrame,
    subsets: dict[str, pd.Series],
    predict: Predict,
    last_day: date,
    boot: int,
) -> pd.DataFrame:
    """`runs` judged by `alarms.judge` on all `flights` (`gain`) and on each subset of them
    (`gain_<name>`, `flights_<name>`; a subset is a boolean mask over `flights`), each gain with
    its bootstrap standard error (`error`, `error_<name>`)."""
    from sim.judge.alarms import judge

    scored = ScoresOnce(predict)
    table = judge(runs, flights, scored, _judged(), last_day)
    table["error"] = errors(table, flights, scored, last_day, boot)
    for name, mask in subsets.items():
        part = judge(runs, flights[mask.to_numpy()], scored, _judged(), last_day)
        table[f"flights_{name}"] = part.judged_examples
        table[f"gain_{name}"] = part.gain
        table[f"error_{name}"] = errors(part, flights[mask.to_numpy()], scored, last_day, boot)
    return table


def errors(
    table: pd.DataFrame, flights: pd.DataFrame, scored: ScoresOnce, last_day: date, boot: int
) -> list[float]:
    """Each judged row's bootstrap standard error over the flights it was judged on, each flight
    resampled on its own."""
    from sim.judge.alarms import gain_error, judged_window

    days = pd.to_datetime(flights.flight_date).dt.date
    out = []
    for row in table.itertuples():
        index = judged_window(days, row.event_day, last_day, _judged().task, trigger=row.trigger)
        if pd.isna(row.gain) or index is None:
            out.append(np.nan)
            continue
        window = flights.loc[index]
        y = window.is_late.to_numpy(bool)
        champion = scored(int(row.champion), window)
        challenger = scored(int(row.version), window)
        out.append(gain_error(y, champion, challenger, np.arange(len(y)), _judged(), boot))
    return out


def ceiling(
    table: pd.DataFrame, name: str, worth: float, fire_at: float | None = None
) -> dict[str, object]:
    """The precision of an alarm that fires when the gain on subset `name` reaches `fire_at`
    (default `worth`), right when the gain on every flight reaches `worth`."""
    known = table[table.gain.notna() & table[f"gain_{name}"].notna()]
    fires = known[f"gain_{name}"] >= (worth if fire_at is None else fire_at)
    right = known.gain >= worth
    return {
        "measured on": name,
        "fires at": worth if fire_at is None else fire_at,
        "judged": len(known),
        "flights a window (median)": float(known[f"flights_{name}"].median()),
        "gain's error (median)": float(known[f"error_{name}"].median()),
        "correlation with the gain": float(known[f"gain_{name}"].corr(known.gain)),
        "fires": int(fires.sum()),
        "precision": float(right[fires].mean()) if fires.any() else float("nan"),
        "recall": float(fires[right].mean()) if right.any() else float("nan"),
    }


def main() -> None:
    import dagster as dg

    from bench.alarm_signals import played_state
    from pipelines.labeling.selection import UNIFORM_REASONS
    from pipelines.task import load_task
    from sim.judge.alarms import WORTH, champions
    from sim.judge.history import resource, retrainings
    from sim.judge.report import production_examples, version_scores

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="a finished simulation's state")
    parser.add_argument("--boot", type=int, default=100, help="bootstrap resamples a gain")
    args = parser.parse_args()
    defs, (first, last) = played_state(args.home.resolve())
    flights = production_examples(defs, _judged(), first, last)
    with dg.DagsterInstance.get() as instance:
        runs = retrainings(instance, _judged().task.name)
    runs["champion"] = champions(runs, flights, _judged())
    labels = resource(defs, "warehouse").query(
        "select l.flight_id, t.reason from raw.flight_labels l join raw.label_tasks t "
        "using (task_id)"
    )
    reasons = flights.flight_id.map(
        labels.drop_duplicates("flight_id").set_index("flight_id").reason
    )
    subsets = {"labelled": reasons.notna(), "uniform": reasons.isin(UNIFORM_REASONS)}
    predict = version_scores(defs, load_task().name)
    table = judged_on(runs, flights, subsets, predict, last, args.boot)
    table = table[table.gain.notna() & (table.trigger != "bootstrap")]
    worth = table.gain >= WORTH
    print(
        f"{len(table)} judged retrainings after the first model "
        f"({table.trigger.value_counts().to_dict()}), judged on a median of "
        f"{table.judged_flights.median():.0f} flights each; {int(worth.sum())} gained {WORTH} AUC "
        f"or more ({worth.mean():.0%}). The gain's own bootstrap error on every flight: median "
        f"{table.error.median():.4f}; {((table.gain - WORTH).abs() < 2 * table.error).mean():.0%} "
        f"of the judgements lie within two errors of {WORTH}."
    )
    # A higher bar on the labelled gain trades alarms for precision.
    rows = [ceiling(table, name, WORTH, k * WORTH) for name in subsets for k in (1, 2, 3, 4)]
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f"))


if __name__ == "__main__":
    main()
