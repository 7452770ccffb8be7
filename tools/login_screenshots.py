"""The stack's Dagster UI opened through its login in a headless browser: as nobody, as a viewer
and as an operator, each checked, and saved as screenshots for the docs.

    make stack-up
    .venv/bin/python -m tools.login_screenshots --out docs/images

Against the running stack under $FLYWHEEL_HOME (its stack.env), it adds a viewer identity
(`python -m deploy.stack add-user`), then opens the UI in Chromium (Playwright, as
tools/screenshots.py does; the stack's certificate pinned by its public key, nothing else
trusted) and saves, in `--out`:

- login-viewer.png: `retraining_job` as the viewer: its launchpad's address leads to the job's
  page, whose Materialize all button is disabled;
- login-operator.png: the run the operator launched by clicking that button, its page.

It exits non-zero when anything differs: a page answered without credentials (it must be 401),
a viewer able to launch, an operator unable to. The operator's run is a real retraining run on
that stack: on a stack with no data it fails at its first step, which is no concern here.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from pathlib import Path

from tools.screenshots import REPO, browser_arguments, browser_python, chromium

JOB = "retraining_job"
VIEWER = "viewer-screenshots"


def pinned_key(certificate: Path) -> str:
    """The base64 SHA-256 of `certificate`'s public key, as Chromium's SPKI allow-list takes it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    key = x509.load_pem_x509_certificate(certificate.read_bytes()).public_key()
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def shoot(url: str, pin: str, out: str) -> None:
    """In Playwright's environment: the checks and screenshots of the module, the operator's
    and the viewer's USER:PASSWORD read as two lines from stdin, not the command line."""
    from playwright.sync_api import Error, sync_playwright

    operator, viewer = sys.stdin.read().splitlines()[:2]
    launchpad = f"{url}/locations/flywheel/jobs/{JOB}/playground"
    folder = Path(out)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium(),
            args=["--no-sandbox", f"--ignore-certificate-errors-spki-list={pin}"],
        )
        try:

            def page_as(identity: str | None):
                credentials = None
                if identity:
                    user, password = identity.split(":", 1)
                    credentials = {"username": user, "password": password}
                context = browser.new_context(
                    viewport={"width": 1400, "height": 800}, http_credentials=credentials
                )
                context.add_init_script("localStorage.setItem('communityNux', '\"1\"');")
                return context.new_page()

            # Chromium gives up on a page that asks for credentials it was not given.
            try:
                answer = page_as(None).goto(url)
                status = answer.status if answer else None
            except Error as error:
                status = 401 if "ERR_INVALID_AUTH_CREDENTIALS" in str(error) else str(error)
            if status != 401:
                raise SystemExit(f"the UI answered {status} to nobody, not 401")
            print("nobody: 401", flush=True)
            page = page_as(viewer)
            page.goto(launchpad)  # the viewer's UI has no launchpad: it shows the job instead
            page.wait_for_url(f"**/jobs/{JOB}", timeout=60_000)
            button = page.locator("button", has_text="Materialize all").last
            button.wait_for(state="visible", timeout=120_000)
            page.wait_for_timeout(1_500)
            if button.is_enabled():
                raise SystemExit("the viewer's Materialize all button is enabled")
            page.screenshot(path=str(folder / "login-viewer.png"))
            print("viewer: no launchpad, the job's Materialize all button disabled", flush=True)

            page = page_as(operator)
            page.goto(launchpad)
            button = page.locator("button", has_text="Launch Run").last
            button.wait_for(state="visible", timeout=120_000)
            page.wait_for_timeout(1_500)
            button.click()
            page.wait_for_url("**/runs/*", timeout=60_000)
            page.get_by_text(JOB).first.wait_for(state="visible", timeout=60_000)
            page.wait_for_timeout(3_000)
            page.screenshot(path=str(folder / "login-operator.png"))
            print(f"operator: launched run {page.url.rsplit('/', 1)[1]}", flush=True)
        finally:
            browser.close()


def main() -> None:
    args = browser_arguments(__doc__.splitlines()[0]).parse_args()
    from deploy.stack.stack import Stack
    from pipelines.resources import flywheel_home

    stack = Stack.of_home(flywheel_home())
    if not stack.supervisor.alive():
        raise SystemExit(f"no stack runs under {flywheel_home()}: make stack-up first")
    chromium()
    python = browser_python(args.browser_venv or flywheel_home() / "screenshots" / "venv")
    env = stack.environment()
    operator = f"{env['FLYWHEEL_DAGSTER_USER']}:{env['FLYWHEEL_DAGSTER_PASSWORD']}"
    viewer = f"{VIEWER}:{stack.add_user(VIEWER, 'viewer')}"
    args.out.mkdir(parents=True, exist_ok=True)
    shot = "import sys; from tools.login_screenshots import shoot; shoot(*sys.argv[1:])"
    pin = pinned_key(stack.certificates.certificate)
    command = [str(python), "-c", shot, env["FLYWHEEL_DAGSTER_URL"], pin, str(args.out.resolve())]
    done = subprocess.run(command, cwd=REPO, input=f"{operator}\n{viewer}\n", text=True)
    if done.returncode:
        raise SystemExit("the login's checks failed (the browser's error is above)")
    print(f"saved login-viewer.png and login-operator.png in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
