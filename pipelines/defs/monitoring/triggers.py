"""What asks for a retraining: the excess-loss alarm, drift, decayed performance, and the schedule
(`pipelines.task.thresholds.Trigger` names them).

The sensors read the monitoring assets' materializations in storage order. An event is a
monitored day whose materialization says it crossed a threshold (the assets apply the task's
thresholds); each event gives at most one run (its run key). The sensors share one cooldown:
after any asked for a retraining, none asks again for `cooldown_days` of monitored days, so a
drift that persists, or a drift and the decay it causes, do not retrain every day. The
schedule is the floor: at least one retraining a week (a month for a monthly task). It waits
while the champion was trained on data up to a day within the last `cooldown_days`, and, once
there is a champion, while any retraining was: a challenger the gate rejected yesterday is not
tried again today on one more day of labels.
No trigger asks while a retraining covers the day, nor before a label came in since the last
one.
"""

import json
from collections.abc import Mapping
from datetime import date, timedelta
from typing import TYPE_CHECKING

import dagster as dg

from pipelines.lib.runs import TASK_TAG, task_runs
from pipelines.task.cadence import RETRAINING_CRON, Cadence
from pipelines.task.thresholds import ALARMS, MonitoringSpec, Trigger

if TYPE_CHECKING:  # what dg.define_asset_job returns; not exported by dagster
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

TRIGGER_TAG = "flywheel/trigger"
EVENT_DAY_TAG = "flywheel/event_day"
# The metadata flag of each alarm's monitoring asset that makes a day an event, and what the
# sensor says it does.
ALARM_FLAGS: dict[Trigger, tuple[str, str]] = {
    Trigger.EXCESS_LOSS: (
        "is_alarm",
        "Request a retraining when the CUSUM of the champion's daily excess loss on uniformly "
        "drawn labels crosses its threshold (set for a known false-alarm rate).",
    ),
    Trigger.DRIFT: (
        "is_drifted",
        "Request a retraining when a day's feature or score drift crosses the thresholds.",
    ),
    Trigger.PERFORMANCE: (
        "is_decayed",
        "Request a retraining when the champion's realized performance falls below validation.",
    ),
}
ACTIVE = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def _names(monitoring: MonitoringSpec) -> list[str]:
    return [str(t) for t in monitoring.retrain_on]


def in_cooldown(day: str, last_trigger_day: str | None, cooldown_days: int) -> bool:
    """Whether `day` falls within `cooldown_days` after the day this sensor last fired."""
    if last_trigger_day is None:
        return False
    return date.fromisoformat(day) < date.fromisoformat(last_trigger_day) + timedelta(
        days=cooldown_days
    )


def last_retraining_day(
    instance: dg.DagsterInstance,
    task_name: str,
    job_name: str,
    triggers: tuple[str, ...] | None = None,
) -> str | None:
    """The newest event day of `task_name`'s retraining runs that did not fail, of those
    `triggers` asked for (None: whatever asked for them), whatever the gate decided."""
    days = [
        record.dagster_run.tags.get(EVENT_DAY_TAG, "")
        for record in instance.get_run_records(task_runs(task_name, job_name), limit=50)
        if record.dagster_run.status != dg.DagsterRunStatus.FAILURE
        and (triggers is None or record.dagster_run.tags.get(TRIGGER_TAG) in triggers)
    ]
    return max(filter(None, days), default=None)


def champion_day(instance: dg.DagsterInstance, champion_key: dg.AssetKey) -> str | None:
    """The event day of the retraining that promoted the champion: the newest promotion among
    the last 50 decisions (None before the first, or past 50 rejections)."""
    for record in instance.fetch_materializations(champion_key, limit=50).records:
        materialization = record.asset_materialization
        decision = materialization.metadata.get("decision") if materialization else None
        if decision is not None and decision.value == "promoted":
            run = instance.get_run_by_id(record.run_id)
            return run.tags.get(EVENT_DAY_TAG) if run else None
    return None


def covering_run(
    instance: dg.DagsterInstance, task_name: str, job_name: str, day: str
) -> str | None:
    """A retraining run of `task_name` queued, running or done for data up to `day` or later,
    if any: a second one would train on the same labels."""
    for record in instance.get_run_records(task_runs(task_name, job_name), limit=20):
        run = record.dagster_run
        if run.status == dg.DagsterRunStatus.FAILURE:
            continue
        if run.tags.get(EVENT_DAY_TAG, "") >= day or run.status in ACTIVE:
            return run.run_id
    return None


def labels_seen_by(
    instance: dg.DagsterInstance, task_name: str, job_name: str, labels: dg.AssetKey
) -> str | None:
    """The newest retraining run of `task_name` that ran (not failed) if it started after the
    last label import: it cut its dataset from every label there is, so another one would train
    the same challenger again. (Start times come from the run's events, to the microsecond in
    every storage.)"""
    imported = instance.get_latest_materialization_event(labels)
    for record in instance.get_run_records(task_runs(task_name, job_name), limit=20):
        if record.dagster_run.status == dg.DagsterRunStatus.FAILURE or record.start_time is None:
            continue
        if imported is None or record.start_time >= imported.timestamp:
            return record.dagster_run.run_id
        return None
    return None


