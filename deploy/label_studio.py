"""A local Label Studio for the labeling loop: installed into its own environment, started on
127.0.0.1 with a generated admin and API token, stopped.

Everything lives under `$FLYWHEEL_HOME/label-studio/`: `venv/` (Label Studio and its own pins,
never the project's environment), `data/` (its SQLite database and media), `credentials.json`
(URL, admin e-mail and password, API token; mode 0600), `server.pid` and `server.log`.

The token is a legacy API token, which Label Studio 1.23 refuses unless legacy tokens are enabled:
the server is started with `--enable-legacy-api-token`, Label Studio's own switch for it. A
production server can keep them off and give the pipeline a personal access token instead
(FLYWHEEL_LABEL_STUDIO_TOKEN takes either; see pipelines/lib/label_studio_api.py).

The admin's password and the token reach the server in its environment, not on its command
line, which every user of the machine can read (`ps`).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

VERSION = "1.23.2"
ADMIN = "admin@flywheel.local"
DEFAULT_PORT = 8080
START_TIMEOUT_S = 300.0


class LabelStudioServerError(RuntimeError):
    """The local Label Studio could not be installed, started or reached."""


@dataclass(frozen=True)
class Credentials:
    url: str
    username: str
    password: str
    token: str

    def environment(self) -> dict[str, str]:
        """The settings that point the pipeline at this server."""
        return {
            "FLYWHEEL_LABELING": "label-studio",
            "FLYWHEEL_LABEL_STUDIO_URL": self.url,
            "FLYWHEEL_LABEL_STUDIO_TOKEN": self.token,
        }


class LocalLabelStudio:
    """Label Studio under `home` (default `$FLYWHEEL_HOME/label-studio`)."""

    def __init__(self, home: Path, port: int = DEFAULT_PORT, venv: Path | None = None):
        self.home, self.port = home, port
        # A virtual environment may be shared by several servers (the tests' servers share one).
        self.venv, self.data = venv or home / "venv", home / "data"
        self.credentials_file, self.pid_file = home / "credentials.json", home / "server.pid"
        self.log = home / "server.log"

    @property
    def executable(self) -> Path:
        return self.venv / "bin" / "label-studio"

    def installed(self) -> bool:
        # Written once the install finished: an install killed half-way is redone.
        return (self.venv / f".installed-{VERSION}").exists()

    def install(self) -> None:
        """Label Studio into its own virtual environment (uv when there is one, else pip)."""
        if self.installed():
            return
        shutil.rmtree(self.venv, ignore_errors=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self.venv.parent.mkdir(parents=True, exist_ok=True)
        uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
        log = self.home / "install.log"
        if Path(uv).exists():
            commands = [
                [uv, "venv", "--quiet", "--python", sys.executable, str(self.venv)],
                [
                    uv,
                    "pip",
                    "install",
                    "--quiet",
                    "--python",
                    str(self.venv / "bin" / "python"),
                    f"label-studio=={VERSION}",
                ],
            ]
        else:
            commands = [
                [sys.executable, "-m", "venv", str(self.venv)],
                [str(self.venv / "bin" / "pip"), "install", "--quiet", f"label-studio=={VERSION}"],
            ]
        with log.open("w") as out:
            for command in commands:
                done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
                if done.returncode != 0:
                    shutil.rmtree(self.venv, ignore_errors=True)
                    raise LabelStudioServerError(
                        f"installing label-studio=={VERSION} failed ({' '.join(command[:3])}... "
                        f"exited {done.returncode}); its output is in {log}"
                    )
        (self.venv / f".installed-{VERSION}").touch()

    def credentials(self) -> Credentials:
        """This server's admin and token, generated once and kept in credentials.json."""
        if self.credentials_file.exists():
            saved = json.loads(self.credentials_file.read_text())
            return Credentials(**{**saved, "url": self.url})
        self.home.mkdir(parents=True, exist_ok=True)
        made = Credentials(self.url, ADMIN, secrets.token_urlsafe(18), secrets.token_hex(20))
        tmp = self.credentials_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(made.__dict__, indent=2) + "\n")
        tmp.chmod(0o600)
        tmp.replace(self.credentials_file)
        return made

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        """The server's process id, if it runs."""
        try:
            pid = int(self.pid_file.read_text())
            # _alive reaps an exited child of this process: its zombie's pid still answers.
            return pid if _alive(pid) else None
        except (FileNotFoundError, ValueError, PermissionError):
            return None

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.url}/health", timeout=2).ok
        except requests.RequestException:
            return False

    def start(self, timeout_s: float = START_TIMEOUT_S) -> Credentials:
        """Install if needed, start on 127.0.0.1 unless it runs, wait until its API answers.

        A server found running that exits before it answers (one killed a moment ago, still
        dying) is started afresh once; one this call started that exits is an error."""
        self.install()
        creds = self.credentials()
        deadline = time.monotonic() + timeout_s
        launched = False
        while True:
            if self.pid() is None:
                self._launch(creds)
                launched = True
            if self._wait(creds, deadline, timeout_s):
                return creds
            if launched:
                raise LabelStudioServerError(
                    f"Label Studio exited while starting; its log: {self.log}\n{self._log_tail()}"
                )

    def _launch(self, creds: Credentials) -> None:
        if self.healthy():
            raise LabelStudioServerError(
                f"something else already answers on {self.url}: stop it or pick another port"
            )
        self.data.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self.admin_environment(creds),
            "LABEL_STUDIO_BASE_DATA_DIR": str(self.data),
        }
        with self.log.open("ab") as out:
            process = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.pid_file.write_text(str(process.pid))

    def command(self) -> list[str]:
        """The `label-studio start` command line: no credential, see `admin_environment`."""
        return [
            str(self.executable), "start", "--no-browser",
            "--internal-host", "127.0.0.1", "--port", str(self.port),
            "--data-dir", str(self.data), "--enable-legacy-api-token",
            "--log-level", "WARNING",
        ]  # fmt: skip

    @staticmethod
    def admin_environment(creds: Credentials) -> dict[str, str]:
        """The admin and token, where `label-studio start` reads them when no option gives them
        (its `get_env`: `LABEL_STUDIO_<NAME>`) and creates the admin with that token. Unlike
        options, variables are read by their owner (and root) alone, and a password beginning
        with "-" cannot be taken for an option."""
        return {
            "LABEL_STUDIO_USERNAME": creds.username,
            "LABEL_STUDIO_PASSWORD": creds.password,
            "LABEL_STUDIO_USER_TOKEN": creds.token,
        }

    def _wait(self, creds: Credentials, deadline: float, timeout_s: float) -> bool:
        """True once the API answers with the token; False if the process exited first."""
        while time.monotonic() < deadline:
            if self.pid() is None:
                return False
            if self.healthy():
                answer = requests.get(
                    f"{self.url}/api/projects",
                    headers={"Authorization": f"Token {creds.token}"},
                    timeout=10,
                )
                if answer.ok:
                    return True
                raise LabelStudioServerError(
                    f"Label Studio at {self.url} refuses the token in {self.credentials_file} "
                    f"(HTTP {answer.status_code}): was its data folder made with other "
                    f"credentials? Stop it and remove {self.data} to start afresh"
                )
            time.sleep(1)
        raise LabelStudioServerError(
            f"Label Studio did not answer on {self.url} within {timeout_s:.0f} s; its log: "
            f"{self.log}\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the server (its whole process group); False if it was not running."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.2)
            if not _alive(pid):
                break
        self.pid_file.unlink(missing_ok=True)
        return True


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
