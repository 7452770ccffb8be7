"""The labeling loop against a real Label Studio: export, annotate through the API, import.

The module starts one Label Studio (installed once into a virtual environment shared by test
runs, `~/.cache/flywheel/label-studio-<version>` or FLYWHEEL_TEST_LABEL_STUDIO_VENV) on a free
port of 127.0.0.1; every test uses its own project. The transport tests at the end need no server.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import pytest

from deploy.label_studio import VERSION, LocalLabelStudio
from pipelines.ingestion import ensure_raw_tables, load_validated, read_and_validate
from pipelines.labeling.export_import import export_day, import_day
from pipelines.lib.errors import ConfigurationError
from pipelines.lib.label_exchange import FileLabelExchange, LabelStudioExchange
from pipelines.lib.label_studio_api import LabelStudioClient, LabelStudioError
from pipelines.lib.landing_zone import LocalLandingZone
from pipelines.lib.warehouse import DuckDBConnection
from pipelines.task import load_task
from sim.world import nycflights
from sim.world.annotators import LabelingService, LabelStudioAnnotators
from sim.world.nycflights import is_late

pytestmark = pytest.mark.xdist_group("label_studio")

TASK = load_task("flights")
SPEC = TASK.model
LABELING = TASK.labeling
DAY1, DAY2, DAY3 = "2013-01-01", "2013-01-02", "2013-01-03"
BUDGET = 20
MODEL_VERSION = "7"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LocalLabelStudio]:
    """A running Label Studio; its install and start-up times are printed (pytest -s)."""
    default = Path.home() / ".cache" / "flywheel" / f"label-studio-{VERSION}"
    venv = Path(os.environ.get("FLYWHEEL_TEST_LABEL_STUDIO_VENV", default))
    studio = LocalLabelStudio(tmp_path_factory.mktemp("label-studio"), free_port(), venv)
    began = time.monotonic()
    studio.install()
    installed = time.monotonic()
    studio.start()
    print(
        f"\nLabel Studio {VERSION}: install {installed - began:.1f} s (0 if cached), "
        f"start {time.monotonic() - installed:.1f} s"
    )
    yield studio
    studio.stop()


def exchange_on(server: LocalLabelStudio, store: Path, **overrides) -> LabelStudioExchange:
    """An exchange to a project of its own on `server`, landing deliveries under `store`."""
    settings = {
        "url": server.url,
        "token": server.credentials().token,
        "project_title": f"flywheel-test-{uuid.uuid4().hex[:8]}",
        "store": LocalLandingZone(root=str(store)),
        **overrides,
    }
    return LabelStudioExchange(**settings)


@pytest.fixture(scope="module")
def flights() -> pd.DataFrame:
    """The features of DAY1's first 40 departures, as the features mart holds them."""
    day = nycflights.load().day("flights", DAY1).head(40)
    ids = DAY1 + "_" + day["carrier"] + day["flight"] + "_" + day["origin"]
    hour = day["hour"].astype(int)
    return pd.DataFrame(
        {
            "flight_id": ids,
            "flight_date": pd.Timestamp(DAY1).date(),
            "scheduled_departure_at": pd.Timestamp(DAY1) + pd.to_timedelta(hour, unit="h"),
            "carrier": day["carrier"],
            "origin": day["origin"],
            "dest": day["dest"],
            "route": day["origin"] + "-" + day["dest"],
            "scheduled_hour": hour,
            "distance": day["distance"].astype(float),
        }
    )


def warehouse(
    flights: pd.DataFrame, scored: bool = True, path: Path | None = None
) -> DuckDBConnection:
    """A warehouse with the raw labeling tables, DAY1's features and the champion's scores
    (in memory, or in the DuckDB file `path`)."""
    con = DuckDBConnection(duckdb.connect(str(path) if path else ":memory:"))
    ensure_raw_tables(con, TASK)
    con.raw.register("_f", flights)
    con.raw.execute(f"create table {SPEC.features_table} as select * from _f")
    if scored:
        scores = flights[["flight_id"]].assign(
            probability=[(i % 10) / 10 + 0.05 for i in range(len(flights))],
            model_version=int(MODEL_VERSION),
        )
        con.raw.register("_p", scores)
        con.raw.execute(f"create table {SPEC.predictions_table} as select * from _p")
    return con


