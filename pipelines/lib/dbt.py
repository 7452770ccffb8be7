"""The dbt project as Dagster sees it, and how its nodes map to asset keys and groups."""

from __future__ import annotations

import io
import itertools
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date
from functools import cached_property
from importlib.metadata import version as installed_version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dagster import AssetKey
from dagster_dbt import (
    DagsterDbtTranslator,
    DagsterDbtTranslatorSettings,
    DbtCliInvocation,
    DbtCliResource,
    DbtProject,
)
from packaging.version import Version

from pipelines.lib.runs import record_child_process
from pipelines.settings import (
    DBT_KEEP_TARGETS,
    Setting,
    dbt_password,
    environment_of,
    warehouse_path,
)

DBT_PROJECT_DIR = Path(__file__).resolve().parents[2] / "dbt_project"

dbt_project = DbtProject(project_dir=DBT_PROJECT_DIR, profiles_dir=DBT_PROJECT_DIR)


def dbt_executable() -> str:
    """The dbt of this interpreter's environment (which need not be on PATH), else PATH's."""
    for folder in (Path(sys.prefix) / "bin", Path(sys.executable).parent):
        if (folder / "dbt").exists():
            return str(folder / "dbt")
    return shutil.which("dbt") or "dbt"


class FlywheelDbtTranslator(DagsterDbtTranslator):
    """dbt models land in the `warehouse` group under the task's key prefix (a source's key, the
    raw table's asset, too); tests become asset checks (errors block)."""

    def __init__(self, task_name: str) -> None:
        super().__init__(settings=DagsterDbtTranslatorSettings(enable_asset_checks=True))
        self.task_name = task_name

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> AssetKey:
        return super().get_asset_key(dbt_resource_props).with_prefix(self.task_name)

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        if dbt_resource_props["resource_type"] == "source":
            return super().get_group_name(dbt_resource_props)
        return "warehouse"


class FlywheelDbtCliResource(DbtCliResource):
    """DbtCliResource without the seconds each run spends before dbt starts.

    DbtCliResource runs `dbt --version` once per resource instance, i.e. once per run, and builds
    a dbt adapter in the run's process before each command (importing dbt-core there) only to
    fetch row counts or column metadata, which these assets do not ask for.

    When `dbt_executable` is this environment's dbt, commands run in this process (dbt's
    programmatic `dbtRunner`) on a manifest parsed once per process: a command then costs its
    SQL, not a Python start, dbt's imports and a parse (most of a daily build's time when dbt
    ran as a command). Its events reach Dagster exactly as the CLI's JSON log lines do. Another
    dbt runs as a subprocess.
    """

    def cli(self, args: Sequence[str], **kwargs: Any) -> DbtCliInvocation:
        """As DbtCliResource.cli; in this process when the dbt is this environment's. dbt's
        password (`dbt_password`) reaches dbt as `DBT_ENV_SECRET_WAREHOUSE_PASSWORD`, the name
        the profile reads it by: dbt scrubs the values of its `DBT_ENV_SECRET_` variables from
        its logs and errors."""
        seed_parse_state(Path(self.project_dir))
        # DbtCliResource.cli copies os.environ for the dbt it starts before returning.
        with _environ_lock, _environ({SECRET_PASSWORD: dbt_password()}):
            if Path(self.dbt_executable).parent not in _environment_bin_folders():
                return super().cli(args, **kwargs)
            with _dbt_in_process():
                return super().cli(args, **kwargs)

    @cached_property
    def _cli_version(self) -> Version:
        # The dbt of this interpreter's environment is the installed dbt-core.
        if Path(self.dbt_executable).parent in _environment_bin_folders():
            return Version(installed_version("dbt-core"))
        return super()._cli_version

    def _initialize_dbt_core_adapter(self, args: Sequence[str]) -> Any:
        return None


def _environment_bin_folders() -> set[Path]:
    return {Path(sys.prefix) / "bin", Path(sys.executable).parent}


