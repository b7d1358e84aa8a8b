"""The Studio draws the runtime's newer constructs, in real Chromium: a node's ``Command``
destinations as ``goto`` wires, ``cache=`` and ``defer=True`` as badges (defer toggled from
the inspector and written to the file), ``map`` / ``parallel`` as fan-outs into a collector.

Skipped, with the reason, when ``/usr/bin/chromium`` or Playwright for Python is missing. The
screenshot goes to ``docs/images/studio-constructs.png`` with ``TS_STUDIO_SCREENSHOTS=1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorsketch.canvas import extract
from tensorsketch.testing import browser as test_browser

ROOT = Path(__file__).resolve().parents[3]
IMAGES = test_browser.screenshot_folder(ROOT / "docs" / "images")

test_browser.skip_module_unless_chromium("the Studio browser tests")
test_browser.skip_module_unless_built(
    ROOT / "packages/tensorsketch-canvas/src/tensorsketch/canvas/studio/static/index.html",
    "nox -s studio-build",
)

from playwright.sync_api import Browser, Page  # noqa: E402

from tensorsketch.canvas.studio.server import StudioServer  # noqa: E402

pytestmark = pytest.mark.timeout(120)

SOURCE = """\
import operator
from typing import Annotated

from tensorsketch import END, START, Command, Context, Graph, Node, Reducer, Schema
from tensorsketch.cache import CachePolicy


class Desk(Schema):
    text: str = ""
    docs: list[str] = []
    notes: Annotated[list[str], Reducer(operator.add)] = []
    answer: str = ""


class Triage(Node):
    destinations = ("Research", "Reply")

    class In(Schema):
        text: str

    async def run(self, ctx: Context, inp: In) -> Command:
        return Command(goto="Research")


class Research(Node):
    async def run(self, ctx: Context, inp: Desk) -> None:
        return None


class Skim(Node):
    class In(Schema):
        text: str

    class Out(Schema):
        notes: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(notes=[inp.text])


class Digest(Node):
    class In(Schema):
        notes: list[str]

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer="; ".join(inp.notes))


class Cite(Node):
    async def run(self, ctx: Context, inp: Desk) -> None:
        return None


class Check(Node):
    async def run(self, ctx: Context, inp: Desk) -> None:
        return None


class Reply(Node):
    async def run(self, ctx: Context, inp: Desk) -> None:
        return None


desk = (
    Graph(Desk)
    .add(Triage)
    .add(Research)
    .add(Skim, cache=CachePolicy(ttl=600))
    .add(Digest, defer=True)
    .add(Cite)
    .add(Check)
    .add(Reply)
    .edge(START, "Triage")
    .map("Research", "Skim", over="docs", item="text", then="Digest")
    .parallel("Digest", ["Cite", "Check"], then="Reply")
    .edge("Reply", END)
)
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with test_browser.chromium() as chromium:
        yield chromium


@pytest.fixture
def page(tmp_path: Path, browser: Browser) -> Iterator[tuple[Page, Path]]:
    path = tmp_path / "desk.py"
    path.write_text(SOURCE, encoding="utf-8")
    server = StudioServer(path, port=0, project=tmp_path).start()
    context = browser.new_context(viewport={"width": 1500, "height": 760})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server.url)
    page.wait_for_function("window.__studio && window.__studio.paints > 0", timeout=10_000)
    try:
        yield page, path
    finally:
        context.close()
        server.stop()
    assert not errors, errors


def _labels(page: Page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")


def test_the_studio_draws_goto_map_parallel_and_the_node_badges(
    page: tuple[Page, Path],
) -> None:
    p, path = page
    # Command destinations: one goto wire per declared destination, not selectable
    goto = p.locator('g.goto-wire[data-kind="command"]')
    assert goto.count() == 2
    assert sorted(
        p.eval_on_selector_all("g.goto-wire", "els => els.map(e => e.dataset.target)")
    ) == ["Reply", "Research"]
    assert p.locator('g.wire[data-kind="command"]').count() == 0
    # map: the fan-out names the list and the per-item port; the collector is `then`
    maps = p.locator('g.wire[data-kind="map"]')
    assert maps.count() == 2  # Research -> Skim (fan-out), Skim -> Digest (collect)
    assert "map docs[i] → text" in _labels(p, "g.wire-label text")
    assert "collect" in _labels(p, "g.wire-label text")
    # parallel: out to each node, a join into `then`
    assert p.locator('g.wire[data-kind="parallel"]').count() == 4
    assert _labels(p, "g.wire-label text").count("parallel") == 2
    # badges
    skim = _labels(p, '#boxes g.box[data-id="Skim"] .node-badge text')
    assert skim == ["cached ttl=600"]
    assert _labels(p, '#boxes g.box[data-id="Digest"] .node-badge text') == ["deferred"]
    IMAGES.mkdir(parents=True, exist_ok=True)
    p.screenshot(path=str(IMAGES / "studio-constructs.png"))
    assert path.read_text(encoding="utf-8") == SOURCE


def test_defer_is_toggled_from_the_inspector_and_written(page: tuple[Page, Path]) -> None:
    p, path = page
    before = int(p.evaluate("window.__studio.paints"))
    p.locator('#boxes g.box[data-id="Cite"] > g').first.click()
    toggle = p.locator("#defer-toggle")
    toggle.wait_for()
    assert not toggle.is_checked()
    toggle.check()
    p.wait_for_function(
        f"window.__studio.paints > {before} && !document.body.classList.contains('busy')"
    )
    p.wait_for_function(
        """() => [...document.querySelectorAll('#boxes g.box[data-id="Cite"] .node-badge text')]
                 .some(t => t.textContent === "deferred")"""
    )
    IMAGES.mkdir(parents=True, exist_ok=True)
    p.screenshot(path=str(IMAGES / "studio-constructs-defer.png"))
    text = path.read_text(encoding="utf-8")
    assert "    .add(Cite, defer=True)\n" in text
    assert "    .add(Skim, cache=CachePolicy(ttl=600))\n" in text  # untouched
    assert extract(text).node("Cite").defer