def labels_of(con: DuckDBConnection) -> pd.DataFrame:
    return con.execute(
        "select flight_id, is_late, _delivery_date from raw.flight_labels order by flight_id"
    ).df()


def quarantined(con: DuckDBConnection) -> list[str]:
    rows = con.execute(
        "select reason from raw.quarantine where feed = 'flight_labels' order by reason"
    ).fetchall()
    return [r for (r,) in rows]


def test_a_day_goes_through_label_studio_and_its_labels_are_the_outcomes(server, flights, tmp_path):
    con = warehouse(flights)
    exchange = exchange_on(server, tmp_path / "labeling")
    report = export_day(con, exchange, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)
    assert sum(report.reasons.values()) == BUDGET

    # Label Studio holds the batch, pre-annotated by the champion, and the warehouse its ids.
    client = exchange.client()
    project = client.project_id(exchange.project_title)
    in_studio = client.tasks(project)
    assert len(in_studio) == BUDGET
    recorded = con.execute("select task_id, external_id from raw.label_tasks").df()
    assert dict(zip(recorded.task_id, recorded.external_id, strict=True)) == {
        t["data"]["task_id"]: str(t["id"]) for t in in_studio
    }
    for task in in_studio:
        (prediction,) = task["predictions"]
        assert prediction["model_version"] == MODEL_VERSION
        assert prediction["result"][0]["value"]["choices"][0] in LABELING.choices
    assert client.get(f"/api/projects/{project}")["label_config"] == LABELING.labeling_config()

    # Exporting the day again adds nothing twice.
    export_day(con, exchange, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)
    assert len(client.tasks(project)) == BUDGET

    annotators = LabelStudioAnnotators(client, exchange.project_title, latency_days=1)
    assert annotators.deliver(pd.Timestamp(DAY1).date()).tasks_answered == 0  # not landed yet
    assert annotators.deliver(pd.Timestamp(DAY2).date()).tasks_answered == BUDGET

    imported = import_day(con, exchange, TASK, LABELING, DAY2)
    assert (imported.accepted, imported.rejected) == (BUDGET, 0)
    labels = labels_of(con)
    assert set(labels.flight_id) == {t.removeprefix("T-") for t in recorded.task_id}
    assert dict(zip(labels.flight_id, labels.is_late, strict=True)) == {
        f: is_late(f) for f in labels.flight_id
    }
    known = con.execute("select distinct known_at from raw.flight_labels").fetchall()
    assert known == [(pd.Timestamp(f"{DAY2} 23:59:59").to_pydatetime(),)]

    # The same day through the file exchange gives the same labels.
    files = tmp_path / "files"
    other = warehouse(flights)
    file_exchange = FileLabelExchange(store=LocalLandingZone(root=str(files)))
    export_day(other, file_exchange, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)
    LabelingService(file_exchange.store, latency_days=1).deliver(pd.Timestamp(DAY2).date())
    import_day(other, file_exchange, TASK, LABELING, DAY2)
    pd.testing.assert_frame_equal(labels_of(other), labels)

    # Importing the day again changes nothing, and so does the next day with nothing new.
    landed = (tmp_path / "labeling" / "inbox" / DAY2 / "label-studio.json").read_bytes()
    import_day(con, exchange, TASK, LABELING, DAY2)
    pd.testing.assert_frame_equal(labels_of(con), labels)
    assert (tmp_path / "labeling" / "inbox" / DAY2 / "label-studio.json").read_bytes() == landed
    assert import_day(con, exchange, TASK, LABELING, DAY3).accepted == 0
    pd.testing.assert_frame_equal(labels_of(con), labels)


