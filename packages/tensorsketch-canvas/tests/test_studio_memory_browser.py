"""The debugger's memory card in a real browser (the committed bundle, the real server,
Chromium): a thread's memory reads and writes listed per superstep, the rows of the picked
checkpoint's superstep marked.

With ``TS_STUDIO_SCREENSHOTS=1`` the screenshot of docs/memory.md is rewritten in
docs/images/.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.testing import browser as test_browser

test_browser.skip_module_unless_chromium("the Studio memory card's browser test")
_here = Path(__file__).resolve().parent


def _module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the Studio page helper (``settle()``) and screenshot folder of the canvas's browser tests;
#: the visits graph and its seeded memory of the API test
BROWSER = _module(_here / "test_studio_browser.py", "_studio_browser_cases")
MEMORY = _module(_here / "test_studio_memory.py", "_studio_memory_cases")

from playwright.sync_api import Browser, expect  # noqa: E402

from tensorsketch.canvas.studio.server import StudioServer  # noqa: E402
from tensorsketch.runtime.backends.sqlite import SqliteBackend  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with test_browser.chromium() as chromium:
        yield chromium


def _in_thread(fn: Any) -> Any:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, fn()).result()


def test_the_memory_card_lists_a_threads_reads_and_writes(tmp_path: Path, browser: Browser) -> None:
    path = tmp_path / "visits.py"
    path.write_text(MEMORY.VISITS, encoding="utf-8")
    db = tmp_path / "runs.db"

    async def run() -> list[str]:
        backend = SqliteBackend(db)
        try:
            await MEMORY.run_visit(path, backend, "visit-ana", await MEMORY.seed_memory())
            stored = await backend.list_checkpoints("visit-ana")
            return [c.checkpoint_id for c in stored]
        finally:
            await backend.aclose()

    checkpoints = _in_thread(run)
    server = StudioServer(path, port=0, project=tmp_path, backend=f"sqlite:///{db}").start()
    context = browser.new_context(viewport={"width": 1400, "height": 820})
    page = context.new_page()
    studio = BROWSER.Studio(path, server, page)
    page.on("pageerror", lambda exc: studio.errors.append(str(exc)))
    try:
        page.goto(server.url)
        page.wait_for_function(
            "window.__studio && window.__studio.paints > 0 && window.__studio.state.connected",
            timeout=10_000,
        )
        page.wait_for_selector("#dbg-panel:not([hidden])", timeout=10_000)
        page.fill("#dbg-search", "visit-ana")
        page.click('.dbg-thread-row[data-thread="visit-ana"]')
        card = page.locator("#dbg-memory")
        expect(card).to_be_visible(timeout=10_000)
        expect(card.locator("summary")).to_contain_text("3 read · 2 written")
        rows = card.locator(".mem-op")
        expect(rows).to_have_count(5)
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.op)") == [
            "get", "get", "search", "put", "delete",
        ]  # fmt: skip
        put = card.locator('.mem-op[data-op="put"]')
        expect(put).to_contain_text("users / ana : visits")
        expect(put).to_contain_text("r1")
        expect(put).to_contain_text('"theme":"dark"')
        expect(card.locator('.mem-op[data-key="nickname"]')).to_contain_text("not found")
        expect(card.locator(".mem-group")).to_have_text(["step 0 · Recall", "step 1 · Note"])
        # picking the checkpoint that closed superstep 0 marks the three reads of Recall
        studio.settle()
        page.click(f'.tl-row[data-id="{checkpoints[1]}"]')
        expect(card.locator(".mem-op.here")).to_have_count(3)
        assert card.locator(".mem-op.here").evaluate_all("rs => rs.map(r => r.dataset.step)") == [
            "0",
            "0",
            "0",
        ]
        studio.settle()
        page.click(f'.tl-row[data-id="{checkpoints[2]}"]')
        expect(card.locator(".mem-op.here")).to_have_count(2)
        studio.settle()
        BROWSER.IMAGES.mkdir(parents=True, exist_ok=True)
        shot = BROWSER.IMAGES / "studio-debug-memory.png"
        page.screenshot(path=str(shot), clip={"x": 0, "y": 0, "width": 340, "height": 560})
    finally:
        context.close()
        server.stop()
    assert not studio.errors, studio.errors
