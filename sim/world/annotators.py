"""The annotators: a labeling service that answers the pipeline's batches once examples have landed.

The store is a folder (or an S3 prefix) shared with the pipeline, laid out as a real Label Studio
deployment would use it:

- `outbox/<batch_id>.json` holds Label Studio *import* JSON (a list of tasks with `data`, `meta`
  and `predictions`); `outbox/<batch_id>.manifest.json` describes it. In production the files are
  imported through the Label Studio UI or API, or read by a source cloud storage connected to the
  outbox prefix.
- `inbox/<YYYY-MM-DD>/<batch_id>.json` holds Label Studio's JSON *export* of the tasks answered that
  day (a list of tasks with `id`, `data` and `annotations`). In production a target cloud storage
  syncs annotations to the inbox prefix, or `label-studio-sdk`'s export API writes them there (an
  optional extra, not a dependency).

The Label Studio project's labeling config is generated from the task's YAML
(`LabelingSpec.labeling_config`); an answer picks one of its choices.

Answers come from the outcomes the replay holds back (`sim.world.sources.outcome_of`, with the
break planted in the world, if any: sim.world.drift): for flights `late` if the flight arrived
15+ minutes late, and also if it has no arrival delay at all (cancelled or diverted: it did not
arrive on time), otherwise `on_time`; for a rating, its stars.
With probability `noise` an answer is wrong (seeded per task): a binary answer flipped, another
choice at random otherwise.

Delivery rule (stateless, idempotent): a task is due once its example's date (its id's start) plus
`latency_days` is on or before the delivery day. `deliver(day)` answers every due task that no
inbox file of *another* day already holds, in that day's file. Re-delivering a day writes the
same bytes, and a task answered on one day is never answered on another; a task in several
batches is answered once per day, in the first batch by key.

`LabelStudioAnnotators` are the same annotators in front of a real Label Studio: each day they
read their queue (the project's tasks nobody has answered) through its API and submit an
annotation for every task due, as a person does with the UI's Submit button. The same task gets
the same answer from both.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import pandas as pd

from pipelines.labeling import LabelingSpec, render_json
from pipelines.lib.label_exchange import FileLabelExchange, LabelExchange, LabelStudioExchange
from pipelines.lib.label_studio_api import LabelStudioClient
from pipelines.lib.landing_zone import LandingFile, LandingZone
from pipelines.task import load_task
from sim.world.sources import outcome_of

OUTBOX, INBOX = "outbox/", "inbox/"
WORKDAY_SECONDS = 8 * 3600  # answers are given between 09:00 and 17:00 UTC


@dataclass
class DeliveryReport:
    """What one delivery did: inbox keys whose bytes changed, tasks answered that day, waiting."""

    files_written: list[str] = field(default_factory=list)
    tasks_answered: int = 0
    tasks_waiting: int = 0


@dataclass(kw_only=True)
class _Annotators:
    """How the annotators answer: `latency_days` after each flight's day, its outcome, flipped
    with probability `noise` (seeded per task)."""

    latency_days: int = 1
    noise: float = 0.0
    seed: int = 0
    spec: LabelingSpec = field(default_factory=lambda: load_task().labeling)

    def __post_init__(self) -> None:
        if self.latency_days < 0:
            raise ValueError(f"latency_days must be >= 0, got {self.latency_days}")
        if not 0 <= self.noise <= 1:
            raise ValueError(f"noise must be within [0, 1], got {self.noise}")


@dataclass
class LabelingService(_Annotators):
    """Answers the outbox's tasks into the inbox, `latency_days` after each flight's day."""

    store: LandingZone
    _task_ids: dict[str, tuple[str, frozenset[str]]] = field(
        default_factory=dict, init=False, repr=False
    )

    def deliver(self, today: date) -> DeliveryReport:
        """Write today's answers to `inbox/<today>/<batch_id>.json`, one file per batch."""
        answered_elsewhere = self._answered(excluding=today)
        answered_today: set[str] = set()
        report = DeliveryReport()
        for batch_id, tasks in self._batches(answered_elsewhere):
            due = []
            for task in tasks:
                task_id = task["data"]["task_id"]
                if task_id in answered_elsewhere or task_id in answered_today:
                    continue
                if self._due(task) <= today:
                    answered_today.add(task_id)
                    due.append(task)
                else:
                    report.tasks_waiting += 1
            if due:
                key = f"{INBOX}{today.isoformat()}/{batch_id}.json"
                if self.store.write_bytes(key, render_json([self._answer(t, today) for t in due])):
                    report.files_written.append(key)
        report.tasks_answered = len(answered_today)
        return report

    def _batches(self, answered: set[str]) -> list[tuple[str, list[dict[str, Any]]]]:
        """Every batch in the outbox with a task not in `answered`, by key: its id (the file
        name) and its tasks."""
        batches = []
        for file in self.store.list_files(OUTBOX):
            name = file.key[len(OUTBOX) :]
            if "/" in name or not name.endswith(".json") or name.endswith(".manifest.json"):
                continue
            ids = self._ids(file)
            if ids is not None and ids <= answered:
                continue  # nothing left to answer in it
            batches.append((name.removesuffix(".json"), self._tasks(file)))
        return batches

    def _answered(self, excluding: date) -> set[str]:
        """The task ids that inbox files of days other than `excluding` hold."""
        skip = f"{INBOX}{excluding.isoformat()}/"
        answered: set[str] = set()
        for file in self.store.list_files(INBOX):
            if not file.key.startswith(skip) and file.key.endswith(".json"):
                ids = self._ids(file)
                answered |= (
                    ids if ids is not None else {t["data"]["task_id"] for t in self._tasks(file)}
                )
        return answered

    def _tasks(self, file: LandingFile) -> list[dict[str, Any]]:
        """The items of an outbox or inbox file; the task ids they hold are remembered by the
        file's version (a day reads every batch and delivery so far, and they grow)."""
        items = json.loads(self.store.read_bytes(file.key))
        self._task_ids[file.key] = (file.version, frozenset(i["data"]["task_id"] for i in items))
        return items

    def _ids(self, file: LandingFile) -> frozenset[str] | None:
        """The task ids of a file read before, unless it has changed since."""
        known = self._task_ids.get(file.key)
        return known[1] if known is not None and known[0] == file.version else None

    def _due(self, task: dict[str, Any]) -> date:
        return due_day(task["data"][self.spec.example_id], self.latency_days)

    def _answer(self, task: dict[str, Any], today: date) -> dict[str, Any]:
        """A Label Studio export item: the task with one annotation of its example's outcome."""
        task_id, example_id = task["data"]["task_id"], task["data"][self.spec.example_id]
        choice = answer(self.spec, task_id, example_id, self.noise, self.seed)
        at = (
            pd.Timestamp(today) + pd.Timedelta(hours=9, seconds=_digest(task_id) % WORKDAY_SECONDS)
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
        annotation = {
            "id": _digest(f"annotation:{task_id}"),
            "result": self.spec.result(choice),
            "was_cancelled": False,
            "created_at": at,
            "updated_at": at,
            "completed_by": 1,
        }
        return {
            "id": _digest(f"task:{task_id}"),
            "data": task["data"],
            "meta": task.get("meta", {}),
            "annotations": [annotation],
        }


@dataclass
class LabelStudioAnnotators(_Annotators):
    """The annotators in front of a Label Studio server: they answer, through its API, every
    unanswered task of the project due by the delivery day."""

    client: LabelStudioClient
    project_title: str

    def deliver(self, today: date) -> DeliveryReport:
        """Submit an annotation for every task in the queue that is due by `today`."""
        report = DeliveryReport()
        project = self.client.project_id(self.project_title)
        if project is None:  # nothing was ever exported
            return report
        unanswered = [
            {"filter": f"filter:tasks:{name}", "operator": "equal", "type": "Number", "value": 0}
            for name in ("total_annotations", "cancelled_annotations")
        ]
        for task in sorted(self.client.tasks(project, unanswered), key=lambda t: t["id"]):
            data = task["data"]
            if due_day(data[self.spec.example_id], self.latency_days) > today:
                report.tasks_waiting += 1
                continue
            choice = answer(
                self.spec, data["task_id"], data[self.spec.example_id], self.noise, self.seed
            )
            # A person takes a few seconds to a minute per task.
            lead_time = 5 + _digest(f"lead:{data['task_id']}") % 55
            self.client.annotate(int(task["id"]), self.spec.result(choice), float(lead_time))
            report.tasks_answered += 1
        return report


Annotators = LabelingService | LabelStudioAnnotators


def annotators_for(exchange: LabelExchange, latency_days: int = 1) -> Annotators:
    """The simulated annotators in front of a label exchange: answering into its inbox files,
    or through the Label Studio API."""
    if isinstance(exchange, LabelStudioExchange):
        return LabelStudioAnnotators(
            exchange.client(), exchange.project_title, latency_days=latency_days
        )
    if isinstance(exchange, FileLabelExchange):
        return LabelingService(exchange.store, latency_days=latency_days)
    raise TypeError(f"no simulated annotators for a {type(exchange).__name__}")


def due_day(example_id: str, latency_days: int) -> date:
    """When an example's label can be given: its date (the id's start) plus the latency."""
    return date.fromisoformat(example_id[:10]) + timedelta(latency_days)


def answer(spec: LabelingSpec, task_id: str, example_id: str, noise: float, seed: int) -> str:
    """An annotator's choice for a task: the example's outcome; with probability `noise` (seeded
    per task) a wrong one: the other choice of a binary label, else another choice at random."""
    outcome = outcome_of(spec.task, example_id)
    wrong = _unit(f"noise:{seed}:{task_id}") < noise
    if isinstance(outcome, bool):
        return spec.choice_of(not outcome if wrong else outcome)
    right = spec.choice_of(outcome)
    if not wrong:
        return right
    others = [c for c in spec.choices if c != right]
    return others[_digest(f"wrong:{seed}:{task_id}") % len(others)]


def _digest(text: str) -> int:
    """A stable positive integer below 2**48 (exact in JSON readers that use doubles)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")


def _unit(text: str) -> float:
    """A stable number in [0, 1) drawn from `text`."""
    return _digest(text) / 2**48