def test_bad_annotations_made_in_label_studio_are_quarantined_and_nothing_valid_is_lost(
    server, flights, tmp_path
):
    con = warehouse(flights)
    exchange = exchange_on(server, tmp_path / "labeling")
    export_day(con, exchange, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)
    client = exchange.client()
    project = client.project_id(exchange.project_title)
    tasks = sorted(client.tasks(project), key=lambda t: t["id"])
    outside, cancelled, twice = tasks[0], tasks[1], tasks[2]

    def truth(task) -> str:
        return LABELING.choice_of(is_late(task["data"]["flight_id"]))

    client.annotate(outside["id"], LABELING.result("maybe"))
    client.post(f"/api/tasks/{cancelled['id']}/annotations/", {"result": [], "was_cancelled": True})
    first = client.annotate(twice["id"], LABELING.result(truth(twice)))
    second = client.annotate(twice["id"], LABELING.result(truth(twice)))
    # Tasks no export made: one unknown, one forging the id of an exported task.
    shown = {k: v for k, v in tasks[3]["data"].items() if k != "batch_id"}
    forged = [
        {"data": {**shown, "task_id": "T-forged", "flight_id": flights.flight_id[0]}},
        {
            "data": {
                **shown,
                "task_id": cancelled["data"]["task_id"],
                "flight_id": "2013-01-01_XX1_JFK",
            }
        },
    ]
    for forged_id in client.import_tasks(project, forged):
        client.annotate(forged_id, LABELING.result("late"))
    annotators = LabelStudioAnnotators(client, exchange.project_title, latency_days=1)
    assert annotators.deliver(pd.Timestamp(DAY2).date()).tasks_answered == BUDGET - 3

    imported = import_day(con, exchange, TASK, LABELING, DAY2)
    assert imported.accepted == BUDGET - 2  # all but the label outside the set and the cancelled
    assert quarantined(con) == sorted(
        [
            "annotation cancelled",
            f"flight_id '2013-01-01_XX1_JFK' is not the task's flight_id "
            f"'{cancelled['data']['flight_id']}'",
            "label 'maybe' not in ('late', 'on_time')",
            f"superseded by annotation {second['id']}",
            "unknown task 'T-forged'",
        ]
    )
    assert first["id"] < second["id"]

    # The next day: the task answered twice is answered a third time, the bad label corrected.
    client.annotate(twice["id"], LABELING.result(truth(twice)))
    client.annotate(outside["id"], LABELING.result(truth(outside)))
    again = import_day(con, exchange, TASK, LABELING, DAY3)
    assert (again.accepted, again.rejected) == (1, 1)
    assert again.reasons == {"task already labelled": 1}
    labels = labels_of(con)
    assert len(labels) == BUDGET - 1  # every exported task but the cancelled one
    assert dict(zip(labels.flight_id, labels.is_late, strict=True)) == {
        f: is_late(f) for f in labels.flight_id
    }


def test_a_label_studio_that_is_down_fails_the_run_whole_and_the_next_run_catches_up(
    server, flights, tmp_path
):
    con = warehouse(flights)
    closed = f"http://127.0.0.1:{free_port()}"
    down = exchange_on(server, tmp_path / "labeling", url=closed, retries=0)
    with pytest.raises(LabelStudioError, match=rf"Label Studio at {closed}: .*unreachable"):
        export_day(con, down, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)
    assert con.execute("select count(*) from raw.label_tasks").fetchone() == (0,)

    up = exchange_on(server, tmp_path / "labeling", project_title=down.project_title)
    export_day(con, up, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)
    annotators = LabelStudioAnnotators(up.client(), up.project_title, latency_days=1)
    annotators.deliver(pd.Timestamp(DAY2).date())
    with pytest.raises(LabelStudioError, match="unreachable"):
        import_day(con, down, TASK, LABELING, DAY2)
    assert con.execute("select count(*) from raw.flight_labels").fetchone() == (0,)
    assert not (tmp_path / "labeling" / "inbox").exists()
    assert import_day(con, up, TASK, LABELING, DAY2).accepted == BUDGET

    # What the deployment's preflight says of each: the setting at fault.
    up.check()
    with pytest.raises(ConfigurationError, match=r"^FLYWHEEL_LABEL_STUDIO_URL: .*unreachable"):
        down.check()
    refused = exchange_on(server, tmp_path / "other", token="not-the-token")
    with pytest.raises(ConfigurationError, match=r"^FLYWHEEL_LABEL_STUDIO_TOKEN: .*HTTP 401"):
        refused.check()


