"""Volume, freshness and (for weather) physical consistency of the daily landing feeds: their
thresholds and the verdicts they give.

Pure Python (no Dagster): the ingestion assets and the landing sensor turn verdicts into asset
check results (checks.py, beside this module). Thresholds come from the task's `checks` section.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from statistics import median
from typing import Literal

import numpy as np
import pandas as pd

from pipelines.task.cadence import Cadence, comparable_before, partition_start, partition_starts
from pipelines.task.contracts import TaskSpec
from pipelines.task.thresholds import build_settings

Severity = Literal["pass", "warn", "error"]
SEVERITY_RANK: dict[str, int] = {"pass": 0, "warn": 1, "error": 2}


@dataclass(frozen=True)
class VolumeRule:
    """How a partition's row count is judged against the comparable partitions before it (for
    a daily task, the same weekday of each of the `trailing` weeks before)."""

    trailing: int = 4
    min_history: int = 3
    error_below: float = 0.5
    warn_deviation: float = 0.2
    blocking: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.min_history <= self.trailing:
            raise ValueError(f"min_history must be within 1..trailing: {self}")
        if not 0 < self.error_below < 1 or self.warn_deviation <= 0:
            raise ValueError(f"error_below must be in (0, 1), warn_deviation above 0: {self}")


@dataclass(frozen=True)
class FreshnessRule:
    """How far a feed may trail the landing frontier, and how far back gaps are looked for."""

    max_lag_days: int = 0
    lookback_days: int = 14

    def __post_init__(self) -> None:
        if self.max_lag_days < 0 or self.lookback_days < 1:
            raise ValueError(f"max_lag_days must be 0 or more, lookback_days 1 or more: {self}")


@dataclass(frozen=True)
class HumidityRule:
    """A weather feed's reported relative humidity against the one its temperature and dew point
    imply (the Magnus formula): a day whose median gap is over ``max_median_gap`` percentage
    points reports one of the three in other units than its contract says. Plausible values
    each, so no column's own bounds catch it (temperatures in Celsius, say). With ``quarantine``
    such a day's rows all go to the quarantine, with the verdict as their reason (each record
    the row's contract fields as parsed): the day is then used as a day the feed missed, never
    with values read in the wrong units, and its volume check counts no rows loaded."""

    temperature: str
    dew_point: str
    humidity: str
    units: Literal["fahrenheit", "celsius"] = "fahrenheit"
    max_median_gap: float = 0.5
    quarantine: bool = False

    def __post_init__(self) -> None:
        if (
            self.units not in ("fahrenheit", "celsius")
            or not self.max_median_gap > 0
            or not isinstance(self.quarantine, bool)
        ):
            raise ValueError(
                "units must be fahrenheit or celsius, max_median_gap above 0, quarantine true or "
                f"false: {self}"
            )


@dataclass(frozen=True)
class FeedChecks:
    """The volume rule of each daily feed, the freshness rule of them all, and the humidity
    rule of the feeds that have one."""

    volume: dict[str, VolumeRule]
    freshness: FreshnessRule
    humidity: dict[str, HumidityRule] = field(default_factory=dict)


@dataclass(frozen=True)
class VolumeVerdict:
    """One landing day of one feed judged: its rows against the same-weekday baseline."""

    day: str
    rows: int
    baseline: dict[str, int]
    baseline_median: float | None
    ratio: float | None
    severity: Severity
    reason: str


@dataclass(frozen=True)
class HumidityVerdict:
    """One landing day of a weather feed judged: its median humidity gap."""

    day: str
    rows: int  # rows with all three readings
    median_gap: float | None
    passed: bool
    reason: str


@dataclass(frozen=True)
class FreshnessVerdict:
    """One feed's files against the landing frontier (the newest day any daily feed has)."""

    feed: str
    frontier: str
    newest: str | None
    lag_days: int | None
    missing_days: tuple[str, ...]
    passed: bool
    reason: str


def parse_feed_checks(task: TaskSpec) -> FeedChecks:
    """The task's `checks` section: a volume rule per daily feed (with its overrides)."""
    section = dict(task.sections.get("checks") or {})
    where = f"{task.path}: checks"
    if unknown := set(section) - {"volume", "freshness", "humidity"}:
        raise ValueError(f"{where}: unknown sections {sorted(unknown)}")
    volume = dict(section.get("volume") or {})
    overrides = volume.pop("feeds", None) or {}
    daily = [f.name for f in task.daily_feeds]
    if unknown := set(overrides) - set(daily):
        raise ValueError(f"{where}.volume.feeds: {sorted(unknown)} are not daily feeds {daily}")
    # A feed's overrides replace the shared settings they name.
    per_feed = {
        name: build_settings(
            VolumeRule, {**volume, **(overrides.get(name) or {})}, f"{where}.volume"
        )
        for name in daily
    }
    freshness = section.get("freshness") or {}
    freshness = build_settings(FreshnessRule, freshness, f"{where}.freshness")
    humidity = {}
    for name, settings in (section.get("humidity") or {}).items():
        if name not in daily:
            raise ValueError(f"{where}.humidity: {name!r} is not a daily feed {daily}")
        rule = build_settings(HumidityRule, settings or {}, f"{where}.humidity.{name}")
        types = {c.name: c.type for c in task.feeds[name].columns}
        for column in (rule.temperature, rule.dew_point, rule.humidity):
            if types.get(column) not in ("integer", "float"):
                raise ValueError(
                    f"{where}.humidity.{name}: {column!r} is not a numeric column of the feed"
                )
        humidity[name] = rule
    return FeedChecks(volume=per_feed, freshness=freshness, humidity=humidity)


