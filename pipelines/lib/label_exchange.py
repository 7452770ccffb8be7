"""Where labeling tasks go and annotations come back from: one interface, two backends.

- `FileLabelExchange` (the embedded default): Label Studio's JSON formats through files in the
  label store. A batch is written to `outbox/<batch_id>.json` (import JSON, with a manifest);
  annotators deliver Label Studio *export* JSON to `inbox/<YYYY-MM-DD>/*.json`.
- `LabelStudioExchange`: a Label Studio server, through its API. Publishing a batch creates or
  updates the task's project (its labeling config generated from the task's YAML) and imports
  the batch's tasks with the champion's pre-annotations; a delivery pulls the annotations made
  since the last delivery and lands them, as Label Studio exported them, in the label store's
  inbox (`inbox/<day>/label-studio.json`, with a manifest): the import then validates them
  exactly as it validates files, and re-importing a day re-reads what landed.

The labeling assets only ever see this interface.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pandas as pd
from pydantic import Field

from pipelines.labeling.spec import LabelingSpec
from pipelines.lib.errors import ConfigurationError, secret
from pipelines.lib.label_studio import batch_manifest, render_json
from pipelines.lib.label_studio_api import LabelStudioClient, LabelStudioError
from pipelines.lib.landing_zone import LandingZone, changed_files

OUTBOX, INBOX = "outbox/", "inbox/"
# What the inbox takes: annotators' exports (Label Studio's JSON) and outcomes files
# (pipelines.labeling.outcomes).
DELIVERED = (".json", ".csv", ".parquet")
PULLED = "label-studio"  # the inbox file a Label Studio delivery lands: inbox/<day>/label-studio.*


@dataclass(frozen=True)
class Delivery:
    """One export document delivered on a day. `known_at`, when set, is when the pipeline
    received its labels, which then count as known from that moment (else from each
    annotation's `updated_at`)."""

    key: str
    data: bytes
    known_at: pd.Timestamp | None = None


class LabelExchange(dg.ConfigurableResource, ABC):
    """Publishes a day's labeling tasks and collects the annotations delivered on a day."""

    @abstractmethod
    def publish(
        self, batch_id: str, tasks: list[dict[str, Any]], spec: LabelingSpec
    ) -> dict[str, str | None]:
        """Send a batch to the annotators (idempotent: publishing it again adds nothing twice).
        Returns each task's id in the backend, keyed by the project's task id (None if the
        backend has no ids of its own)."""

    @abstractmethod
    def deliveries(self, day: str, today: bool) -> list[Delivery]:
        """The export documents delivered on `day`; `today` says that `day` is the newest
        delivery day, the only one a backend may still add to (an older day's are final)."""

    @abstractmethod
    def changes(self, cursor: str | None) -> tuple[list[tuple[str | None, str]], str | None]:
        """What was delivered since `cursor`: (delivery day, or None for the newest, and a
        signature of what changed) pairs, and the new cursor."""

    @property
    @abstractmethod
    def where(self) -> str:
        """Where tasks go, for logs and metadata."""

    def check(self, timeout_s: float = 5.0) -> None:
        """ConfigurationError naming the setting at fault when the backend cannot be used."""


class FileLabelExchange(LabelExchange):
    """Label Studio's formats through the label store's outbox and inbox files."""

    store: LandingZone

    def publish(
        self, batch_id: str, tasks: list[dict[str, Any]], spec: LabelingSpec
    ) -> dict[str, str | None]:
        now = datetime.now(UTC).replace(tzinfo=None)
        self.store.write_bytes(f"{OUTBOX}{batch_id}.json", render_json(tasks))
        manifest = batch_manifest(batch_id, tasks, now.isoformat() + "Z")
        self.store.write_bytes(f"{OUTBOX}{batch_id}.manifest.json", render_json(manifest))
        return {task["data"]["task_id"]: None for task in tasks}

    def deliveries(self, day: str, today: bool) -> list[Delivery]:
        files = self.store.list_files(f"{INBOX}{day}/")
        keys = sorted(f.key for f in files if f.key.endswith(DELIVERED))
        return [Delivery(key, self.store.read_bytes(key)) for key in keys]

    def changes(self, cursor: str | None) -> tuple[list[tuple[str | None, str]], str | None]:
        changed, cursor = changed_files(self.store.list_files(INBOX), cursor)
        found = []
        for f in changed:
            parts = f.key[len(INBOX) :].split("/")
            day = parts[0] if len(parts) == 2 and parts[1].endswith(DELIVERED) else ""
            found.append((day, f"{f.key}@{f.version}"))
        return found, cursor

    @property
    def where(self) -> str:
        return f"{self.store.uri}/{OUTBOX}"


class LabelStudioExchange(LabelExchange):
    """A Label Studio server: one project per task, tasks and annotations through its API."""

    url: str = Field(description="Label Studio's base URL, e.g. http://127.0.0.1:8080")
    # A `dg.EnvVar` in the definitions (pipelines/resources.py): the UI shows only its name.
    token: str = Field(description="A personal access token, or a legacy API token")
    project_title: str = Field(description="The project the task's batches go to")
    timeout_s: float = 30.0
    retries: int = 3
    # Where deliveries land before they are imported (the label store).
    store: LandingZone

    def client(self) -> LabelStudioClient:
        return LabelStudioClient(self.url, secret(self.token), self.timeout_s, self.retries)

    def check(self, timeout_s: float = 5.0) -> None:
        try:
            LabelStudioClient(self.url, secret(self.token), timeout_s, retries=0).get(
                "/api/projects", page_size=1
            )
        except LabelStudioError as e:
            setting = "TOKEN" if "HTTP 401" in str(e) or "token" in str(e) else "URL"
            raise ConfigurationError(f"FLYWHEEL_LABEL_STUDIO_{setting}: {e}") from None

    def project(self, client: LabelStudioClient, spec: LabelingSpec) -> int:
        description = f"flywheel: labels for task {spec.task!r} ({spec.label})"
        return client.ensure_project(self.project_title, spec.labeling_config(), description)

    def publish(
        self, batch_id: str, tasks: list[dict[str, Any]], spec: LabelingSpec
    ) -> dict[str, str | None]:
        client = self.client()
        project = self.project(client, spec)
        # The batch's tasks already in the project (a publication retried after a crash).
        found = client.tasks(
            project,
            [_filter("data.batch_id", "equal", "String", batch_id)],
        )
        existing = {t["data"].get("task_id"): t for t in found}
        wanted = {t["data"]["task_id"] for t in tasks}
        for task_id, task in existing.items():
            if task_id not in wanted and not task.get("total_annotations"):
                client.delete_task(int(task["id"]))  # chosen no longer; nobody answered it
        new = [t for t in tasks if t["data"]["task_id"] not in existing]
        batch = [{**t, "data": {**t["data"], "batch_id": batch_id}} for t in new]
        ids = client.import_tasks(project, batch)
        out: dict[str, str | None] = {
            task_id: str(existing[task_id]["id"]) for task_id in wanted & existing.keys()
        }
        out.update({t["data"]["task_id"]: str(i) for t, i in zip(new, ids, strict=True)})
        return out

    def deliveries(self, day: str, today: bool) -> list[Delivery]:
        key, manifest_key = f"{INBOX}{day}/{PULLED}.json", f"{INBOX}{day}/{PULLED}.manifest.json"
        manifests = self._manifests()
        if today and not any(d > day for d in manifests):
            before = [m for d, m in sorted(manifests.items()) if d < day]
            previous = before[-1] if before else {}
            after = int(previous.get("through_annotation_id", 0))
            since = previous.get("tasks_updated_through")
            items, through, updated_through = self._pull(after, since)
            manifest = {
                "day": day,
                "server": self.url,
                "project": self.project_title,
                "after_annotation_id": after,
                "through_annotation_id": through,
                "tasks_updated_since": since,
                "tasks_updated_through": updated_through,
                "items": len(items),
                "pulled_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            # The items first: a delivery whose manifest has landed is whole.
            self.store.write_bytes(key, render_json(items))
            self.store.write_bytes(manifest_key, render_json(manifest))
        elif day not in manifests:
            return []
        # Received on `day`: known from the end of it (the API's times are the server's clock,
        # which a replay of past days does not share).
        known_at = pd.Timestamp(day) + pd.Timedelta(days=1) - pd.Timedelta(seconds=1)
        return [Delivery(key, self.store.read_bytes(key), known_at)]

    def _manifests(self) -> dict[str, dict[str, Any]]:
        """The manifest of every delivery landed so far, by day."""
        found = {}
        for f in self.store.list_files(INBOX):
            parts = f.key[len(INBOX) :].split("/")
            if len(parts) == 2 and parts[1] == f"{PULLED}.manifest.json":
                found[parts[0]] = json.loads(self.store.read_bytes(f.key))
        return found

    def _pull(self, after: int, since: str | None) -> tuple[list[dict[str, Any]], int, str | None]:
        """The tasks annotated since annotation `after` (among those updated since `since`, the
        server's time), as Label Studio exports them, each holding only its newer annotations;
        the newest annotation id and task update time seen."""
        client = self.client()
        project = client.project_id(self.project_title)
        if project is None:
            return [], after, since
        filters = [_filter("updated_at", "greater_or_equal", "Datetime", since)] if since else []
        candidates = client.tasks(project, filters, fields="task_only")
        updated = max((t["updated_at"] for t in candidates), default=since)
        items, through = [], after
        for item in client.export(project, [t["id"] for t in candidates]):
            newer = [a for a in item.get("annotations") or [] if _annotation_id(a) > after]
            if newer:
                items.append({**item, "annotations": newer})
                through = max(through, *(_annotation_id(a) for a in newer))
        items.sort(key=lambda item: item.get("id", 0))
        return items, through, updated

    def changes(self, cursor: str | None) -> tuple[list[tuple[str | None, str]], str | None]:
        client = self.client()
        project = client.project_id(self.project_title)
        if project is None:
            return [], cursor
        counts = client.project_counts(project)
        signature = ",".join(f"{k}={v}" for k, v in sorted(counts.items()))
        if signature == cursor:
            return [], cursor
        return [(None, signature)], signature

    @property
    def where(self) -> str:
        return f"{self.url} project {self.project_title!r}"


def _filter(field: str, operator: str, kind: str, value: Any) -> dict[str, Any]:
    """A data manager filter on a task field."""
    return {"filter": f"filter:tasks:{field}", "operator": operator, "type": kind, "value": value}


def _annotation_id(annotation: Any) -> int:
    value = annotation.get("id") if isinstance(annotation, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