class InProcessDbt:
    """A dbt command run to its end in this process, as the finished `subprocess.Popen` of the
    dbt CLI that DbtCliInvocation reads: `args`, `returncode`, and `stdout` holding the JSON log
    lines the CLI would print (info level and above; an exception dbt raised becomes an error
    line)."""

    pid = None  # nothing outlives the run's process

    def __init__(self, args: Sequence[str], env: Mapping[str, str], cwd: Any = None, **_: Any):
        from dbt.cli.main import dbtRunner
        from dbt_common.events.functions import msg_to_dict

        self.args = list(args)
        events: list[Any] = []

        # The environment is the command's (the date window, the target folder). dbt's console
        # and file logs are off: every event comes back through the callback, and dbt.log is
        # written from them where it outlives the command (`_write_debug_log`). dbt wrote it line
        # by line, under a lock its threads share, into a folder then removed.
        quiet = {"DBT_LOG_LEVEL": "none", "DBT_LOG_LEVEL_FILE": "none"}
        with _environ_lock, _environ({**env, **quiet}), _cwd(cwd):
            try:
                manifest = _manifest(self.args[1:])
                result = dbtRunner(manifest=manifest, callbacks=[events.append]).invoke(
                    self.args[1:]
                )
            finally:
                _release_connections()
        # What the CLI prints at its default log level: its debug events go to dbt.log only
        # (dagster-dbt echoes every line it reads to standard output).
        lines = [_json(msg_to_dict(event)) for event in events if event.info.level != "debug"]
        if result.exception is not None:
            error = {"info": {"level": "error", "msg": f"{result.exception}", "name": "Error"}}
            lines.append(_json(error | {"data": {}}))
        self.returncode = 0 if result.success else 2 if result.exception is not None else 1
        self.stdout = io.BytesIO(b"\n".join(lines))
        if self.returncode != 0 or DBT_KEEP_TARGETS.get():
            log_folder = Path(cwd or ".", env.get("DBT_LOG_PATH") or "logs")
            _write_debug_log(log_folder / "dbt.log", events, env)

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

    def poll(self) -> int:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Nothing to signal: the command has finished."""


CACHE_EVENTS = ("CacheAction", "CacheDumpGraph")  # dbt logs them only with --log-cache-events


def _write_debug_log(path: Path, events: Sequence[Any], env: Mapping[str, str]) -> None:
    """dbt.log as dbt writes it with `--log-format json` at the debug level: one JSON line per
    event, its cache events left out, the values of the command's DBT_ENV_SECRET_ variables
    scrubbed."""
    import json

    from dbt.events.logging import _NOFILE_CODES
    from dbt_common.constants import SECRET_ENV_PREFIX
    from dbt_common.events.functions import msg_to_dict
    from dbt_common.exceptions.base import scrub_secrets
    from dbt_common.utils.encoding import ForgivingJSONEncoder

    secrets = [v for k, v in env.items() if k.startswith(SECRET_ENV_PREFIX) and v.strip()]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        for event in events:
            if event.info.code in _NOFILE_CODES or event.info.name in CACHE_EVENTS:
                continue
            line = json.dumps(msg_to_dict(event), sort_keys=True, cls=ForgivingJSONEncoder)
            log.write(scrub_secrets(line, secrets) + "\n")


def _json(event: Mapping[str, Any]) -> bytes:
    import orjson

    return orjson.dumps(event, default=str)


# Manifests parsed in this process, by project folder and parse arguments; a new parse of the
# project (its target/manifest.json rewritten, as `dagster dev` and `make setup` do) replaces it.
_manifests: dict[tuple, Any] = {}
# The environment variables dbt_project/profiles.yml reads: a parse is kept for their values.
PROFILE_SETTINGS = frozenset(
    {
        "FLYWHEEL_HOME",
        "FLYWHEEL_WAREHOUSE_PATH",
        *(f"FLYWHEEL_WAREHOUSE_{n}" for n in ("HOST", "PORT", "USER", "PASSWORD", "DATABASE")),
        "FLYWHEEL_DBT_THREADS",
        "FLYWHEEL_DBT_USER",
    }
)
# The variable dbt_project/profiles.yml reads dbt's password from (FLYWHEEL_DBT_PASSWORD's or
# FLYWHEEL_WAREHOUSE_PASSWORD's value): dbt scrubs the values of variables with this prefix from
# what it writes.
SECRET_PASSWORD = "DBT_ENV_SECRET_WAREHOUSE_PASSWORD"
# Options of a command that change what a parse produces.
_PARSE_OPTIONS = ("--target", "-t", "--profile", "--vars", "--profiles-dir", "--project-dir")


def parse_profile() -> tuple[tuple[str, str], ...]:
    """The profile settings in the environment that a parse of the project depends on.

    A parse bakes the target's database into every relation. For DuckDB that is the warehouse
    file's name without its suffix, not its folder: a parse for one state folder names the
    relations of any other (tests/dbt/test_dbt_project.py builds two on one parse), so a process
    that builds several (a test worker) parses once, not once a folder. dbt's own partial-parse
    check compares the whole profile, so its saved state still serves only the folder it was
    saved for.
    """
    values = environment_of(PROFILE_SETTINGS)
    values.pop("FLYWHEEL_HOME", None)
    values["FLYWHEEL_WAREHOUSE_PATH"] = Path(warehouse_path()).stem
    return tuple(sorted(values.items()))


def _manifest(args: Sequence[str]) -> Any:
    from dbt.cli.main import dbtRunner

    options = []
    for flag, value in itertools.pairwise(args):
        if flag in _PARSE_OPTIONS:
            options += [flag, value]
    project = Path(Setting("DBT_PROJECT_DIR", ".").value())
    parsed = project / "target" / "manifest.json"
    key = (
        str(project.resolve()),
        tuple(options),
        parse_profile(),
        parsed.stat().st_mtime if parsed.exists() else 0,
    )
    if key not in _manifests:
        result = dbtRunner().invoke(["parse", *options])
        if not result.success:
            raise RuntimeError(f"dbt could not parse the project {project}: {result.exception}")
        _manifests.clear()
        _manifests[key] = result.result
    return _manifests[key]


def _release_connections() -> None:
    """Close what the dbt command left open: dbt-duckdb keeps the database file open (and
    locked against every other process) after a command, until the interpreter exits."""
    from dbt.adapters.factory import cleanup_connections

    cleanup_connections()
    try:
        from dbt.adapters.duckdb.connections import DuckDBConnectionManager
    except ImportError:
        return
    # dbt-duckdb's `close_all_connections` drops its environment without closing it.
    with DuckDBConnectionManager._LOCK:
        if DuckDBConnectionManager._ENV is not None:
            DuckDBConnectionManager._ENV.close()
        DuckDBConnectionManager._ENV = None


@contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """`values` set in os.environ inside; the environment as it was restored after (hold
    `_environ_lock`)."""
    previous = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(previous)


@contextmanager
def _cwd(folder: Any) -> Iterator[None]:
    previous = os.getcwd()
    if folder is not None:
        os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


@contextmanager
def _dbt_in_process() -> Iterator[None]:
    """DbtCliResource.cli with its dbt process replaced by `InProcessDbt`."""
    # dagster-dbt starts dbt with `subprocess.Popen` in this module and reads only the process's
    # `args`, `stdout`, `wait()` and `send_signal()`; there is no other way in.
    from dagster_dbt.core import dbt_cli_invocation

    with _environ_lock:
        module = dbt_cli_invocation.subprocess
        dbt_cli_invocation.subprocess = SimpleNamespace(
            Popen=InProcessDbt, PIPE=subprocess.PIPE, STDOUT=subprocess.STDOUT
        )
        try:
            yield
        finally:
            dbt_cli_invocation.subprocess = module


# The environment variables the daily models read their window of days from
# (macros/date_window.sql): min inclusive, max exclusive.
WINDOW_ENV_VARS = ("FLYWHEEL_MIN_DATE", "FLYWHEEL_MAX_DATE")

_environ_lock = threading.RLock()

PARTIAL_PARSE_FILE = "partial_parse.msgpack"


@contextmanager
def date_window_env(start: date, end: date) -> Iterator[None]:
    """Set the window [start, end) in the environment of the dbt commands started inside."""
    # DbtCliResource.cli takes no environment of its own: it copies os.environ for the dbt
    # subprocess it starts before returning. Enter this around `dbt.cli(...)` only, not around
    # streaming its events; the lock keeps threads that start dbt from mixing windows.
    values = dict(zip(WINDOW_ENV_VARS, (start.isoformat(), end.isoformat()), strict=True))
    with _environ_lock, _environ(values):
        yield


# Set to keep every successful invocation's target folder (manifest, compiled SQL, debug log).
KEEP_TARGETS_ENV = DBT_KEEP_TARGETS.name


def build_command() -> list[str]:
    """`dbt build` as the assets run it: unit tests left out (they check the models' logic, not
    the data: CI runs them once, tests/dbt), and, unless the target folder is kept, without
    writing manifest.json and run_results.json into a folder removed once the build succeeded
    (the whole manifest, written at every build for nothing: Dagster reads dbt's events, not
    those files). A failed build keeps its folder and dbt.log either way."""
    return [
        "build",
        "--exclude-resource-type",
        "unit_test",
        *([] if DBT_KEEP_TARGETS.get() else ["--no-write-json"]),
    ]


def stream_and_keep_parse_state(invocation: DbtCliInvocation) -> Iterator[Any]:
    """The invocation's Dagster events; once all succeeded, its parse state seeds the next.

    The dbt process is named in the run's tags first: if the run's process is killed, dbt
    outlives it holding the warehouse, and the run's recovery ends it (`pipelines.lib.runs`).

    The invocation's own target folder (about 5 MB) is then removed unless KEEP_TARGETS_ENV is
    set: a daily run would otherwise leave one per partition. A failed invocation keeps it, with
    the dbt.log that Dagster's error points to.
    """
    if invocation.context is not None and invocation.process.pid is not None:
        record_child_process(
            invocation.context.instance, invocation.context.run_id, invocation.process.pid
        )
    yield from invocation.stream()
    keep_parse_state(invocation)
    if not DBT_KEEP_TARGETS.get():
        shutil.rmtree(invocation.target_path)


def keep_parse_state(invocation: DbtCliInvocation) -> None:
    """Make a finished invocation's partial-parse state the one the next invocation starts from."""
    # dagster-dbt gives each invocation its own target folder, seeded with the project's
    # partial_parse.msgpack; dbt rejects a state parsed with other vars or another --target (as
    # `dbt parse` without --target leaves), so without this every invocation parses everything.
    _seed(invocation.project_dir, invocation.target_path / PARTIAL_PARSE_FILE)


