"""The tutorial cannot drift from the code: every block it copies from a file is still in that
file, line for line, and what it says about the movielens task is what the code loads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest

from pipelines.task import load_task

REPO = Path(__file__).resolve().parents[1]
TUTORIAL = REPO / "docs" / "your-own-task.md"
MARKER = re.compile(r"^<!--\s*file:\s*(\S+)\s*-->$")
FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\S*)")
MODEL_NAME = re.compile(r"\b(?:stg|int|fct|dim)_[a-z0-9_]+\b")
MIN_BLOCKS = 8
# Lines a reader may have added between two lines of a block (their own task's entries).
READER_LINES = 5


class Block(NamedTuple):
    """A fenced block of a page: the file it says it is copied from (if any), its language,
    the page line it opens on, and its lines."""

    source: str | None
    language: str
    line: int
    lines: list[str]


def blocks(page: Path) -> list[Block]:
    """Every fenced block of `page`, with the path of the `<!-- file: PATH -->` line right
    before its opening fence."""
    found, lines = [], page.read_text().splitlines()
    fence, start = None, 0
    for n, line in enumerate(lines):
        match = FENCE.match(line)
        if fence is None and match:
            fence, start = match.group(1), n
        elif fence is not None and line.strip().startswith(fence):
            marker = MARKER.match(lines[start - 1].strip()) if start else None
            language = FENCE.match(lines[start]).group(2)
            body = lines[start + 1 : n]
            found.append(Block(marker and marker.group(1), language, start + 1, body))
            fence = None
    return found


def copied_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.source is not None]


def drift(block: Block, root: Path) -> str | None:
    """Why `block` is not a run of consecutive lines of its file (trailing whitespace aside),
    naming the block's first line and the file; None when it is."""
    where = f"block at line {block.line} ({block.lines[0].strip() if block.lines else ''!r})"
    path = root / block.source
    if not path.is_file():
        return f"{where}: {block.source} does not exist"
    text = [line.rstrip() for line in path.read_text().splitlines()]
    wanted = [line.rstrip() for line in block.lines]
    if not wanted:
        return f"{where}: empty block copied from {block.source}"
    for start, line in enumerate(text):
        if line == wanted[0] and _follows(text, start, wanted[1:]):
            return None
    return f"{where}: its lines are not lines of {block.source} in that order"


def _follows(text: list[str], start: int, wanted: list[str]) -> bool:
    """Whether `wanted` follow line `start` of `text` in order, each within READER_LINES lines
    of the one before: a reader who follows the tutorial adds lines to these files (a task's
    entry in a table the page shows), and the page stays true of the rest."""
    at = start
    for line in wanted:
        window = text[at + 1 : at + 2 + READER_LINES]
        if line not in window:
            return False
        at += 1 + window.index(line)
    return True


@pytest.fixture(scope="module")
def copied() -> list[Block]:
    return copied_blocks(TUTORIAL)


def test_every_copied_block_is_in_its_file(copied) -> None:
    assert [reason for b in copied if (reason := drift(b, REPO))] == []


def test_enough_blocks_are_copied_from_the_task_and_its_models(copied) -> None:
    sources = {b.source for b in copied}
    models = {s for s in sources if s.startswith("dbt_project/models/movielens/")}
    assert len(copied) >= MIN_BLOCKS, f"only {len(copied)} blocks name their file"
    assert "pipelines/tasks/movielens.yaml" in sources
    assert len(models) >= 2, f"blocks copy from {sorted(models)} of the movielens models"


def test_an_edited_or_misplaced_block_is_found(tmp_path: Path) -> None:
    (tmp_path / "model.sql").write_text("with\n\nsource as (\n    select 1\n)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- file: model.sql -->\n```sql\nsource as (\n    select 1\n)\n```\n\n"
        "<!-- file: model.sql -->\n```sql\nsource as (\n    select 2\n)\n```\n\n"
        "<!-- file: model.sql -->\n```sql\n)\nsource as (\n```\n\n"
        "<!-- file: gone.sql -->\n```sql\nwith\n```\n\n"
        "<!-- file: model.sql -->\n```sql\nwith\nsource as (\n```\n\n"
        "```sql\nnot copied\n```\n"
    )
    found = copied_blocks(page)
    assert [b.source for b in found] == [
        "model.sql", "model.sql", "model.sql", "gone.sql", "model.sql"
    ]  # fmt: skip
    assert [drift(b, tmp_path) for b in found] == [
        None,
        "block at line 9 ('source as ('): its lines are not lines of model.sql in that order",
        "block at line 16 (')'): its lines are not lines of model.sql in that order",
        "block at line 22 ('with'): gone.sql does not exist",
        None,  # a line the file has between two of the block's: a reader's addition
    ]


def test_a_readers_own_entries_in_a_copied_table_keep_the_page_true(tmp_path: Path) -> None:
    """The tutorial shows `sim/world/sources.py`'s tables; a reader registering their own task
    adds an entry to each, and the page must still read as true of the file."""
    (tmp_path / "sources.py").write_text(
        'LOADERS = {\n    "flights": nycflights.load,\n    "movielens": movielens.load,\n'
        '    "orders": orders.load,\n}\n'
    )
    page = tmp_path / "page.md"
    page.write_text(
        '<!-- file: sources.py -->\n```python\nLOADERS = {\n    "flights": nycflights.load,\n'
        '    "movielens": movielens.load,\n}\n```\n'
    )
    assert [drift(b, tmp_path) for b in copied_blocks(page)] == [None]


def test_the_task_is_the_one_the_tutorial_describes() -> None:
    task = load_task("movielens")
    assert task.cadence == "monthly"
    assert task.feeds["movies"].kind == "dimension"
    assert task.feeds["ratings"].kind == "daily"
    assert task.feeds["ratings"].partition_date == ("rated_at",)
    classes = task.model.features.classes
    assert classes == tuple(task.labeling.choices.values())
    assert classes == tuple(k / 2 for k in range(1, 11))
    assert task.labeling.choice_for_score(0.5) == "3"
    assert "default" not in task.sections


def test_the_labeling_config_shown_is_the_generated_one() -> None:
    (shown,) = [b for b in blocks(TUTORIAL) if b.language == "xml"]
    assert "\n".join(shown.lines) == load_task("movielens").labeling.labeling_config()


def test_every_model_named_exists() -> None:
    models = {p.stem for p in (REPO / "dbt_project" / "models").rglob("*.sql")}
    named = set(MODEL_NAME.findall(TUTORIAL.read_text()))
    assert {"fct_rating_features", "fct_labelled_ratings", "stg_landing__ratings"} <= named
    assert sorted(named - models) == []


def test_the_run_command_is_shown() -> None:
    text = TUTORIAL.read_text()
    assert "make flywheel TASK=movielens" in text
    assert "tests/pipelines/test_movielens_task.py" in text
