"""Screenshots of the Dagster UI for the docs, from a short simulation in a throwaway state.

    .venv/bin/python -m tools.screenshots --out docs/images     # or: make docs-screenshots

It plays eight days of flights from 2013-09-02 with a planted drift (the first model after six
days, then a retraining the drift sensor launches on the drift's first day), then seven months of
ratings from 1999-06-01 (the first model after six), each under a FLYWHEEL_HOME of its own and
both in one Dagster instance (a DAGSTER_HOME of their own) in a temporary folder; serves that
instance with `dagster-webserver` over `workspace.yaml` (a code location per task) on a free
127.0.0.1 port, and saves, in `--out`:

- asset-graph.png: the global asset graph of both tasks, every group expanded;
- sensor-run.png: the run page of the sensor's retraining, its tags open (the sensor's name);
- evaluation-metadata.png: the latest materialization of `model_evaluation`, its metadata.

The webserver is stopped and the folder removed at the end, also on error (`--keep` keeps it).

Needs the project's environment (`make setup`), Chromium from the distribution's packages
(`apt-get install chromium`), and Playwright's Python package, which drives that Chromium from
an environment of its own: created on first use under `$FLYWHEEL_HOME/screenshots/venv`
(`--browser-venv`), from the package registry. No browser is downloaded. The Label Studio
screenshots are tools/label_studio_screenshot.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Playwright is in the browser's environment only
    from playwright.sync_api import Locator, Page

REPO = Path(__file__).resolve().parents[1]
PLAYWRIGHT = "1.65.2"
# The smallest simulation with a sensor-launched retraining: held-out windows of two days let the
# first model train after six; the weather feed turns to Celsius on the eighth day, the drift
# sensor fires that day and its retraining evaluates and promotes a challenger.
# The ratings task: six months to its first model (enough labelled months to train, validate
# and test on), one scored month after it.
SIMULATIONS = {
    "flights": [
        *("run", "--start", "2013-09-02", "--days", "8", "--bootstrap-days", "6"),
        *("--drift", "celsius@2013-09-09", "--validation-days", "2", "--test-days", "2"),
        *("--trials", "1", "--max-epochs", "2", "--no-baselines", "--brief"),
    ],
    "movielens": [
        *("run", "--start", "1999-06-01", "--days", "7", "--bootstrap-days", "6"),
        *("--validation-days", "1", "--test-days", "1"),
        *("--trials", "1", "--max-epochs", "2", "--no-baselines", "--brief"),
    ],
}
EVALUATION_ASSET = "model_evaluation"
# The task whose runs and evaluation the run and evaluation pages show.
SHOWN_TASK = "flights"
SENSOR_TAG = "dagster/sensor_name"
LOCATION_QUERY = """{ workspaceOrError { __typename ... on Workspace { locationEntries {
  name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
RUNS_QUERY = """{ runsOrError(filter: {pipelineName: "retraining_job", statuses: [SUCCESS],
  tags: [{key: "flywheel/task", value: "%s"}]}, limit: 20) {
  __typename ... on Runs { results { runId tags { key value } } } } }"""
# Where the asset graph is drawn (scaled) and where its viewport starts, on the page.
GRAPH_BOX = """() => {
  const svg = document.querySelector('svg[class*=svgContainer]');
  const graph = svg.getBoundingClientRect();
  const viewport = svg.parentElement.parentElement.getBoundingClientRect();
  return {top: viewport.top, left: viewport.left, graphTop: graph.top, graphHeight: graph.height};
}"""


def chromium() -> str:
    """The installed Chromium's executable."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise SystemExit("no chromium on PATH: apt-get install chromium")
    return found


def browser_python(venv: Path) -> Path:
    """The Python of `venv`, with Playwright's package installed there first if it is not."""
    python, done = venv / "bin" / "python", venv / f".installed-playwright-{PLAYWRIGHT}"
    if done.exists():
        return python
    print(f"installing playwright=={PLAYWRIGHT} into {venv}", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    uv = Path(sys.executable).parent / "uv"
    if uv.exists():
        create = [str(uv), "venv", "--quiet", "--python", sys.executable, str(venv)]
        install = [str(uv), "pip", "install", "--quiet", "--python", str(python)]
    else:
        create = [sys.executable, "-m", "venv", str(venv)]
        install = [str(python), "-m", "pip", "install", "--quiet"]
    for command in (create, [*install, f"playwright=={PLAYWRIGHT}"]):
        if subprocess.run(command).returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise SystemExit(f"installing playwright into {venv} failed: {' '.join(command)}")
    done.touch()
    return python


def state_environment(home: Path) -> dict[str, str]:
    """This environment with a state of its own under `home` (the embedded defaults)."""
    from sim.driver.simulation import STATE_PATHS, own_state

    inherited = {k: v for k, v in os.environ.items() if k not in STATE_PATHS}
    return {**inherited, **own_state(home), "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}


def graphql(url: str, query: str) -> dict:
    """The `data` of a GraphQL query to the webserver at `url`."""
    request = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)["data"]


def location_loaded(url: str) -> bool:
    """Whether the webserver answers with its code location loaded; a load error exits."""
    from deploy.stack.processes import http_ok

    if not http_ok(f"{url}/server_info"):
        return False
    entries = graphql(url, LOCATION_QUERY)["workspaceOrError"].get("locationEntries") or []
    for entry in entries:
        error = entry["locationOrLoadError"] or {}
        if error.get("__typename") == "PythonError":
            raise SystemExit(f"code location {entry['name']} failed to load: {error['message']}")
    return bool(entries) and all(entry["loadStatus"] == "LOADED" for entry in entries)


@contextmanager
def webserver(env: dict[str, str], log: Path, timeout_s: float = 180.0) -> Iterator[str]:
    """`dagster-webserver` over the instance of `env` on a free port; its URL. It is stopped
    (with the code server it started) when the block ends, however it ends."""
    from deploy.stack.processes import free_port, tail

    url = f"http://127.0.0.1:{free_port()}"
    command = [str(Path(sys.executable).parent / "dagster-webserver"), "-w", "workspace.yaml"]
    command += ["-h", "127.0.0.1", "-p", url.rsplit(":", 1)[1]]
    with log.open("w") as out:
        server = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not location_loaded(url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"dagster-webserver did not start; its log:\n{tail(log)}")
            time.sleep(1)
        yield url
    finally:
        stop(server)


def stop(process: subprocess.Popen) -> None:
    """Stop `process` and its process group: SIGTERM, then SIGKILL after 20 s."""
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(wait_s)
            break
        except subprocess.TimeoutExpired:
            continue


def sensor_run(url: str) -> tuple[str, str]:
    """The newest successful retraining run a sensor launched: its id and the sensor's name."""
    for run in graphql(url, RUNS_QUERY % SHOWN_TASK)["runsOrError"].get("results") or []:
        tags = {tag["key"]: tag["value"] for tag in run["tags"]}
        if SENSOR_TAG in tags:
            return run["runId"], tags[SENSOR_TAG]
    raise SystemExit("the simulation left no retraining run launched by a sensor")


def shoot(url: str, run_id: str, sensor: str, out: str) -> None:
    """In Playwright's environment: the three screenshots of the UI at `url` into `out`."""
    from playwright.sync_api import sync_playwright

    folder = Path(out)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 900})
            # Answered once per browser: the community sign-up dialog; the navigation collapsed.
            context.add_init_script(
                "localStorage.setItem('communityNux', '\"1\"');"
                "localStorage.setItem('dagster-nav-collapsed', 'true');"
            )
            page = context.new_page()
            asset_graph(page, url, folder / "asset-graph.png")
            run_page(page, url, run_id, sensor, folder / "sensor-run.png")
            evaluation(page, url, folder / "evaluation-metadata.png")
        finally:
            browser.close()


def settle(page: Page, marker: Locator) -> None:
    """Wait for `marker` (a locator) to show and for no spinner to be left on the page."""
    marker.first.wait_for(state="visible", timeout=60_000)
    page.wait_for_function("!document.querySelector('[role=progressbar]')", timeout=60_000)
    page.wait_for_timeout(1_000)  # the graph's and dialogs' animations


def asset_graph(page: Page, url: str, path: Path) -> None:
    """The global asset graph without the asset sidebar, every group expanded."""
    width = 1920
    page.set_viewport_size({"width": width, "height": 1200})
    page.goto(f"{url}/asset-groups")
    settle(page, page.locator("svg[class*=svgContainer]"))
    page.locator("button:has([aria-label=panel_show_right])").click()  # hide the asset sidebar
    page.keyboard.press("Alt+e")  # the graph's shortcut: expand all groups
    settle(page, page.get_by_text(EVALUATION_ASSET, exact=True))
    # The graph is fitted to the width: the window takes its height below the toolbar, then a
    # double click on the background fits it again.
    toolbar = page.get_by_role("button", name="Materialize all").bounding_box()
    margin = toolbar["y"] + toolbar["height"] + 32
    # Fitting again in a taller window scales the graph again: a few rounds until it holds.
    for _ in range(4):
        box = page.evaluate(GRAPH_BOX)
        height = int(box["top"] + box["graphHeight"] + 2 * (margin - box["top"])) + 1
        page.set_viewport_size({"width": width, "height": height})
        page.mouse.dblclick(box["left"] + 8, height - 8)
        page.wait_for_timeout(1_500)
        box = page.evaluate(GRAPH_BOX)
        if box["graphTop"] >= margin - 12 and box["graphTop"] + box["graphHeight"] <= height:
            break
    else:
        raise RuntimeError(f"the asset graph does not fit the window: {box}")
    page.screenshot(path=str(path))


def run_page(page: Page, url: str, run_id: str, sensor: str, path: Path) -> None:
    """The run's page with its tags and config open: the sensor that launched it."""
    page.set_viewport_size({"width": 1600, "height": 720})  # the dialog's height follows it
    page.goto(f"{url}/runs/{run_id}")
    settle(page, page.get_by_text("RUN_SUCCESS", exact=True))
    page.get_by_role("button", name="View tags and config").click()
    settle(page, page.get_by_role("dialog").get_by_text(sensor, exact=True))
    page.screenshot(path=str(path))


def evaluation(page: Page, url: str, path: Path) -> None:
    """The evaluation asset's newest materialization and all of its metadata."""
    page.set_viewport_size({"width": 1600, "height": 900})
    page.goto(f"{url}/assets/{SHOWN_TASK}/{EVALUATION_ASSET}?view=events")
    settle(page, page.get_by_text("Materialized in run"))
    # The metadata scrolls in its panel: the window grows by what is hidden.
    hidden = page.evaluate(
        """() => Math.max(0, ...Array.from(document.querySelectorAll('*'))
          .filter(e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowY))
          .map(e => e.scrollHeight - e.clientHeight))"""
    )
    page.set_viewport_size({"width": 1600, "height": 900 + min(hidden, 1600)})
    page.wait_for_timeout(500)
    page.screenshot(path=str(path))


def play_and_shoot(state: Path, python: Path, out: Path) -> None:
    """Play the simulations under `state`, serve their instance and take the screenshots."""
    env = state_environment(state / "home")
    for task, simulation in SIMULATIONS.items():
        # Each task's world and pipeline state of its own, one Dagster instance for both.
        own = {**state_environment(state / task), "DAGSTER_HOME": env["DAGSTER_HOME"]}
        print(f"playing the {task} simulation under {state / task}", flush=True)
        command = [sys.executable, "-m", "sim", *simulation]
        if subprocess.run(command, cwd=REPO, env={**own, "FLYWHEEL_TASK": task}).returncode:
            raise SystemExit(f"the {task} simulation failed (its output is above)")
    with webserver(env, state / "webserver.log") as url:
        run_id, sensor = sensor_run(url)
        print(f"webserver {url}: shooting run {run_id} of {sensor}", flush=True)
        shot = "import sys; from tools.screenshots import shoot; shoot(*sys.argv[1:])"
        command = [str(python), "-c", shot, url, run_id, sensor, str(out)]
        if subprocess.run(command, cwd=REPO).returncode:
            raise SystemExit("taking the screenshots failed (the browser's error is above)")


def browser_arguments(description: str) -> argparse.ArgumentParser:
    """The options every screenshot tool takes: where the images go, Playwright's environment."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--out", type=Path, default=REPO / "docs" / "images", help="default: docs/images"
    )
    parser.add_argument(
        "--browser-venv",
        type=Path,
        help="Playwright's environment (default: $FLYWHEEL_HOME/screenshots/venv)",
    )
    return parser


def main() -> None:
    parser = browser_arguments(__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary state folder")
    args = parser.parse_args()
    from pipelines.resources import flywheel_home

    chromium()
    python = browser_python(args.browser_venv or flywheel_home() / "screenshots" / "venv")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    state = Path(tempfile.mkdtemp(prefix="flywheel-screenshots-"))
    try:
        play_and_shoot(state, python, out)
    finally:
        if args.keep:
            print(f"kept {state}")
        else:
            shutil.rmtree(state, ignore_errors=True)
    names = "asset-graph.png, sensor-run.png and evaluation-metadata.png"
    print(f"saved {names} in {out} ({time.monotonic() - began:.0f} s)")


if __name__ == "__main__":
    main()