def baseline_days(
    day: str, count: int, cadence: Cadence = "daily", first: str | None = None
) -> list[str]:
    """The partitions `day`'s volume is compared with (`cadence.comparable_before`): for a daily
    task the same weekday in each of the `count` weeks before, newest first."""
    start = date.fromisoformat(first or day)
    comparable = comparable_before(date.fromisoformat(day), count, cadence, start)
    return [d.isoformat() for d in comparable]


def judge_volume(
    day: str,
    rows: int,
    history: Mapping[str, int],
    rule: VolumeRule,
    cadence: Cadence = "daily",
    first: str | None = None,
) -> VolumeVerdict:
    """Judge `day`'s `rows` against the median of its comparable partitions in `history`
    (partition -> rows): the same weekdays before it, for a daily task."""
    alike = "same weekdays" if cadence == "daily" else "partitions"
    # A day that loaded nothing is absent from `history`: an empty day never lowers a baseline.
    before = baseline_days(day, rule.trailing, cadence, first)
    baseline = {d: history[d] for d in before if history.get(d)}
    base = median(baseline.values()) if len(baseline) >= rule.min_history else None
    ratio = rows / base if base else None
    median_of = "same-weekday median" if cadence == "daily" else "median of the partitions before"
    judged = f"{rows} rows, {ratio:.0%} of the {median_of} {base:g}" if base else ""
    if rows == 0:
        severity: Severity = "error"
        reason = "no rows: the file holds a header only, or every row was quarantined"
    elif ratio is None:
        severity = "pass"
        reason = (
            f"{rows} rows; only {len(baseline)} of the {rule.trailing} {alike} "
            f"before it are loaded ({rule.min_history} needed), so only an empty day is judged"
        )
    elif ratio < rule.error_below:
        severity, reason = "error", f"{judged}: below {rule.error_below:.0%}"
    elif abs(ratio - 1) > rule.warn_deviation:
        severity, reason = "warn", f"{judged}: more than {rule.warn_deviation:.0%} off"
    else:
        severity, reason = "pass", judged
    return VolumeVerdict(day, rows, baseline, base, ratio, severity, f"{day}: {reason}")


def judge_freshness(
    landed: Mapping[str, Collection[str]],
    rule: FreshnessRule,
    cadence: Cadence = "daily",
    first: str | None = None,
) -> dict[str, FreshnessVerdict]:
    """Each daily feed's landed days (feed -> days with a file) against the landing frontier.

    The frontier is the newest landing day any daily feed has delivered, not the wall clock: the
    simulator replays 2013, and a feed is late when the others have moved on without it.
    """
    every = set().union(*landed.values())
    if not every:
        return {}
    frontier = max(every)
    last = date.fromisoformat(frontier)
    earliest = max(date.fromisoformat(min(every)), last - timedelta(days=rule.lookback_days - 1))
    anchor = date.fromisoformat(first or min(every))
    starts = partition_starts(partition_start(earliest, cadence, anchor), last, cadence)
    window = [d.isoformat() for d in [*starts, last] if d >= earliest]
    verdicts = {}
    for feed, days in landed.items():
        newest = max(days) if days else None
        lag = (last - date.fromisoformat(newest)).days if newest else None
        missing = tuple(d for d in window if d not in days)
        gaps = [d for d in missing if newest and d < newest]
        problems = []
        if newest is None:
            problems.append(f"no {feed} file has landed; other feeds reached {frontier}")
        elif lag > rule.max_lag_days:
            problems.append(
                f"{feed} trails the landing frontier {frontier} by {lag} day(s) "
                f"(newest file {newest}; {rule.max_lag_days} allowed)"
            )
        if gaps:
            problems.append(f"{feed} has no file for {', '.join(gaps)}")
        reason = "; ".join(problems) or f"{feed} has landed every day up to {frontier}"
        verdicts[feed] = FreshnessVerdict(
            feed, frontier, newest, lag, missing, not problems, reason
        )
    return verdicts


def implied_humidity(
    temperature: np.ndarray, dew_point: np.ndarray, units: str = "fahrenheit"
) -> np.ndarray:
    """Relative humidity (%) from temperature and dew point, by the Magnus formula (Alduchov and
    Eskridge's coefficients: within 0.4% of measured saturation over -40..50 C)."""
    t = np.asarray(temperature, dtype=float)
    d = np.asarray(dew_point, dtype=float)
    if units == "fahrenheit":
        t, d = (t - 32.0) / 1.8, (d - 32.0) / 1.8
    b, c = 17.625, 243.04
    return 100.0 * np.exp(b * d / (c + d) - b * t / (c + t))


def judge_humidity(day: str, rows: pd.DataFrame, rule: HumidityRule) -> HumidityVerdict:
    """Judge a landing day's weather `rows`: the median gap between the reported humidity and the
    one its temperature and dew point imply, over the rows that have all three."""
    columns = [rule.temperature, rule.dew_point, rule.humidity]
    values = rows[columns].astype(float).dropna()
    if values.empty:
        return HumidityVerdict(
            day, 0, None, True, f"{day}: no row has {', '.join(columns)}: nothing to judge"
        )
    implied = implied_humidity(
        values[rule.temperature].to_numpy(), values[rule.dew_point].to_numpy(), rule.units
    )
    gap = float(np.median(np.abs(implied - values[rule.humidity].to_numpy())))
    judged = (
        f"{day}: the reported {rule.humidity} is {gap:.2f} points from the humidity that "
        f"{rule.temperature} and {rule.dew_point} imply in {rule.units} (median of "
        f"{len(values)} rows)"
    )
    if gap > rule.max_median_gap:
        reason = (
            f"{judged}, over {rule.max_median_gap:g}: one of the three is not in the units "
            "its contract says"
        )
        return HumidityVerdict(day, len(values), gap, False, reason)
    return HumidityVerdict(day, len(values), gap, True, judged)
