"""Production traffic replay: the files a simulated partition sends to the landing zone.

Each daily feed of the task gets one file per partition (a day, or the first day of a month for
a monthly task) and each dimension feed one file, with exactly the contract's columns in contract
order. The task's name picks the real dataset replayed (`sim.world.sources`). Outcomes (a flight's
actual times and delays, a film's rating) are not in any contract, so they never land: they are
held back for the labeling service.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date

import pandas as pd

from pipelines.lib.landing_zone import LandingZone, S3LandingZone
from pipelines.resources import landing_zone
from pipelines.settings import LANDING_KEY_ID, LANDING_SECRET_KEY
from pipelines.task import load_task
from pipelines.task.contracts import FeedSpec, TaskSpec
from sim.world.drift import Transform
from sim.world.sources import source_of


def producer_zone(env: str | None = None) -> LandingZone:
    """The landing zone as its producer writes it: in S3 with the producer's own key where it
    has one (FLYWHEEL_LANDING_KEY_ID and _SECRET_KEY: a stack's `landing` identity, which may
    write its task's landing prefix alone), else with the default credentials."""
    zone = landing_zone(env)
    if not isinstance(zone, S3LandingZone) or not LANDING_KEY_ID.get():
        return zone
    from dagster_aws.s3 import S3Resource

    s3 = S3Resource(
        endpoint_url=zone.s3.endpoint_url,
        aws_access_key_id=LANDING_KEY_ID.get(),
        aws_secret_access_key=LANDING_SECRET_KEY.required(),
    )
    return S3LandingZone(s3=s3, bucket=zone.bucket, prefix=zone.prefix)


@dataclass
class LandingReport:
    """What landing some days did: files written, files already identical, source rows of each
    daily feed."""

    days: list[date] = field(default_factory=list)
    written: int = 0
    unchanged: int = 0
    rows: Counter[str] = field(default_factory=Counter)

    def record(self, zone: LandingZone, files: dict[str, bytes]) -> None:
        """Write `files` to `zone`, counting which ones changed."""
        for key, data in files.items():
            if zone.write_bytes(key, data):
                self.written += 1
            else:
                self.unchanged += 1


def render_csv(frame: pd.DataFrame, feed: FeedSpec) -> bytes:
    """A feed's CSV bytes: header, the contract columns in contract order, empty for missing."""
    missing = [c for c in feed.column_names if c not in frame.columns]
    if missing:
        raise KeyError(f"the source has no columns {missing} for feed {feed.name!r}")
    return frame.to_csv(columns=feed.column_names, index=False, lineterminator="\n").encode()


def day_bounds(task: TaskSpec) -> tuple[date, date]:
    """The first and the last day (inclusive) the task's daily feeds cover."""
    first = date.fromisoformat(task.start_date)
    last = date.fromordinal(date.fromisoformat(task.end_date).toordinal() - 1)
    return first, last


def day_files(
    day: date, task: TaskSpec | None = None, drift: Transform | None = None
) -> dict[str, bytes]:
    """The landing key and bytes of every daily feed's file for the partition starting on `day`
    (with planted drift)."""
    task = task or load_task()
    first, last = day_bounds(task)
    if not first <= day <= last:
        raise ValueError(f"{day} is outside task {task.name!r} ({first} to {last})")
    if task.partition_of(day) != day.isoformat():
        raise ValueError(
            f"{day} starts no partition of task {task.name!r}: its {task.cadence} partition "
            f"starts on {task.partition_of(day)}"
        )
    source = source_of(task.name)
    files = {}
    for feed in task.daily_feeds:
        frame = source.day(feed.name, day)
        if drift is not None:
            frame = drift(feed.name, day, frame)
        files[feed.landing_key(day)] = render_csv(frame, feed)
    return files


def dimension_files(task: TaskSpec | None = None) -> dict[str, bytes]:
    """The landing key and bytes of every dimension feed's file."""
    task = task or load_task()
    source = source_of(task.name)
    return {
        feed.landing_key(): render_csv(source.table(feed.name), feed)
        for feed in task.dimension_feeds
    }


def land_days(
    zone: LandingZone,
    days: Iterable[date],
    task: TaskSpec | None = None,
    on_day: Callable[[date], None] | None = None,
    drift: Transform | None = None,
) -> LandingReport:
    """Land the dimension files, then each partition's files (`days` are the days partitions
    start on); identical files are left as they are."""
    task = task or load_task()
    source = source_of(task.name)
    report = LandingReport()
    report.record(zone, dimension_files(task))
    for day in days:
        files = day_files(day, task, drift)
        report.record(zone, files)
        report.days.append(day)
        for feed in task.daily_feeds:
            report.rows[feed.name] += source.day(feed.name, day).shape[0]
        if on_day is not None:
            on_day(day)
    return report
