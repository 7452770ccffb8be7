"""Volume, freshness and humidity checks on the daily feeds' raw tables, as Dagster asset checks.

Both are declared on the ingestion asset of each daily feed. `volume` is evaluated by that asset
right after its load (it knows the day's rows); on a blocking feed an ERROR fails the asset's
step, so nothing downstream of the day is built in that run. A day that already holds rows is
judged before its re-delivered file replaces them: one the check would refuse fails the step
naming the file, and the rows stay. `freshness` is evaluated by the
landing sensor whenever the listing changes (before any run waits on a late file) and again by
each ingestion run, so a run never leaves it planned but unevaluated. `humidity` (on a weather
feed whose task names one) is evaluated by the ingestion asset on the day's validated rows,
before they are loaded; an ERROR that never blocks: it says the feed changed its units, and,
where its rule quarantines, the day's rows go to the quarantine instead of the raw table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import dagster as dg
import pandas as pd

from pipelines.ingestion import RAW_SCHEMA, DayLoad
from pipelines.ingestion.validation import ValidatedFile
from pipelines.lib.asset_keys import task_key
from pipelines.lib.landing_zone import LandingFile
from pipelines.lib.warehouse import WarehouseConnection
from pipelines.task.contracts import FeedSpec, TaskSpec
from pipelines.task.feed_checks import (
    SEVERITY_RANK,
    FreshnessRule,
    FreshnessVerdict,
    HumidityRule,
    HumidityVerdict,
    VolumeRule,
    judge_freshness,
    judge_humidity,
    judge_volume,
)

VOLUME = "volume"
FRESHNESS = "freshness"
HUMIDITY = "humidity"
# A description names this many failing days; the metadata names them all.
MAX_DAYS_DESCRIBED = 5


def feed_check_specs(
    key: dg.AssetKey,
    volume: VolumeRule,
    freshness: FreshnessRule,
    humidity: HumidityRule | None = None,
) -> list[dg.AssetCheckSpec]:
    """The volume and freshness checks of a daily feed's ingestion asset, and its humidity
    check if it has a rule."""
    blocks = " that blocks the day's features and scoring" if volume.blocking else ""
    specs = [
        dg.AssetCheckSpec(
            VOLUME,
            asset=key,
            blocking=volume.blocking,
            description=(
                "A partition's rows against the median of the comparable partitions before it "
                f"(a day's: the same weekday of the {volume.trailing} weeks before): none, or "
                f"below {volume.error_below:.0%} of it, "
                f"is an ERROR{blocks}; more than {volume.warn_deviation:.0%} off is a WARN."
            ),
        ),
        dg.AssetCheckSpec(
            FRESHNESS,
            asset=key,
            description=(
                "The feed's files against the landing frontier (the newest day any daily feed has "
                f"delivered): trailing it by more than {freshness.max_lag_days} day(s), or a "
                f"missing day in the last {freshness.lookback_days} days, is a WARN."
            ),
        ),
    ]
    return specs if humidity is None else [*specs, humidity_check_spec(key, humidity)]


def humidity_check_spec(key: dg.AssetKey, rule: HumidityRule) -> dg.AssetCheckSpec:
    """The humidity check of a weather feed's ingestion asset (never blocking)."""
    return dg.AssetCheckSpec(
        HUMIDITY,
        asset=key,
        description=(
            f"A day's reported {rule.humidity} against the relative humidity that "
            f"{rule.temperature} and {rule.dew_point} imply in {rule.units} (Magnus): a "
            f"median gap over {rule.max_median_gap:g} points is an ERROR (units changed); "
            + (
                f"the day's rows are quarantined in {RAW_SCHEMA}.quarantine."
                if rule.quarantine
                else "the day's weather is still used."
            )
        ),
    )


def judge_files(
    files: Sequence[tuple[str | None, ValidatedFile]], rule: HumidityRule
) -> list[HumidityVerdict]:
    """The humidity verdict on each day's validated rows."""
    return [judge_humidity(str(day), vf.rows, rule) for day, vf in files]


def humidity_result(
    key: dg.AssetKey, verdicts: Sequence[HumidityVerdict], rule: HumidityRule
) -> dg.AssetCheckResult:
    """The humidity of the days a run loaded (one or more): every failing day named, the worst
    one's figures."""
    failing = [v for v in verdicts if not v.passed]
    worst = max(verdicts, key=lambda v: -1.0 if v.median_gap is None else v.median_gap)
    shown = [v.reason for v in failing[:MAX_DAYS_DESCRIBED]] or [worst.reason]
    if len(failing) > MAX_DAYS_DESCRIBED:
        shown.append(f"and {len(failing) - MAX_DAYS_DESCRIBED} more days (see failed_days)")
    if failing and rule.quarantine:
        shown.append(f"rows of the failed day(s) quarantined in {RAW_SCHEMA}.quarantine")
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=HUMIDITY,
        passed=not failing,
        severity=dg.AssetCheckSeverity.ERROR,
        description="; ".join(shown),
        metadata={
            "landing_date": worst.day,
            "median_gap": None if worst.median_gap is None else round(worst.median_gap, 3),
            "max_median_gap": rule.max_median_gap,
            "days_judged": len(verdicts),
            "failed_days": {v.day: round(v.median_gap, 3) for v in failing},
        },
    )


