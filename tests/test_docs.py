"""The docs cannot rot silently: links resolve, the commands they show exist, no commit hash or
history creeps in, and the configuration page says what the code does."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [
    *(REPO / name for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")),
    *sorted(DOCS.glob("*.md")),
    REPO / "deploy" / "helm" / "README.md",
]
CONFIGURATION = DOCS / "configuration.md"

FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\S*)")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HASH = re.compile(r"\b[0-9a-f]{7,40}\b")
INLINE = re.compile(r"`([^`\n]+)`")
# Inline code that is a command of the project's own, checked like a line of a bash block.
COMMAND_STARTS = ("make ", "flywheel-sim ", "flywheel-models ", "python -m ", ".venv/bin/")


def rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def split_page(path: Path) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The page's prose lines and its fenced blocks as (language, lines)."""
    prose: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    fence, language, body = None, "", []
    for line in path.read_text().splitlines():
        match = FENCE.match(line.strip())
        if fence is None and match:
            fence, language, body = match.group(1), match.group(2), []
        elif fence is not None and line.strip().startswith(fence):
            blocks.append((language, body))
            fence = None
        elif fence is not None:
            body.append(line)
        else:
            prose.append(line)
    return prose, blocks


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    prose, _ = split_page(path)
    seen: dict[str, int] = {}
    result = set()
    for line in prose:
        if match := re.match(r"^#{1,6}\s+(.*?)\s*#*$", line):
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            result.add(base if n == 0 else f"{base}-{n}")
    return result


def links(path: Path) -> list[str]:
    prose, _ = split_page(path)
    text = INLINE.sub("", "\n".join(prose))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path):
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{rel(path)}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{rel(path)}: {target} (no heading with that anchor)")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Real heading\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#real-heading) [gone](c.md) [bad](b.md#no-such) `[x](c.md)`\n")
    assert broken_links(page) == [
        f"{page}: c.md (no such file)",
        f"{page}: b.md#no-such (no heading with that anchor)",
    ]


# --- Commands ---------------------------------------------------------------------------------


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return {t for line in re.findall(r"^([\w.\- ]+):(?!=)", text, re.M) for t in line.split()}


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_errors(words: list[str], parser: argparse.ArgumentParser, name: str) -> list[str]:
    """What in `words` (after the program's name) the argparse `parser` does not know."""
    errors = []
    positionals = [a for a in parser._actions if not a.option_strings]
    for word in words:
        if word.startswith("-"):
            flag = word.split("=", 1)[0]
            known = {s for a in parser._actions for s in a.option_strings}
            if flag not in known:
                errors.append(f"{name}: no option {flag}")
            continue
        if (choices := subcommands(parser)) and word in choices:
            parser, name = choices[word], f"{name} {word}"
            positionals = [a for a in parser._actions if not a.option_strings]
            continue
        if choices and isinstance(positionals[0], argparse._SubParsersAction):
            errors.append(f"{name}: no sub-command {word!r}")
            break
        action = positionals[0] if positionals else None
        if action is not None and action.choices and action.nargs is None:
            if word not in action.choices:
                errors.append(f"{name}: {word!r} is not one of {sorted(action.choices)}")
            positionals = positionals[1:]
    return errors


def project_parsers() -> dict[str, argparse.ArgumentParser]:
    from pipelines.models_cli import build_parser as models_parser
    from sim.driver.cli import build_parser as sim_parser

    return {"flywheel-sim": sim_parser(), "flywheel-models": models_parser()}


