"""The code's shape: its modules import one another without a circle (imports inside functions
count), one module, pipelines/settings.py, reads the environment, one module reads a task's YAML,
and no module grows past one job's size."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pipelines", "ml", "sim", "deploy", "bench", "tools")
SETTINGS = "pipelines.settings"
# Modules that may read the environment themselves: the GPU benchmarks run where only the ML
# stack is installed (no pipelines package), and read CUDA's own variables, not the flywheel's.
OWN_READERS = {SETTINGS, "bench.trials_per_gpu_hour"}


def modules() -> dict[str, Path]:
    """Every module of the project's packages by its dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """The project's modules that `path` imports, at module level or inside a function."""
    named = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    result = set()
    for name in named:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            result.add(name)
    return result


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected group of `graph` (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while (member := stack.pop()) != node:
                group.append(member)
            group.append(node)
            if len(group) > 1 or node in graph.get(node, ()):
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_module_imports_itself_back_through_others() -> None:
    found = modules()
    graph = {name: imports(path, set(found)) - {name} for name, path in found.items()}
    assert cycles(graph) == []


def test_a_circle_is_found_even_through_an_import_inside_a_function() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def environment_reads(path: Path) -> list[int]:
    """The lines where `path` reads an environment variable: os.getenv, os.environ.get,
    os.environ[...] or `in os.environ` (passing the whole environment on is no read)."""

    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        getenv = call and node.func.attr == "getenv"
        if getenv or (call and node.func.attr == "get" and is_environ(node.func.value)):
            found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            if isinstance(node.ctx, ast.Load):
                found.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            found.append(node.lineno)
    return sorted(found)


def test_only_the_settings_module_reads_the_environment() -> None:
    found = modules()
    reads = [
        f"{path.relative_to(REPO)}:{line}"
        for name, path in found.items()
        if name not in OWN_READERS
        for line in environment_reads(path)
    ]
    assert reads == []
    assert environment_reads(found[SETTINGS])  # it does read it: the check sees reads


def test_an_environment_read_is_found(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os\nos.getenv('A')\nos.environ.get('B')\nos.environ['C']\n'D' in os.environ\n"
        "os.environ['E'] = '1'\nenv = dict(os.environ)\n"
    )
    assert environment_reads(probe) == [2, 3, 4, 5]


# A module longer than this does more than one job: split it into a package (see ml/tuning).
MAX_LINES = 400


def test_no_module_is_longer_than_one_job() -> None:
    long = {
        str(path.relative_to(REPO)): lines
        for path in modules().values()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


# pipelines/ in floors, lowest first, one rule each: a module imports from its own floor and
# those below it, never above; only the services' floor, Dagster's floor and the entry points
# import dagster. The longest prefix places a module.
FLOORS = (
    (
        "what the task YAML says",
        ("pipelines.settings", "pipelines.task", "pipelines.labeling.spec"),
    ),
    ("how the project talks to services", ("pipelines.lib",)),
    (
        "what each stage decides",
        ("pipelines.ingestion", "pipelines.monitoring", "pipelines.labeling"),
    ),
    ("how Dagster runs it", ("pipelines.defs",)),
    (
        "entry points",
        (
            "pipelines",
            "pipelines.definitions",
            "pipelines.resources",
            "pipelines.preflight",
            "pipelines.models_cli",
            "pipelines.tuning_pod",
        ),
    ),
)
# Modules at the top of pipelines/: the entry points and the settings, each package a floor.
MAX_LOOSE_MODULES = 7
DAGSTER_FLOORS = {1, 3, 4}


def floor_of(module: str) -> int | None:
    """The floor a module of pipelines/ stands on (by its longest prefix), None if none."""
    placed = [
        (len(prefix), number)
        for number, (_, prefixes) in enumerate(FLOORS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(placed)[1] if placed else None


def floor_violations(found: dict[str, Path]) -> list[str]:
    """Each module of pipelines/ with no floor, each import up a floor, and each import of
    dagster below the floors that may."""
    wrong = []
    for name, path in sorted(found.items()):
        if not name.startswith("pipelines"):
            continue
        floor = floor_of(name)
        if floor is None:
            wrong.append(f"{name} stands on no floor")
            continue
        for target in imports(path, set(found)):
            above = floor_of(target) if target.startswith("pipelines") else None
            if above is not None and above > floor:
                wrong.append(f"{name} ({FLOORS[floor][0]}) imports {target} ({FLOORS[above][0]})")
        if imports(path, {"dagster"}) and floor not in DAGSTER_FLOORS:
            wrong.append(f"{name} ({FLOORS[floor][0]}) imports dagster")
    return wrong


def test_pipelines_floors_point_down_and_only_dagsters_import_dagster() -> None:
    assert floor_violations(modules()) == []


def test_few_modules_stand_loose_at_the_top_of_pipelines() -> None:
    loose = sorted(p.name for p in (REPO / "pipelines").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_an_import_up_a_floor_or_of_dagster_below_is_found(tmp_path: Path) -> None:
    rules = tmp_path / "monitoring.py"
    rules.write_text("import dagster as dg\nfrom pipelines.defs.graph import build_jobs\n")
    config = tmp_path / "thresholds.py"
    config.write_text("def f():\n    from pipelines.lib.errors import secret\n")
    stray = tmp_path / "stray.py"
    stray.write_text("")
    found = {
        "pipelines.monitoring": rules,
        "pipelines.task.thresholds": config,
        "pipelines.defs.graph": stray,
        "pipelines.lib.errors": stray,
    }
    assert floor_violations(found) == [
        "pipelines.monitoring (what each stage decides) imports pipelines.defs.graph "
        "(how Dagster runs it)",
        "pipelines.monitoring (what each stage decides) imports dagster",
        "pipelines.task.thresholds (what the task YAML says) imports pipelines.lib.errors "
        "(how the project talks to services)",
    ]


# The code location's entry: it merges what each group builds (pipelines/defs/graph.py); wiring
# an asset, a job or a sensor there again would grow it past this.
MAX_ENTRY_LINES = 40


def function_lines(source: str, name: str) -> int:
    """How many lines the top-level function `name` of `source` spans, its decorators aside."""
    (found,) = [
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name == name
    ]
    return found.end_lineno - found.lineno + 1


def test_the_code_locations_entry_merges_what_the_groups_build() -> None:
    source = (REPO / "pipelines" / "definitions.py").read_text()
    assert function_lines(source, "build_definitions") <= MAX_ENTRY_LINES
    planted = "def build_definitions():\n" + "    job = 1\n" * MAX_ENTRY_LINES
    assert function_lines(planted, "build_definitions") > MAX_ENTRY_LINES


def yaml_reads(path: Path) -> list[int]:
    """The lines where `path` parses YAML (yaml.safe_load, yaml.load)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("safe_load", "load")
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "yaml"
    ]


