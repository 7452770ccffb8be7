"""A planted break judged: how soon the loop caught it, how often it cries wolf without one, and
whether the model promoted after it beat the champion it replaced.

A comparison played with `--drift KIND@DAY` plants the break in every play (sim.world.drift).
Per play (its report's `checks.csv`, the days an asset check failed on, and `retrainings.csv`,
each retraining judged by sim.judge.alarms):

- the checks: the first day on or after the break a check failed on (its delay in days: 0 is
  the break's own landing), and the days one failed on before it (false alarms);
- the alarms (drift and performance triggers): the first retraining one asked for on or after
  the break, and those before it;
- the first promotion on or after the break: its challenger's production AUC minus the
  champion's over the next two weeks (`gain`), the break's cost or cure.

Over the seeds, per policy: the worst delay, the false alarms per production day before the
break as the mean days between them, and the promoted models' mean gain with its t-interval.

`feed_checks_over_the_year` judges the task's value checks (the humidity rule) on every day of
the replayed year twice: as the source has it (a failure is a false alarm) and as the first day
of the planted break (a pass is a miss): the false-alarm rate a few weeks of play cannot show.
A break that leaves the checked feeds as they are (`concept`, `reschedule`) is said to be out of
their sight rather than missed; its plays are judged by the alarms and promotions alone.
"""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd

from pipelines.task.feed_checks import judge_humidity, parse_feed_checks
from pipelines.task.thresholds import ALARMS
from sim.judge.paired import t_interval
from sim.judge.policies import Play
from sim.world.drift import PlantedDrift

# A break is caught in time when a check fails on it within this many days of its first landing.
CAUGHT_WITHIN_DAYS = 1


def _dated(frame: pd.DataFrame | None, columns: list[str], day: str) -> pd.DataFrame:
    """`frame` (a play's report table; none, or empty, is a table of `columns` with no row) with
    its `day` column as dates."""
    frame = pd.DataFrame(columns=columns) if frame is None or frame.empty else frame
    return frame.assign(**{day: pd.to_datetime(frame[day]).dt.date})


def play_break(play: Play, start: date, production_start: date) -> dict[str, object]:
    """One play's break figures (see the module); `production_start`: its first production day,
    from which false alarms are counted."""
    failed = _dated(play.checks, ["day", "asset", "check"], "day").sort_values("day")
    after = failed[failed.day >= start]
    before = failed[(failed.day < start) & (failed.day >= production_start)]
    runs = _dated(play.retrainings, ["event_day", "trigger", "decision", "gain"], "event_day")
    runs = runs[runs.trigger != "bootstrap"]
    alarms = runs[runs.trigger.isin(ALARMS)]
    alarmed = alarms[alarms.event_day >= start]
    promoted = runs[(runs.event_day >= start) & (runs.decision == "promoted")]
    first = promoted.iloc[0] if len(promoted) else None
    return {
        "policy": play.policy,
        "seed": play.seed,
        "check_delay_days": (after.day.iloc[0] - start).days if len(after) else np.nan,
        "check": f"{after.asset.iloc[0]}:{after.check.iloc[0]}" if len(after) else "",
        "false_check_days": before.day.nunique(),
        "alarm_delay_days": (alarmed.event_day.min() - start).days if len(alarmed) else np.nan,
        "alarms_before": int((alarms.event_day < start).sum()),
        "days_before": (start - production_start).days,
        "promoted_day": first.event_day if first is not None else None,
        "promoted_trigger": first.trigger if first is not None else "",
        "promoted_gain": float(first.gain) if first is not None else np.nan,
    }


def break_summary(plays: list[Play], start: date, production_start: date) -> pd.DataFrame:
    """A row per policy over its seeds (see the module): plays; caught, the plays whose checks
    failed within `CAUGHT_WITHIN_DAYS` of the break; the worst check delay; false check days
    and alarms before the break, and the mean production days between false alarms
    (`days_per_false_alarm`, infinite with none); the alarms' mean delay; the promoted models'
    gain over their champions (mean, 95% interval) and in how many plays it was not below 0."""
    rows = pd.DataFrame([play_break(p, start, production_start) for p in plays])
    summary = []
    for policy, group in rows.groupby("policy", sort=False):
        gains = group.promoted_gain.dropna().to_numpy()
        gain = t_interval(gains)
        alarms, days = int(group.alarms_before.sum()), int(group.days_before.sum())
        summary.append(
            {
                "policy": policy,
                "plays": len(group),
                "caught": int((group.check_delay_days <= CAUGHT_WITHIN_DAYS).sum()),
                "worst_check_delay_days": group.check_delay_days.max(),
                "false_check_days": int(group.false_check_days.sum()),
                "alarm_delay_days": group.alarm_delay_days.mean(),
                "false_alarms": alarms,
                "days_per_false_alarm": days / alarms if alarms else float("inf"),
                "promoted": len(gains),
                "promoted_gain": gain.estimate,
                "gain_low": gain.low,
                "gain_high": gain.high,
                "not_worse": int((gains >= 0).sum()),
            }
        )
    return pd.DataFrame(summary)


def feed_checks_over_the_year(task_name: str, kind: str) -> pd.DataFrame:
    """A row per day and checked feed of the task's replayed source: whether its humidity check
    passes the day as the source has it (`ordinary_passed`) and as the first day of planted
    break `kind` (`drifted_passed`), whether the break changes the feed's rows that day
    (`drifted_changed`), and the rows it could judge (`readings`)."""
    from pipelines.task import load_task
    from sim.world.sources import source_of

    task = load_task(task_name)
    rules = parse_feed_checks(task).humidity
    source = source_of(task_name)
    rows = []
    for day in pd.date_range(task.start_date, task.end_date, inclusive="left").date:
        for feed, rule in rules.items():
            frame = source.day(feed, day)
            drifted = PlantedDrift(day, kind)(feed, day, frame)
            columns = [rule.temperature, rule.dew_point, rule.humidity]
            ordinary, broken = (
                judge_humidity(str(day), numeric(f, columns), rule) for f in (frame, drifted)
            )
            rows.append(
                {
                    "day": day,
                    "feed": feed,
                    "readings": ordinary.rows,
                    "ordinary_passed": ordinary.passed,
                    "drifted_passed": broken.passed,
                    "drifted_changed": not drifted.equals(frame),
                }
            )
    return pd.DataFrame(rows)


def numeric(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """`columns` of a source's text rows as numbers (a missing reading as NaN)."""
    return frame[columns].apply(pd.to_numeric, errors="coerce")


def describe_year(year: pd.DataFrame) -> str:
    """The feed checks' year (`feed_checks_over_the_year`) in a sentence."""
    if year.empty:
        return "The task has no value check of its feeds to judge over the year."
    days = year.day.nunique()
    false = int((~year.ordinary_passed).sum())
    readable = year[year.readings > 0]
    rate = f"a false alarm every {days / false:.0f} days" if false else "none in the year"
    said = (
        f"Over the replayed year ({days} days), the feeds' humidity check failed on {false} "
        f"ordinary days ({rate}), "
    )
    if not readable.drifted_changed.any():
        return (
            said + "and the planted break leaves the feeds it reads as they are: out of its sight."
        )
    caught = float((~readable.drifted_passed).mean())
    return said + (
        f"and caught the planted break on {caught:.1%} of the {len(readable)} days with "
        "readings it could have begun on."
    )
