"""Screenshots of the flywheel's Label Studio project as a person sees it (headless Chromium).

Needs Chromium from the distribution's packages (`apt-get install chromium`) and Playwright's
Python package in an environment of its own (it drives the installed Chromium; no browser is
downloaded):

    python3 -m venv /tmp/shots && /tmp/shots/bin/pip install playwright
    /tmp/shots/bin/python tools/label_studio_screenshot.py \\
        --credentials $FLYWHEEL_HOME/label-studio/credentials.json --out docs/images

It logs in as the local server's admin, then saves the project's task list (`<out>/
label-studio-tasks.png`) and one task open with the model's pre-annotation
(`<out>/label-studio-task.png`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import urllib.parse
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright


def api(url: str, token: str, path: str) -> object:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Token {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--credentials", type=Path, required=True)
    parser.add_argument("--project", default="flywheel-flights")
    parser.add_argument("--out", type=Path, default=Path("docs") / "images")
    args = parser.parse_args()
    creds = json.loads(args.credentials.read_text())
    url, token = creds["url"], creds["token"]
    projects = api(url, token, f"/api/projects?title={args.project}")["results"]
    project = next(p["id"] for p in projects if p["title"] == args.project)
    # A task waiting for its annotator, pre-annotated by the champion: what the annotator sees.
    query = {
        "filters": {
            "conjunction": "and",
            "items": [
                {"filter": f"filter:tasks:{name}", "operator": op, "type": "Number", "value": 0}
                for name, op in (("total_annotations", "equal"), ("total_predictions", "greater"))
            ],
        }
    }
    path = f"/api/tasks?project={project}&page_size=1&fields=all&query="
    waiting = api(url, token, path + urllib.parse.quote(json.dumps(query)))["tasks"]
    if not waiting:
        raise SystemExit(f"project {args.project!r} has no pre-annotated task waiting for labels")
    args.out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{url}/user/login/")
        page.fill("input[name=email]", creds["username"])
        page.fill("input[name=password]", creds["password"])
        page.click("button[type=submit]")
        page.wait_for_url(lambda u: "/login" not in u, timeout=60_000)
        page.goto(f"{url}/projects/{project}/data")
        page.wait_for_timeout(6_000)
        page.screenshot(path=str(args.out / "label-studio-tasks.png"))
        page.goto(f"{url}/projects/{project}/data?task={waiting[0]['id']}")
        page.wait_for_timeout(8_000)
        page.screenshot(path=str(args.out / "label-studio-task.png"))
        browser.close()
    print(f"saved {args.out / 'label-studio-tasks.png'} and {args.out / 'label-studio-task.png'}")


if __name__ == "__main__":
    main()
