"""The Dagster UI behind a login: the distribution's nginx in front of two webservers.

Whoever reaches the UI of a full webserver can launch any job, and a run holds every secret the
code location has. So on the stack no webserver listens where other machines reach it: the
operators' (full) one and the viewers' (`--read-only`: no launch, no sensor toggle, no
re-execution) listen on the loopback, and nginx, on the stack's address over HTTPS, asks every
request for a user and password (HTTP basic authentication, checked against `htpasswd`) and
sends it to the webserver of that user's role. Whoever has no identity gets 401, and a viewer's
launch is refused by the read-only webserver.

Identities are kept in `users.json` (readable by the stack's owner only): the stack's own
client, `operator` (the daemon-driven simulation submits runs and turns sensors on with it; its
password is FLYWHEEL_DAGSTER_PASSWORD in stack.env), and whoever `python -m deploy.stack add-user
NAME --role viewer|operator` added. nginx holds their password hashes only (SHA-512 crypt).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from deploy.stack import postgres, tls
from deploy.stack.processes import StackError, http_ok, write_atomically
from deploy.stack.supervisor import Service

PACKAGE = "nginx-light"
ROLES = ("viewer", "operator")
# The stack's own client of the UI: the daemon-driven simulation, an operator.
CLIENT = "operator"
# An identity's name: what nginx's user file and its map can hold as they are.
NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-.")


def binary() -> Path:
    """`nginx`: /usr/sbin's or PATH's, installed from the distribution's packages when missing
    and running as root."""
    return postgres.installed(PACKAGE, _find, "nginx (no nginx in /usr/sbin or on PATH)")


def _find() -> Path | None:
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    return Path(found) if found else None


def password_hash(password: str) -> str:
    """`password` as SHA-512 crypt (`openssl passwd -6`), which nginx checks with the system's
    crypt()."""
    done = subprocess.run(
        ["openssl", "passwd", "-6", "-stdin"],
        input=password,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise StackError(f"`openssl passwd -6` failed: {done.stderr.strip()}")
    return done.stdout.strip()


def users(folder: Path) -> dict[str, dict[str, str]]:
    """The identities of the proxy in `folder`: name -> {"role", "hash"}."""
    path = folder / "users.json"
    return json.loads(path.read_text()) if path.exists() else {}


def add_user(folder: Path, name: str, role: str, password: str) -> None:
    """Keep identity `name` with `role` and `password` (replacing one of that name)."""
    if role not in ROLES:
        raise StackError(f"role {role!r} is not one of {', '.join(ROLES)}")
    if not name or not set(name) <= NAME_CHARACTERS:
        raise StackError(
            f"user name {name!r}: use lower-case letters, digits, '_', '-' and '.' only"
        )
    kept = users(folder)
    kept[name] = {"role": role, "hash": password_hash(password)}
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(folder / "users.json", json.dumps(kept, indent=2), mode=0o600)


def ensure_client(folder: Path, password: str) -> None:
    """The stack's own client (`CLIENT`, an operator) with `password`, unless it is kept."""
    if CLIENT not in users(folder):
        add_user(folder, CLIENT, "operator", password)