def module_flags(module: str) -> set[str] | None:
    """The `--flags` a module run with `python -m` declares, or None when there is no module."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin)
    files = sorted(origin.parent.glob("*.py")) if origin.name == "__init__.py" else [origin]
    if origin.name == "__init__.py" and not (origin.parent / "__main__.py").exists():
        return None
    # A shared parser declares its flags in the project module it is imported from.
    texts = [path.read_text() for path in files]
    shared = {
        m
        for text in texts
        for m in re.findall(r"^from ((?:tools|deploy)\.[\w.]+) import", text, re.M)
    }
    for name in shared:
        found = importlib.util.find_spec(name)
        if found is not None and found.origin is not None:
            texts.append(Path(found.origin).read_text())
    return {f for text in texts for f in re.findall(r"[\"'](--[a-z][\w-]*)[\"']", text)}


def check_command(line: str, parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """What in a shell line of the docs names a make target, a sub-command, a module or a flag
    that does not exist."""
    errors = []
    line = re.sub(r"\s#.*$", "", line.strip())
    line = re.sub(r"\s\d?>>?&?\s*\S+", "", line)  # redirections
    if not line or line.startswith("#"):
        return []
    for segment in re.split(r"&&|\|\||;|\|", line):
        try:
            words = shlex.split(segment)
        except ValueError:
            words = segment.split()
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]  # VAR=value before the command
        if not words:
            continue
        program = words[0].rsplit("/", 1)[-1]
        if program == "make":
            targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
            errors += [f"make: no target {t!r}" for t in targets if t not in make_targets()]
        elif program in parsers:
            errors += command_errors(words[1:], parsers[program], program)
        elif program.startswith("python") and words[1:2] == ["-m"] and len(words) > 2:
            module, rest = words[2], words[3:]
            if module in ("pytest", "pip", "venv", "uv"):
                continue
            flags = module_flags(module)
            if flags is None:
                errors.append(f"python -m {module}: no such module")
                continue
            for word in rest:
                flag = word.split("=", 1)[0]
                if flag.startswith("--") and flag not in flags | {"--help"}:
                    errors.append(f"python -m {module}: no option {flag}")
    return errors


def shown_commands(path: Path) -> list[str]:
    """Each command line of the page's bash blocks, and its inline code that is a command."""
    prose, blocks = split_page(path)
    lines = []
    for language, body in blocks:
        if language in ("bash", "sh", "shell", "console"):
            lines += re.sub(r"\\\n\s*", " ", "\n".join(body)).splitlines()
    for line in prose:
        lines += [c for c in INLINE.findall(line) if c.startswith(COMMAND_STARTS)]
    return lines


@pytest.fixture(scope="module")
def parsers() -> dict[str, argparse.ArgumentParser]:
    return project_parsers()


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_command_shown_exists(page: Path, parsers) -> None:
    errors = [
        f"{line!r}: {e}" for line in shown_commands(page) for e in check_command(line, parsers)
    ]
    assert errors == []


def test_a_command_that_does_not_exist_is_found(parsers) -> None:
    assert check_command("make flywheel DAYS=3", parsers) == []
    assert check_command("make flywheell", parsers) == ["make: no target 'flywheell'"]
    assert check_command(".venv/bin/flywheel-sim run --days 3 --trials 1", parsers) == []
    assert check_command("flywheel-sim run --dayz 3", parsers) == [
        "flywheel-sim run: no option --dayz"
    ]
    assert check_command("flywheel-sim label-studio start  # note", parsers) == []
    assert check_command("flywheel-sim label-studio launch", parsers) == [
        "flywheel-sim label-studio: 'launch' is not one of ['env', 'install', 'start', 'stop']"
    ]
    assert check_command("flywheel-sim replay", parsers) == [
        "flywheel-sim: no sub-command 'replay'"
    ]
    assert check_command("flywheel-models rollback --to 3 > out.txt", parsers) == []
    assert check_command("python -m bench.day_cost --pairs 3", parsers) == []
    assert check_command("python -m bench.nothing_here", parsers) == [
        "python -m bench.nothing_here: no such module"
    ]
    assert check_command("python -m bench.day_cost --pears 3", parsers) == [
        "python -m bench.day_cost: no option --pears"
    ]


# --- The README and the pages ------------------------------------------------------------------


def test_the_readme_is_short_and_links_every_page() -> None:
    readme = REPO / "README.md"
    assert len(readme.read_text().splitlines()) <= 300
    linked = {(REPO / t.partition("#")[0]).resolve() for t in links(readme)}
    assert [rel(p) for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked] == []


# The chart's README names the upstream commit its vendored schema was taken from: provenance.
@pytest.mark.parametrize("page", PAGES[:-1], ids=rel)
def test_no_commit_hash_or_history(page: Path) -> None:
    text = page.read_text()
    hashes = [h for h in HASH.findall(text) if re.search(r"\d", h) and re.search(r"[a-f]", h)]
    assert hashes == []
    assert "fresh clone of" not in text.lower()


# --- The configuration page against the code ---------------------------------------------------