def _event_sensor(
    trigger: Trigger,
    asset_key: dg.AssetKey,
    job: "UnresolvedAssetJobDefinition",
    monitoring: MonitoringSpec,
    interval_s: int | None,
    labels: dg.AssetKey,
) -> dg.SensorDefinition:
    name = trigger.definition_name
    flag, description = ALARM_FLAGS[trigger]

    @dg.sensor(
        name=name, job=job, minimum_interval_seconds=interval_s or 60, description=description
    )
    def event_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        task_name = job.tags[TASK_TAG]
        state = json.loads(context.cursor) if context.cursor else {}
        after, last_day = state.get("after_storage_id"), state.get("last_trigger_day")
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=asset_key, after_storage_id=after),
            limit=1000,
            ascending=True,
        ).records
        # The cooldown the sensors share: this sensor's last request, or the other's last run.
        alarms = last_retraining_day(context.instance, task_name, job.name, ALARMS)
        last_day = max(filter(None, (last_day, alarms)), default=None)
        requests = []
        for record in records:
            after = record.storage_id
            materialization = record.asset_materialization
            metadata = materialization.metadata if materialization else {}
            if flag not in metadata or metadata[flag].value is not True:
                continue
            day = materialization.partition
            if trigger not in monitoring.retrain_on:
                context.log.info(
                    f"{day}: {flag}; monitoring.retrain_on {_names(monitoring)} leaves "
                    f"{trigger} out: watched, no request"
                )
                continue
            if in_cooldown(day, last_day, monitoring.cooldown_days):
                context.log.info(
                    f"{day}: {flag} but in cooldown since the alarm on {last_day}; no request"
                )
                continue
            if covered := covering_run(context.instance, task_name, job.name, day):
                context.log.info(f"{day}: {flag} but run {covered} already retrains on that day")
                continue
            if seen := labels_seen_by(context.instance, task_name, job.name, labels):
                context.log.info(f"{day}: {flag} but no label came in since run {seen}")
                continue
            version = metadata.get("model_version")
            requests.append(
                dg.RunRequest(
                    run_key=f"{name}:{day}",
                    tags={
                        TRIGGER_TAG: str(trigger),
                        EVENT_DAY_TAG: day,
                        "flywheel/champion_version": str(version.value if version else ""),
                    },
                )
            )
            last_day = day
        cursor = {"after_storage_id": after, "last_trigger_day": last_day}
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(cursor))

    return event_sensor


def build_monitoring_triggers(
    job: "UnresolvedAssetJobDefinition",
    monitoring: MonitoringSpec,
    labels: dg.AssetKey,
    champion: dg.AssetKey,
    alarm_assets: Mapping[Trigger, dg.AssetKey],
    interval_s: int | None = None,
    cadence: Cadence = "daily",
) -> tuple[list[dg.SensorDefinition], dg.ScheduleDefinition]:
    """A sensor per alarm of `alarm_assets` (`<trigger>_sensor`, on that monitoring asset's
    materializations), each evaluated every `interval_s` seconds at least (default 60), and
    `retraining_schedule` (`RETRAINING_CRON` of the task's `cadence`), all requesting `job`;
    none asks again before the imported `labels` asset was materialized since the last
    retraining started, and the schedule waits while the newest promotion recorded by the
    `champion` asset is within the cooldown, or, once there is a champion, any retraining is."""
    sensors = [
        _event_sensor(trigger, key, job, monitoring, interval_s, labels)
        for trigger, key in alarm_assets.items()
    ]

    @dg.schedule(
        name=Trigger.SCHEDULE.definition_name,
        job=job,
        cron_schedule=RETRAINING_CRON[cadence][0],
        execution_timezone="UTC",
        description=f"Retrain {RETRAINING_CRON[cadence][1]} on the newest labelled data.",
    )
    def retraining_schedule(
        context: dg.ScheduleEvaluationContext,
    ) -> dg.RunRequest | dg.SkipReason:
        """One retraining per tick (a week, or a month for a monthly task), keyed by its
        scheduled time; skipped when a retraining already trained on the same days, when the
        champion was trained on days within the cooldown, or when there is a champion and any
        retraining was (the gate rejected it: one more day of labels would mostly draw the same
        challenger again)."""
        moment, task_name = context.scheduled_execution_time, job.tags[TASK_TAG]
        day = (moment.date() - timedelta(days=1)).isoformat()
        if Trigger.SCHEDULE not in monitoring.retrain_on:
            return dg.SkipReason(
                f"monitoring.retrain_on {_names(monitoring)} leaves the schedule out"
            )
        if covered := covering_run(context.instance, task_name, job.name, day):
            return dg.SkipReason(f"run {covered} already retrains on data up to {day}")
        trained = champion_day(context.instance, champion)
        if in_cooldown(day, trained, monitoring.cooldown_days):
            return dg.SkipReason(
                f"the champion was trained on data up to {trained}, within "
                f"{monitoring.cooldown_days} days"
            )
        attempted = last_retraining_day(context.instance, task_name, job.name)
        if trained is not None and in_cooldown(day, attempted, monitoring.cooldown_days):
            return dg.SkipReason(
                f"a retraining on data up to {attempted}, within {monitoring.cooldown_days} days, "
                f"kept the champion trained on data up to {trained}"
            )
        if seen := labels_seen_by(context.instance, task_name, job.name, labels):
            return dg.SkipReason(f"no label came in since run {seen}")
        return dg.RunRequest(
            run_key=f"retraining_schedule:{moment.isoformat()}",
            tags={TRIGGER_TAG: str(Trigger.SCHEDULE), EVENT_DAY_TAG: day},
        )

    return sensors, retraining_schedule
