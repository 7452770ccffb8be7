"""A small client of Label Studio's REST API: projects, task import, export, annotations.

Authentication, both of Label Studio's schemes:
- a personal access token (a JWT refresh token, Label Studio's default since 1.17): exchanged at
  `/api/token/refresh` for a short-lived access token, sent as `Bearer`, renewed on a 401;
- a legacy API token (sent as `Token`), which a server accepts only once legacy tokens are enabled
  (`label-studio start --enable-legacy-api-token`, or the organization's token settings).

Every failure raises `LabelStudioError` naming the server, the call and what came back: an
unreachable server, a timeout, an HTTP error with the start of its body. Rate limits (429) and
unavailable gateways (502-504) are retried a few times, honouring `Retry-After`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from typing import Any

import requests

RETRY_STATUSES = {429, 502, 503, 504}
PAGE_SIZE = 500
IDS_PER_EXPORT = 200  # task ids per export request: they travel in the query string


class LabelStudioError(RuntimeError):
    """A Label Studio call that failed: the message names the server, the call and the cause."""


class LabelStudioClient:
    """One Label Studio server, as one user."""

    def __init__(
        self,
        url: str,
        token: str,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 1.0,
    ):
        if not url.startswith(("http://", "https://")):
            raise LabelStudioError(f"Label Studio URL {url!r} is not an http(s) URL")
        if not token:
            raise LabelStudioError(f"no API token was given for Label Studio at {url}")
        self.url, self.token = url.rstrip("/"), token
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.session = requests.Session()
        self._access: str | None = None

    @property
    def personal_access_token(self) -> bool:
        """Whether the token is a personal access token (a JWT) rather than a legacy token."""
        return self.token.count(".") == 2

    # -- transport -------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """The response of a successful call; LabelStudioError otherwise.

        Retried: 429 and 502-504 answers, and a connection that could not be made. A POST that
        timed out waiting for its answer is not retried: the server may have done it.
        """
        what = f"Label Studio at {self.url}: {method} {path}"
        renewed = False
        attempt = 0
        while True:
            wait = self.backoff_s * 2**attempt
            try:
                response = self.session.request(
                    method, self.url + path, headers=self._auth(), timeout=self.timeout_s, **kwargs
                )
            except requests.ReadTimeout:
                problem = f"no answer within {self.timeout_s:g} s"
                if method == "POST":
                    raise LabelStudioError(f"{what} failed: {problem}") from None
            except requests.ConnectionError as e:
                problem = f"unreachable ({_first_line(e)})"
            else:
                if response.status_code == 401 and self.personal_access_token and not renewed:
                    self._access, renewed = None, True  # the access token expired: renew it
                    continue
                if response.status_code not in RETRY_STATUSES:
                    if response.ok:
                        return response
                    raise LabelStudioError(
                        f"{what} failed with HTTP {response.status_code}: {_body(response)}"
                    )
                problem = f"HTTP {response.status_code}: {_body(response)}"
                wait = _retry_after(response, wait)
            if attempt >= self.retries:
                tries = f" ({attempt + 1} attempts)" if attempt else ""
                raise LabelStudioError(f"{what} failed{tries}: {problem}")
            time.sleep(wait)
            attempt += 1

    def _auth(self) -> dict[str, str]:
        if not self.personal_access_token:
            return {"Authorization": f"Token {self.token}"}
        if self._access is None:
            what = f"Label Studio at {self.url}: POST /api/token/refresh"
            try:
                response = self.session.post(
                    self.url + "/api/token/refresh",
                    json={"refresh": self.token},
                    timeout=self.timeout_s,
                )
            except requests.RequestException as e:
                raise LabelStudioError(f"{what} failed: {_first_line(e)}") from None
            if not response.ok:
                raise LabelStudioError(
                    f"{what} refused the personal access token: HTTP {response.status_code}: "
                    f"{_body(response)}"
                )
            self._access = response.json()["access"]
        return {"Authorization": f"Bearer {self._access}"}

    def get(self, path: str, **params: Any) -> Any:
        return _json(self.request("GET", path, params=params), f"GET {path}")

    def post(self, path: str, body: Any, **params: Any) -> Any:
        return _json(self.request("POST", path, json=body, params=params), f"POST {path}")

    # -- projects ----------------------------------------------------------------------------

    def ensure_project(self, title: str, label_config: str, description: str = "") -> int:
        """The id of the project named `title`, created if absent; its labeling config kept
        equal to `label_config`."""
        project = self._project(title)
        if project is None:
            body = {"title": title, "label_config": label_config, "description": description}
            return int(self.post("/api/projects", body)["id"])
        if (project.get("label_config") or "").strip() != label_config.strip():
            self.request(
                "PATCH", f"/api/projects/{project['id']}", json={"label_config": label_config}
            )
        return int(project["id"])

    def project_id(self, title: str) -> int | None:
        """The id of the project named `title`, None if there is none."""
        project = self._project(title)
        return None if project is None else int(project["id"])

    def _project(self, title: str) -> dict[str, Any] | None:
        """The one project named `title`; an error if several are."""
        found = [p for p in self._projects(title) if p.get("title") == title]
        if len(found) > 1:
            ids = sorted(p["id"] for p in found)
            raise LabelStudioError(
                f"Label Studio at {self.url} has {len(found)} projects titled {title!r} "
                f"(ids {ids}): rename all but one"
            )
        return found[0] if found else None

    def _projects(self, title: str) -> Iterator[dict[str, Any]]:
        page = 1
        while True:
            body = self.get("/api/projects", title=title, page=page, page_size=100)
            yield from body["results"]
            if not body.get("next"):
                return
            page += 1

    # -- tasks -------------------------------------------------------------------------------

    def tasks(
        self, project: int, filters: list[dict[str, Any]] | None = None, fields: str = "all"
    ) -> list[dict[str, Any]]:
        """Every task of `project` that passes the data manager `filters` (all of them)."""
        params: dict[str, Any] = {"project": project, "fields": fields, "page_size": PAGE_SIZE}
        if filters:
            query = {"filters": {"conjunction": "and", "items": filters}}
            params["query"] = json.dumps(query)
        found: list[dict[str, Any]] = []
        page = 1
        while True:
            try:
                body = self.get("/api/tasks", page=page, **params)
            except LabelStudioError as e:
                # The data manager answers a page past the end with 404.
                if page > 1 and "HTTP 404" in str(e):
                    return found
                raise
            found += body["tasks"]
            if len(body["tasks"]) < PAGE_SIZE or len(found) >= body.get("total", 0):
                return found
            page += 1

    def import_tasks(self, project: int, tasks: list[dict[str, Any]]) -> list[int]:
        """Import `tasks` (with their predictions); Label Studio's ids, in the same order."""
        if not tasks:
            return []
        body = self.post(f"/api/projects/{project}/import", tasks, return_task_ids="true")
        ids = body.get("task_ids")
        if not isinstance(ids, list) or len(ids) != len(tasks):
            raise LabelStudioError(
                f"Label Studio at {self.url}: importing {len(tasks)} tasks into project "
                f"{project} returned {len(ids) if isinstance(ids, list) else 'no'} task ids"
            )
        return [int(i) for i in ids]

    def delete_task(self, task: int) -> None:
        self.request("DELETE", f"/api/tasks/{task}/")

    def export(self, project: int, task_ids: Iterable[int]) -> list[dict[str, Any]]:
        """Label Studio's JSON export of the given tasks, with all their annotations."""
        ids = sorted(set(task_ids))
        items: list[dict[str, Any]] = []
        for start in range(0, len(ids), IDS_PER_EXPORT):
            chunk = ids[start : start + IDS_PER_EXPORT]
            items += self.get(
                f"/api/projects/{project}/export", exportType="JSON", **{"ids[]": chunk}
            )
        return items

    def annotate(
        self, task: int, result: list[dict[str, Any]], lead_time_s: float | None = None
    ) -> dict[str, Any]:
        """Submit an annotation of `task`, as the UI's Submit button does."""
        body: dict[str, Any] = {"result": result, "was_cancelled": False}
        if lead_time_s is not None:
            body["lead_time"] = lead_time_s
        return self.post(f"/api/tasks/{task}/annotations/", body)

    def project_counts(self, project: int) -> dict[str, int]:
        """The project's annotation counters (which change whenever an annotation is made)."""
        body = self.get(f"/api/projects/{project}")
        names = ("total_annotations_number", "skipped_annotations_number")
        return {n: int(body.get(n) or 0) for n in names}


def _json(response: requests.Response, call: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise LabelStudioError(
            f"Label Studio at {response.url}: {call} answered HTTP {response.status_code} with "
            f"something that is not JSON: {_body(response)}"
        ) from None


def _body(response: requests.Response) -> str:
    text = response.text.strip().replace("\n", " ")
    return text[:300] + ("..." if len(text) > 300 else "") if text else "(empty body)"


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0][:300] if str(error) else type(error).__name__


def _retry_after(response: requests.Response, default: float) -> float:
    value = response.headers.get("Retry-After", "")
    return min(float(value), 60.0) if value.replace(".", "", 1).isdigit() else default
