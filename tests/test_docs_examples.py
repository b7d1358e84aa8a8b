"""The docs' examples run from the docs themselves, so the docs cannot drift from the code.

Every ```python block of ``docs/*.md`` and of the README runs, in page order, in one namespace
per page (a page's later blocks use what its earlier ones defined) and on one event loop per
page (top-level ``await`` works, as in a notebook). A block that cannot run here (it needs a
server or an API key, or it is a fragment) carries an explicit marker on the line before its
fence, which this test reports as a skip with its reason::

    <!-- not-run: needs an ANTHROPIC_API_KEY -->
    ```python
    ...
    ```
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None  # the marker's reason

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = [ln for ln in text[: match.start()].splitlines() if ln.strip()]
        marker = _NOT_RUN.search(before[-1]) if before else None
        found.append(Block(page, line, match.group(1), marker.group(1) if marker else None))
    return found


BLOCKS = [block for page in PAGES for block in blocks_of(page)]


class _Page:
    """One page's session: its namespace, its event loop, how far it has run."""

    def __init__(self, page: Path) -> None:
        self.namespace: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
        self.loop = asyncio.new_event_loop()
        self.done: set[int] = set()

    def run(self, block: Block) -> None:
        code = compile(
            block.code, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
        )
        with contextlib.redirect_stdout(io.StringIO()):
            result = eval(code, self.namespace)
            if inspect.iscoroutine(result):
                self.loop.run_until_complete(result)
        self.done.add(block.line)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Where the blocks run: a scratch folder that sees the repository's ``examples/``."""
    path = tmp_path_factory.mktemp("docs")
    (path / "examples").symlink_to(ROOT / "examples")
    return path


@pytest.fixture(scope="module")
def sessions() -> Any:
    pages: dict[Path, _Page] = {}
    yield pages
    for page in pages.values():
        page.loop.close()


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_docs_block_runs(
    block: Block, sessions: dict[Path, _Page], workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.not_run is not None:
        pytest.skip(f"not-run: {block.not_run}")
    monkeypatch.chdir(workdir)
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    session = sessions.setdefault(block.page, _Page(block.page))
    # Run alone (``-k``), a block still gets what the page defined before it.
    for earlier in blocks_of(block.page):
        if earlier.line >= block.line:
            break
        if earlier.not_run is None and earlier.line not in session.done:
            session.run(earlier)
    session.run(block)


def test_every_page_with_code_runs_some_of_it() -> None:
    """A page whose every block is marked not-run says nothing the code checks; the README's
    Hello, graph and the getting-started page must run whole."""
    ran = [b for b in BLOCKS if b.not_run is None]
    skipped = [b for b in BLOCKS if b.not_run is not None]
    print(f"docs blocks: {len(ran)} run, {len(skipped)} marked not-run, of {len(BLOCKS)}")
    assert ran
    for page in ("README.md", "docs/getting-started.md", "docs/state-and-channels.md"):
        assert all(b.not_run is None for b in BLOCKS if str(b.page.relative_to(ROOT)) == page)