def configure(
    folder: Path, host: str, ports: dict[str, int], certificates: tls.Certificates, log: Path
) -> Path:
    """Write nginx's configuration under `folder` (HTTPS on `host` at `ports`' `ui`, every
    request authenticated and sent to the loopback port of its user's role: `webserver` for
    operators, `webserver_viewer` for viewers), installing nginx first where it is missing;
    the path of the configuration file."""
    binary()
    webservers = {"operator": ports["webserver"], "viewer": ports["webserver_viewer"]}
    kept = users(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tmp").mkdir(exist_ok=True)
    postgres.give_to_server_user(folder / "tmp")
    hashes = "".join(f"{name}:{user['hash']}\n" for name, user in sorted(kept.items()))
    write_atomically(folder / "htpasswd", hashes, mode=0o600)
    postgres.give_to_server_user(folder / "htpasswd")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    postgres.give_to_server_user(log)  # nginx runs as that user
    roles = "".join(
        f"        {name} 127.0.0.1:{webservers[user['role']]};\n"
        for name, user in sorted(kept.items())
    )
    temporary = "".join(
        f"    {kind}_temp_path {folder / 'tmp' / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    config = folder / "nginx.conf"
    write_atomically(
        config,
        "# Written by `python -m deploy.stack up` (deploy/stack/proxy.py); rewritten at each up.\n"
        "worker_processes 1;\n"
        f"pid {folder / 'tmp' / 'nginx.pid'};\n"
        "error_log stderr warn;\n"
        "events { worker_connections 512; }\n"
        "http {\n"
        f"    access_log {log};\n"
        f"{temporary}"
        "    # The webserver of the authenticated user's role; nobody else gets past the login.\n"
        "    map $remote_user $webserver {\n"
        f"        default 127.0.0.1:{webservers['viewer']};\n"
        f"{roles}"
        "    }\n"
        "    map $http_upgrade $connection_upgrade { default upgrade; '' close; }\n"
        "    server {\n"
        f"        listen {host}:{ports['ui']} ssl;\n"
        f"        ssl_certificate {certificates.certificate};\n"
        f"        ssl_certificate_key {certificates.key};\n"
        "        ssl_protocols TLSv1.2 TLSv1.3;\n"
        '        auth_basic "flywheel";\n'
        f"        auth_basic_user_file {folder / 'htpasswd'};\n"
        "        client_max_body_size 16m;\n"
        "        location / {\n"
        "            proxy_pass http://$webserver;\n"
        "            proxy_http_version 1.1;\n"
        "            # The UI's live updates are a WebSocket.\n"
        "            proxy_set_header Upgrade $http_upgrade;\n"
        "            proxy_set_header Connection $connection_upgrade;\n"
        "            proxy_set_header Host $http_host;\n"
        "            proxy_set_header X-Forwarded-Proto https;\n"
        "            proxy_set_header X-Forwarded-User $remote_user;\n"
        "            # The password stops here.\n"
        '            proxy_set_header Authorization "";\n'
        "            proxy_read_timeout 1h;\n"
        "        }\n"
        "    }\n"
        "}\n",
        mode=0o600,
    )
    postgres.give_to_server_user(config)
    return config


def command(config: Path) -> list[str]:
    """nginx in the foreground (supervisord runs it), its errors on stderr."""
    return [str(binary()), "-c", str(config), "-e", "stderr", "-g", "daemon off;"]


def services(
    bin_dir: Path,
    workspace: Path,
    ports: dict[str, int],
    config: Path,
    url: str,
    auth: tuple[str, str],
    authority: Path,
    webserver_env: dict[str, str],
) -> dict[str, Service]:
    """The operators' webserver, the viewers' read-only one (both on the loopback, at `ports`'
    `webserver` and `webserver_viewer`, each with `webserver_env` as its own variables) and
    nginx in front of them (`config`, answering at `url` to `auth`, its certificate checked
    against `authority`)."""

    def webserver(name: str, *read_only: str) -> Service:
        local = f"http://127.0.0.1:{ports[name]}"
        return Service(
            name,
            [
                *[str(bin_dir / "dagster-webserver"), "-w", str(workspace), *read_only],
                *["-h", "127.0.0.1", "-p", str(ports[name])],
            ],
            lambda: http_ok(f"{local}/server_info"),
            env=webserver_env,
        )

    return {
        "webserver": webserver("webserver"),
        "webserver_viewer": webserver("webserver_viewer", "--read-only"),
        "proxy": Service(
            "proxy",
            command(config),
            lambda: http_ok(f"{url}/server_info", authority, auth),
            user=postgres.SERVER_USER,
        ),
    }