def test_one_module_reads_a_tasks_yaml() -> None:
    """Every reader of YAML in the pipelines reads something else than a task (the instance's
    settings, a DVC pointer, the workspace), except the contracts' reader that `pipelines.task`
    calls."""
    found = modules()
    readers = {name for name, path in found.items() if yaml_reads(path)}
    assert readers == {
        "pipelines.task.contracts",
        "pipelines.preflight",
        "pipelines.lib.datasets",
        "pipelines.lib.wiring",
    }


# The simulator's rooms point one way: the driver plays the world and asks the judge; the judge
# reads the world; the world knows neither.
ROOMS_BELOW = {
    "sim.world": set(),
    "sim.judge": {"sim.world"},
    "sim.driver": {"sim.judge", "sim.world"},
}


def test_the_simulators_rooms_point_one_way() -> None:
    found = modules()
    crossing = []
    for name, path in found.items():
        room = next((r for r in ROOMS_BELOW if name == r or name.startswith(r + ".")), None)
        if room is None:
            continue
        for target in imports(path, set(found)):
            other = next((r for r in ROOMS_BELOW if target.startswith(r + ".")), None)
            if other not in (None, room) and other not in ROOMS_BELOW[room]:
                crossing.append(f"{name} -> {target}")
    assert crossing == []


def module_level_imports(path: Path, known: set[str]) -> set[str]:
    """The project's modules that `path` imports at module level (not inside a function)."""
    body = ast.parse(path.read_text()).body
    top = ast.Module(body=[n for n in body if isinstance(n, ast.Import | ast.ImportFrom)])
    named = set()
    for node in top.body:
        if isinstance(node, ast.Import):
            named |= {alias.name for alias in node.names}
        elif node.module and node.level == 0:
            named.add(node.module)
    return {n for n in named if n.split(".")[0] in known}


def test_the_code_location_s_image_imports_nothing_of_deploy() -> None:
    """The image holds pipelines/, ml/ and sim/ but not deploy/: the first two never import it,
    the simulator only inside the functions that manage a local service."""
    found = modules()
    for name, path in found.items():
        if name.split(".")[0] in ("pipelines", "ml"):
            assert not {m for m in imports(path, set(found)) if m.startswith("deploy")}, name
        if name.split(".")[0] == "sim":
            assert not module_level_imports(path, {"deploy"}), name


# tests/ mirrors the packages: the tests of pipelines/lib/ are in
# tests/pipelines/lib/, those of the whole graph and the entry points in tests/pipelines/.
MIRRORED = ("pipelines", "sim", "ml", "deploy")


def misplaced_tests(repo: Path) -> list[str]:
    """The test modules under tests/<package> whose folder mirrors no package."""
    return sorted(
        test.relative_to(repo).as_posix()
        for package in MIRRORED
        for test in (repo / "tests" / package).rglob("test_*.py")
        if not (repo / test.parent.relative_to(repo / "tests") / "__init__.py").is_file()
    )


def test_a_packages_tests_sit_in_the_folder_that_mirrors_it() -> None:
    assert misplaced_tests(REPO) == []


def test_a_test_in_a_folder_that_mirrors_no_package_is_found(tmp_path: Path) -> None:
    for path in (
        "sim/__init__.py",
        "sim/world/__init__.py",
        "tests/sim/test_cli.py",
        "tests/sim/world/test_replay.py",
        "tests/sim/worlds/test_drift.py",
        "tests/pipelines/test_wiring.py",
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    assert misplaced_tests(tmp_path) == [
        "tests/pipelines/test_wiring.py",
        "tests/sim/worlds/test_drift.py",
    ]