def loaded_rows(con: WarehouseConnection, feed: FeedSpec, days: Collection[str]) -> dict[str, int]:
    """Rows of the feed's raw table per landing day, for those of `days` that hold any."""
    if not days:
        return {}
    found = con.execute(
        f"select cast(_landing_date as varchar), count(*) from {RAW_SCHEMA}.{feed.name} "
        f"where _landing_date in ({', '.join('?' * len(days))}) group by 1",
        sorted(days),
    ).fetchall()
    return dict(found)


def refuse_redeliveries(
    con: WarehouseConnection,
    task: TaskSpec,
    feed: FeedSpec,
    files: Sequence[tuple[str | None, ValidatedFile]],
    history_days: Collection[str],
    rule: VolumeRule,
) -> None:
    """Fail before anything is replaced when a day that already holds rows is re-delivered in a
    file the blocking volume check refuses (a header only, a file cut short): the day's loaded
    rows stay, and the error names the file. A first delivery is loaded and judged as before."""
    if not rule.blocking:
        return
    held = loaded_rows(con, feed, [day for day, _ in files if day is not None])
    if not held:
        return
    history = loaded_rows(con, feed, history_days)
    refused = {}
    for day, vf in files:
        if day is None or day not in held:
            continue
        verdict = judge_volume(day, len(vf.rows), history, rule, task.cadence, task.start_date)
        if verdict.severity == "error":
            refused[vf.key] = f"{verdict.reason}; the {held[day]} rows loaded before stay"
    if refused:
        reasons = "; ".join(f"{key}: {reason}" for key, reason in refused.items())
        raise dg.Failure(
            description=f"re-delivered file refused by the volume check: {reasons}",
            metadata={"refused_files": list(refused)},
            allow_retries=False,
        )


def volume_result(
    key: dg.AssetKey,
    task: TaskSpec,
    loads: Sequence[DayLoad],
    history: Mapping[str, int],
    rule: VolumeRule,
) -> dg.AssetCheckResult:
    """The volume of the days a run loaded: the worst day's figures, every failing day named."""
    cadence, first = task.cadence, task.start_date
    verdicts = [
        judge_volume(d.landing_date, d.rows_loaded, history, rule, cadence, first) for d in loads
    ]
    worst = max(
        verdicts, key=lambda v: (SEVERITY_RANK[v.severity], -(1.0 if v.ratio is None else v.ratio))
    )
    failing = [v for v in verdicts if v.severity != "pass"]
    shown = [v.reason for v in failing[:MAX_DAYS_DESCRIBED]] or [worst.reason]
    if len(failing) > MAX_DAYS_DESCRIBED:
        shown.append(f"and {len(failing) - MAX_DAYS_DESCRIBED} more days (see failed_days)")
    metadata = {
        "landing_date": worst.day,
        "rows": worst.rows,
        "baseline": worst.baseline,
        "baseline_median": worst.baseline_median,
        "ratio": None if worst.ratio is None else round(worst.ratio, 3),
        "days_judged": len(verdicts),
        "failed_days": {v.day: v.severity for v in failing},
    }
    if len(verdicts) > 1:
        table = pd.DataFrame([vars(v) for v in verdicts]).drop(columns=["baseline", "reason"])
        metadata["per_day"] = dg.MetadataValue.md(table.to_markdown(index=False))
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=VOLUME,
        passed=not failing,
        severity=dg.AssetCheckSeverity.ERROR
        if worst.severity == "error"
        else dg.AssetCheckSeverity.WARN,
        description="; ".join(shown),
        metadata=metadata,
    )


def landed_days(task: TaskSpec, files: Sequence[LandingFile]) -> dict[str, set[str]]:
    """The landing days each daily feed of `task` has a file for."""
    landed: dict[str, set[str]] = {feed.name: set() for feed in task.daily_feeds}
    for f in files:
        match = task.match_key(f.key)
        if match is not None and match[1] is not None:
            landed[match[0].name].add(match[1])
    return landed


def _freshness_fields(verdict: FreshnessVerdict, rule: FreshnessRule) -> dict:
    return {
        "passed": verdict.passed,
        "severity": dg.AssetCheckSeverity.WARN,
        "description": verdict.reason,
        "metadata": {
            "landing_frontier": verdict.frontier,
            "newest_file": verdict.newest,
            "lag_days": verdict.lag_days,
            "missing_days": list(verdict.missing_days),
            "max_lag_days": rule.max_lag_days,
            "lookback_days": rule.lookback_days,
        },
    }


def freshness_result(
    key: dg.AssetKey,
    task: TaskSpec,
    feed: FeedSpec,
    files: Sequence[LandingFile],
    rule: FreshnessRule,
) -> dg.AssetCheckResult:
    """The freshness of `feed` in the landing listing `files`, as an ingestion run reports it."""
    verdict = judge_freshness(landed_days(task, files), rule, task.cadence, task.start_date)
    verdict = verdict[feed.name]
    return dg.AssetCheckResult(
        asset_key=key, check_name=FRESHNESS, **_freshness_fields(verdict, rule)
    )


def freshness_evaluations(
    task: TaskSpec, files: Sequence[LandingFile], rule: FreshnessRule
) -> list[dg.AssetCheckEvaluation]:
    """The freshness of every daily feed in `files`, as the landing sensor reports it (no run)."""
    verdicts = judge_freshness(landed_days(task, files), rule, task.cadence, task.start_date)
    return [
        dg.AssetCheckEvaluation(
            asset_key=task_key(task, task.feeds[name].asset_name),
            check_name=FRESHNESS,
            blocking=False,
            **_freshness_fields(verdict, rule),
        )
        for name, verdict in verdicts.items()
    ]