KILLED = """
import os, signal, sys
import duckdb
from pipelines.labeling import export_import as module
from pipelines.lib.label_exchange import LabelStudioExchange
from pipelines.lib.landing_zone import LocalLandingZone
from pipelines.lib.warehouse import DuckDBConnection
from tests.pipelines.lib.test_label_studio import LABELING, SPEC, TASK, DAY1, DAY2, BUDGET

url, token, title, store, db, where = sys.argv[1:]
exchange = LabelStudioExchange(
    url=url, token=token, project_title=title, store=LocalLandingZone(root=store)
)
con = DuckDBConnection(duckdb.connect(db))
if where == "export":
    # Killed once Label Studio has the batch, before the warehouse records it.
    module.replace_rows = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    module.export_day(con, exchange, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)
else:
    # Killed once the delivery's items have landed, before its manifest.
    write = LocalLandingZone.write_bytes
    def dying(self, key, data):
        if key.endswith("manifest.json"):
            os.kill(os.getpid(), signal.SIGKILL)
        return write(self, key, data)
    LocalLandingZone.write_bytes = dying
    module.import_day(con, exchange, TASK, LABELING, DAY2)
"""


def test_a_run_killed_between_label_studio_and_the_warehouse_loses_and_doubles_nothing(
    server, flights, tmp_path
):
    db, store = tmp_path / "warehouse.duckdb", tmp_path / "labeling"
    warehouse(flights, path=db).raw.close()
    exchange = exchange_on(server, store)
    client = exchange.client()

    def killed(where: str) -> None:
        args = [server.url, exchange.token, exchange.project_title, str(store), str(db), where]
        done = subprocess.run(
            [sys.executable, "-c", KILLED, *args],
            cwd=Path(__file__).parents[3],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == -signal.SIGKILL, done.stderr

    killed("export")
    project = client.project_id(exchange.project_title)
    assert len(client.tasks(project)) == BUDGET
    con = DuckDBConnection(duckdb.connect(str(db)))
    assert con.execute("select count(*) from raw.label_tasks").fetchone() == (0,)
    export_day(con, exchange, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)  # the next attempt
    in_studio = {str(t["id"]) for t in client.tasks(project)}
    recorded = {i for (i,) in con.execute("select external_id from raw.label_tasks").fetchall()}
    assert len(in_studio) == BUDGET and recorded == in_studio
    con.raw.close()

    LabelStudioAnnotators(client, exchange.project_title).deliver(pd.Timestamp(DAY2).date())
    killed("import")
    assert (store / "inbox" / DAY2 / "label-studio.json").exists()
    assert not (store / "inbox" / DAY2 / "label-studio.manifest.json").exists()
    con = DuckDBConnection(duckdb.connect(str(db)))
    assert con.execute("select count(*) from raw.flight_labels").fetchone() == (0,)
    assert import_day(con, exchange, TASK, LABELING, DAY2).accepted == BUDGET
    assert con.execute("select count(*) from raw.flight_labels").fetchone() == (BUDGET,)


def killed_during(server: LocalLabelStudio, call, patch: pytest.MonkeyPatch):
    """`call` (a LabelStudioClient method), during which the server's processes are SIGKILLed
    once its first request has been sent whole, before the answer: Label Studio may or may not
    have done the work the request asked for."""
    from urllib3.connection import HTTPConnection

    send, armed = HTTPConnection.request, threading.Event()

    def sent_then_killed(self, *args, **kwargs):
        send(self, *args, **kwargs)
        if armed.is_set():
            armed.clear()
            os.killpg(server.pid(), signal.SIGKILL)

    patch.setattr(HTTPConnection, "request", sent_then_killed)

    def dying(*args, **kwargs):
        armed.set()
        return call(*args, **kwargs)

    return dying


@pytest.fixture
def killable(server: LocalLabelStudio) -> Iterator[LocalLabelStudio]:
    """The module's server, for a test that kills it: started again after, whatever happened,
    so that a failure here is not also every later test's."""
    yield server
    server.start()


def test_label_studio_killed_mid_export_and_mid_import_fails_each_whole_and_the_retry_catches_up(
    killable, flights, tmp_path, monkeypatch
):
    """Label Studio SIGKILLed while the export's batch is being imported into it, and again
    while the import pulls the annotations: each run fails whole, naming the server; once it is
    started again (its SQLite database recovered), the next run catches up, each task once."""
    server = killable
    con = warehouse(flights)
    exchange = exchange_on(server, tmp_path / "labeling", retries=0)
    client = exchange.client()
    with monkeypatch.context() as patch:
        patch.setattr(
            LabelStudioClient,
            "import_tasks",
            killed_during(server, LabelStudioClient.import_tasks, patch),
        )
        with pytest.raises(LabelStudioError, match=f"Label Studio at {server.url}"):
            export_day(con, exchange, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)
    assert con.execute("select count(*) from raw.label_tasks").fetchone() == (0,)
    server.start()  # as its supervisor would
    project = client.project_id(exchange.project_title)
    export_day(con, exchange, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)  # the retry
    in_studio = {str(t["id"]) for t in client.tasks(project)}
    recorded = {i for (i,) in con.execute("select external_id from raw.label_tasks").fetchall()}
    assert len(in_studio) == BUDGET and recorded == in_studio

    LabelStudioAnnotators(client, exchange.project_title).deliver(pd.Timestamp(DAY2).date())
    with monkeypatch.context() as patch:
        dying = killed_during(server, LabelStudioClient.export, patch)
        patch.setattr(LabelStudioClient, "export", dying)
        with pytest.raises(LabelStudioError, match=f"Label Studio at {server.url}"):
            import_day(con, exchange, TASK, LABELING, DAY2)
    assert con.execute("select count(*) from raw.flight_labels").fetchone() == (0,)
    assert not (tmp_path / "labeling" / "inbox" / DAY2).exists()
    server.start()
    assert import_day(con, exchange, TASK, LABELING, DAY2).accepted == BUDGET
    assert con.execute("select count(*) from raw.flight_labels").fetchone() == (BUDGET,)
    assert len(client.tasks(project)) == BUDGET


# -- the transport, against a stand-in server ----------------------------------------------------


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next of the server's scripted (status, headers, body,
    delay) answers."""

    def do_GET(self) -> None:
        status, headers, body, delay = self.server.script.pop(0)  # type: ignore[attr-defined]
        self.server.seen.append(self.path)  # type: ignore[attr-defined]
        time.sleep(delay)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[http.server.HTTPServer]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    httpd.script, httpd.seen = [], []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


def client_of(httpd, **kwargs) -> LabelStudioClient:
    return LabelStudioClient(f"http://127.0.0.1:{httpd.server_port}", "t0ken", **kwargs)


def test_rate_limits_are_waited_out_and_retried(scripted):
    limited = (429, {"Retry-After": "0"}, b'{"detail": "slow down"}', 0)
    scripted.script += [limited, limited, (200, {}, json.dumps({"ok": 1}).encode(), 0)]
    assert client_of(scripted, backoff_s=0.01).get("/api/x") == {"ok": 1}
    assert len(scripted.seen) == 3


def test_an_error_names_the_server_the_call_and_what_came_back(scripted):
    scripted.script += [(500, {}, b"Internal Server Error: database is locked", 0)]
    with pytest.raises(LabelStudioError) as raised:
        client_of(scripted).get("/api/projects")
    message = str(raised.value)
    assert message.startswith(f"Label Studio at http://127.0.0.1:{scripted.server_port}: GET")
    assert "HTTP 500: Internal Server Error: database is locked" in message

    scripted.script += [(429, {"Retry-After": "0"}, b"limited", 0)] * 2
    with pytest.raises(LabelStudioError, match=r"\(2 attempts\): HTTP 429: limited"):
        client_of(scripted, retries=1, backoff_s=0.01).get("/api/x")


def test_a_server_that_does_not_answer_in_time_fails_with_the_timeout(scripted):
    scripted.script += [(200, {}, b"{}", 2.0)]
    with pytest.raises(LabelStudioError, match=r"GET /api/x failed: no answer within 0\.3 s"):
        client_of(scripted, timeout_s=0.3, retries=0).get("/api/x")


# -- a second task, configured by its YAML alone -------------------------------------------------

REVIEWS = load_task(Path(__file__).parents[2] / "fixtures" / "tasks" / "reviews.yaml")
REVIEWS_SPEC, REVIEWS_LABELING = REVIEWS.model, REVIEWS.labeling
POSTED, NEXT_DAY = "2024-03-04", "2024-03-05"


def review_warehouse(tmp_path: Path, n: int = 30) -> tuple[DuckDBConnection, dict[str, bool]]:
    """A day of generated reviews landed, ingested by the pipeline and built into features by
    the task's own dbt project; a model's scores; and each review's true label."""
    rng = np.random.default_rng(5)
    ids = [f"R{i:06d}" for i in range(1, n + 1)]
    spam = rng.random(n) < 0.3
    day = pd.Timestamp(POSTED)
    landed = pd.DataFrame(
        {
            "review_id": ids,
            "year": day.year,
            "month": day.month,
            "day": day.day,
            "product": rng.choice(["kettle", "lamp", "chair"], n),
            "stars": rng.integers(1, 6, n),
            "body": [("BUY NOW cheap!!!" if s else "Works as described.") for s in spam],
        }
    )
    zone = LocalLandingZone(root=str(tmp_path / "landing"))
    feed = REVIEWS.feeds["reviews"]
    zone.write_bytes(feed.landing_key(POSTED), landed.to_csv(index=False).encode())
    db = tmp_path / "reviews.duckdb"
    con = DuckDBConnection(duckdb.connect(str(db)))
    ensure_raw_tables(con, REVIEWS)
    (load,) = load_validated(con, feed, read_and_validate(REVIEWS, feed, [POSTED], zone))
    assert (load.rows_loaded, load.rows_quarantined) == (n, 0)
    con.raw.close()
    project = Path(__file__).parents[2] / "fixtures" / "reviews_dbt"
    dbt = Path(sys.executable).parent / "dbt"
    env = {**os.environ, "REVIEWS_WAREHOUSE_PATH": str(db)}
    built = subprocess.run(
        [str(dbt), "build", "--project-dir", str(project), "--profiles-dir", str(project),
         "--target-path", str(tmp_path / "dbt-target"), "--log-path", str(tmp_path / "dbt-logs")],
        env={**env, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:]
    con = DuckDBConnection(duckdb.connect(str(db)))
    scores = pd.DataFrame({"review_id": ids, "probability": rng.random(n), "model_version": 3})
    con.raw.register("_p", scores)
    con.raw.execute(f"create table {REVIEWS_SPEC.predictions_table} as select * from _p")
    return con, dict(zip(ids, spam.tolist(), strict=True))


@pytest.mark.parametrize("backend", ["files", "label-studio"])
def test_a_second_task_goes_through_export_annotation_and_import_with_no_code_change(
    backend, request, tmp_path
):
    con, truth = review_warehouse(tmp_path)
    labeling = REVIEWS_LABELING
    if backend == "files":
        exchange = FileLabelExchange(store=LocalLandingZone(root=str(tmp_path / "labeling")))
    else:
        exchange = exchange_on(request.getfixturevalue("server"), tmp_path / "labeling")
    export_day(con, exchange, REVIEWS, REVIEWS_SPEC, labeling, POSTED, 12, 0.5)

    # Annotators answer every task with the review's true label.
    if backend == "files":
        tasks = json.loads(exchange.store.read_bytes(f"outbox/reviews-{POSTED}.json"))
        answered = [
            {
                "id": i,
                "data": t["data"],
                "annotations": [
                    {
                        "id": 100 + i,
                        "result": labeling.result(
                            labeling.choice_of(truth[t["data"]["review_id"]])
                        ),
                        "updated_at": f"{NEXT_DAY}T10:00:00Z",
                    }
                ],
            }
            for i, t in enumerate(tasks)
        ]
        exchange.store.write_bytes(f"inbox/{NEXT_DAY}/answers.json", json.dumps(answered).encode())
    else:
        client = exchange.client()
        for t in client.tasks(client.project_id(exchange.project_title)):
            (prediction,) = t["predictions"]
            assert prediction["result"][0]["value"]["choices"][0] in ("spam", "genuine")
            choice = labeling.choice_of(truth[t["data"]["review_id"]])
            client.annotate(t["id"], labeling.result(choice))

    report = import_day(con, exchange, REVIEWS, labeling, NEXT_DAY)
    assert (report.accepted, report.rejected) == (12, 0)
    query = "select review_id, is_spam from raw.review_labels order by review_id"
    labels = dict(con.execute(query).fetchall())
    assert labels == {r: truth[r] for r in labels} and len(labels) == 12
    import_day(con, exchange, REVIEWS, labeling, NEXT_DAY)
    assert dict(con.execute(query).fetchall()) == labels


def test_the_inbox_sensor_asks_for_an_import_of_the_newest_day_when_annotations_are_made(
    server, flights, tmp_path
):
    from pipelines.definitions import defs

    con = warehouse(flights)
    exchange = exchange_on(server, tmp_path / "labeling")
    export_day(con, exchange, TASK, SPEC, LABELING, DAY1, BUDGET, 0.4)
    sensor = defs.resolve_sensor_def("inbox_sensor")
    with dg.DagsterInstance.ephemeral() as instance:
        for day in (DAY1, DAY2):  # exports materialized for two days: DAY2 is the newest
            instance.report_runless_asset_event(
                dg.AssetMaterialization([TASK.name, TASK.label_tasks_table], partition=day)
            )

        def tick(cursor):
            with dg.build_sensor_context(
                cursor=cursor,
                instance=instance,
                resources={"label_exchange": exchange},
                definitions=defs,
            ) as context:
                return sensor.evaluate_tick(context)

        first = tick(None)
        assert [r.partition_key for r in first.run_requests] == [DAY2]
        assert tick(first.cursor).run_requests == []
        client = exchange.client()
        task = client.tasks(client.project_id(exchange.project_title))[0]
        client.annotate(task["id"], LABELING.result("late"))
        after = tick(first.cursor)
        assert [r.partition_key for r in after.run_requests] == [DAY2]
        assert after.run_requests[0].run_key != first.run_requests[0].run_key
        assert tick(after.cursor).run_requests == []


def test_a_personal_access_token_works_and_its_access_token_is_renewed(server):
    legacy = LabelStudioClient(server.url, server.credentials().token)
    pat = legacy.post("/api/token/", {})["token"]  # the user's personal access token
    client = LabelStudioClient(server.url, pat)
    assert client.personal_access_token
    title = f"flywheel-test-{uuid.uuid4().hex[:8]}"
    project = client.ensure_project(title, LABELING.labeling_config())
    assert client.project_id(title) == project
    client._access = "expired"  # what an access token past its lifetime gets: a 401
    assert client.get(f"/api/projects/{project}")["title"] == title
    assert client._access != "expired"
    with pytest.raises(LabelStudioError, match="refused the personal access token: HTTP 401"):
        LabelStudioClient(server.url, pat[:-4] + "AAAA").get("/api/projects")