def seed_parse_state(project_dir: Path) -> None:
    """Seed a DBT_TARGET_PATH outside the project (a read-only image's) with its parse state."""
    _seed(project_dir, project_dir / "target" / PARTIAL_PARSE_FILE, where_none=True)


def _seed(project_dir: Path, state: Path, where_none: bool = False) -> None:
    seed = project_dir / Setting("DBT_TARGET_PATH", "target").value() / PARTIAL_PARSE_FILE
    if seed == state or not state.exists() or (where_none and seed.exists()):
        return
    seed.parent.mkdir(parents=True, exist_ok=True)
    partial = seed.with_name(f".{PARTIAL_PARSE_FILE}.{uuid.uuid4().hex[:8]}")
    shutil.copyfile(state, partial)
    os.replace(partial, seed)  # atomic: a concurrent invocation copies the old or the new


# Under `dagster dev` the manifest is re-parsed on every load, so model edits show at once;
# elsewhere `make setup` parses it. (DbtProject.prepare_if_dev would look for dbt on PATH.)
if Setting("DAGSTER_IS_DEV_CLI").get():
    FlywheelDbtCliResource(project_dir=dbt_project, dbt_executable=dbt_executable()).cli(
        ["parse", "--quiet"], target_path=dbt_project.target_path
    ).wait()