SETTING = re.compile(r"\bFLYWHEEL_[A-Z0-9_]*[A-Z0-9]\b")
SOURCES = ("pipelines", "ml", "sim", "deploy", "dbt_project")
SUFFIXES = {".py", ".yaml", ".yml", ".sql", ".toml", ".json"}


def settings_in_code() -> set[str]:
    """Every FLYWHEEL_ variable named in the project's code and configuration."""
    found = set(SETTING.findall((REPO / "Makefile").read_text()))
    for top in SOURCES:
        for path in (REPO / top).rglob("*"):
            parts = set(path.relative_to(REPO).parts)
            if path.suffix in SUFFIXES and not parts & {"target", "dbt_packages", "logs"}:
                found |= set(SETTING.findall(path.read_text()))
    return found


def page_rows(path: Path) -> dict[str, str]:
    """The page's table rows whose first cell is one `key`: key -> the second cell."""
    rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and (match := re.fullmatch(r"`([^`]+)`", cells[0])):
            rows[match.group(1)] = cells[1].strip("`")
    return rows


def shown(value: object) -> str:
    """A default as the page writes it."""
    if value is None:
        return "none"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def test_every_environment_variable_is_documented_and_every_documented_one_read() -> None:
    documented = set(SETTING.findall(CONFIGURATION.read_text()))
    read = settings_in_code()
    assert {"missing from the page": read - documented, "not in the code": documented - read} == {
        "missing from the page": set(),
        "not in the code": set(),
    }


def test_the_retraining_settings_defaults_are_the_codes() -> None:
    from pipelines.settings import RETRAINING_SETTINGS

    rows = page_rows(CONFIGURATION)
    assert {n: rows.get(n) for n in RETRAINING_SETTINGS} == {
        n: shown(default) for n, (_, _, default) in RETRAINING_SETTINGS.items()
    }


def test_the_environment_defaults_are_the_settings_modules() -> None:
    from pipelines import settings

    def page_default(value: str) -> str:
        return value.replace(str(settings.REPO_ROOT), "<repo>") if value else "empty"

    declared = [v for v in vars(settings).values() if isinstance(v, settings.Setting)]
    declared += list(settings.PREFIXES.values())
    expected = {s.name: page_default(s.default) for s in declared if s.default is not None}
    rows = page_rows(CONFIGURATION)
    assert {name: rows.get(name) for name in expected} == expected


def run_config_defaults() -> dict[str, str]:
    """Each `op.field` of the jobs' run config and its default, from the definitions."""
    from pipelines.definitions import build_definitions

    result = {}
    for job in build_definitions(env="local").get_repository_def().get_all_jobs():
        for op in job.graph.iterate_op_defs():
            schema = op.config_schema.config_type if op.config_schema else None
            for field_name, field in (getattr(schema, "fields", None) or {}).items():
                default = field.default_value if field.default_provided else None
                # Documented by asset name: the op of `<task>/<name>` is `<task>__<name>`.
                result[f"{op.name.split('__', 1)[-1]}.{field_name}"] = shown(default)
    return result


def test_the_run_config_table_is_the_definitions(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path))
    expected = run_config_defaults()
    rows = page_rows(CONFIGURATION)
    documented = {
        k: v for k, v in rows.items() if k.split(".")[0] in {k.split(".")[0] for k in expected}
    }
    assert documented == expected


def test_the_task_yaml_tables_are_the_loaders() -> None:
    from ml.promotion import GateConfig
    from pipelines.task.model_spec import OPTIONAL, REQUIRED
    from pipelines.task.thresholds import MonitoringSpec, PromotionSpec

    def defaults(cls: type, section: str) -> dict[str, str]:
        return {
            f"{section}.{f.name}": shown(f.default) for f in fields(cls) if f.default is not MISSING
        }

    expected = {
        **defaults(MonitoringSpec, "monitoring"),
        **defaults(GateConfig, "promotion"),
        **defaults(PromotionSpec, "promotion"),
        **{f"model.{key}": "required" for key in REQUIRED},
    }
    rows = page_rows(CONFIGURATION)
    sections = ("model.", "monitoring.", "promotion.")
    documented = {k: v for k, v in rows.items() if k.startswith(sections)}
    optional = {f"model.{key}" for key in OPTIONAL}
    assert set(documented) == set(expected) | optional
    assert {k: v for k, v in documented.items() if k not in optional} == expected
