"""The Studio's operations in a real browser (the committed bundle, the real server,
Chromium): fill a hole from its node (a draft kept "unverified" with its failures, then a
body verified and written), optimize an agent against its eval suite (scores, the prompt's
change and the diff, written on confirm), and answer an effect in doubt from the debugger.

With ``TS_STUDIO_SCREENSHOTS=1`` the screenshots of docs/holes-to-code.md,
docs/optimizing.md and docs/effects.md are rewritten in docs/images/.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import FakeProvider
from tensorsketch.testing import browser as test_browser

ROOT = Path(__file__).resolve().parents[3]
IMAGES = test_browser.screenshot_folder(ROOT / "docs" / "images")

test_browser.skip_module_unless_chromium("the Studio operations' browser tests")
test_browser.skip_module_unless_built(
    ROOT / "packages/tensorsketch-canvas/src/tensorsketch/canvas/studio/static/index.html",
    "nox -s studio-build",
)

from playwright.sync_api import Browser, Page, expect  # noqa: E402

from tensorsketch.canvas.studio.debug_source import GraphSource  # noqa: E402
from tensorsketch.canvas.studio.fill_routes import FillSettings  # noqa: E402
from tensorsketch.canvas.studio.optimize_routes import OptimizeSettings  # noqa: E402
from tensorsketch.canvas.studio.server import StudioServer  # noqa: E402
from tensorsketch.runtime.backends.sqlite import SqliteBackend  # noqa: E402

pytestmark = pytest.mark.timeout(300)

_here = Path(__file__).resolve().parent


def _module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the hole, the project's strict mypy and good body of the fill tests; the triage agent, its
#: suite and scripted proposer of the optimizing example; the payment graph of the API tests
FILL = _module(_here / "test_fill.py", "_fill_cases")
OPTIMIZE = _module(ROOT / "examples" / "optimize_agent.py", "_optimize_example")
OPS = _module(_here / "test_studio_ops.py", "_ops_cases")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with test_browser.chromium() as chromium:
        yield chromium


def _open(browser: Browser, server: StudioServer, errors: list[str], **size: int) -> Page:
    context = browser.new_context(
        viewport={"width": size.get("w", 1400), "height": size.get("h", 820)}
    )
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server.url)
    page.wait_for_function(
        "window.__studio && window.__studio.state.connected "
        "&& !document.body.classList.contains('busy')",
        timeout=10_000,
    )
    return page


def _shot(page: Page, name: str, **clip: float) -> Path:
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(200)
    path = IMAGES / f"{name}.png"
    page.screenshot(path=str(path), clip=clip or None)  # type: ignore[arg-type]
    return path


def _confirm(page: Page) -> None:
    expect(page.locator("#dbg-confirm")).to_be_visible()
    page.click("#dbg-confirm-ok")


# -- fill a hole ----------------------------------------------------------------------------------


def test_fill_a_hole_from_its_node(tmp_path: Path, browser: Browser) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0"\n\n[tool.mypy]\nstrict = true\n'
        'plugins = ["pydantic.mypy"]\n',
        encoding="utf-8",
    )
    app = tmp_path / "app.py"
    app.write_text(FILL.HOLE, encoding="utf-8")
    # the scripted model's first answer has no code (a draft), its second is a good body
    provider = FakeProvider(["no code here, sorry", FILL.GOOD])
    options = {"max_examples": 5, "mypy_cache": tmp_path / ".mypy_cache"}
    fill = FillSettings(provider, attempts=1, timeout=300, options=options)
    server = StudioServer(app, port=0, project=tmp_path, fill=fill).start()
    errors: list[str] = []
    page = _open(browser, server, errors)
    try:
        box = page.locator('#boxes g.box[data-id="Shout"]')
        expect(box.locator(".hole-tag")).to_have_text("needs code")
        page.wait_for_function("!document.body.classList.contains('busy')")
        box.click()
        section = page.locator("#fill-section")
        expect(section).to_be_visible()
        expect(page.locator("#fill-provider option")).not_to_have_count(0)
        assert page.locator("#fill-provider").input_value() == "scripted"
        assert "openai" in page.locator("#fill-provider").inner_text()
        page.click("#fill-node")
        verdict = page.locator('#fill-verdict[data-status="draft"]')
        expect(verdict).to_be_visible(timeout=120_000)
        expect(verdict).to_contain_text("unverified")
        expect(verdict).to_contain_text("holds no `def run(...)` method")
        # the node says so on the canvas while the draft exists; the file is unchanged
        expect(box.locator(".hole-tag")).to_have_text("unverified")
        assert "raise Hole" in app.read_text()
        page.mouse.move(5, 600)
        _shot(page, "studio-fill-unverified")
        # a new page (no job of its own) reads the draft and its failures from the holes list
        page.reload()
        page.wait_for_function(
            "window.__studio && window.__studio.paints > 0 && window.__studio.state.connected "
            "&& !document.body.classList.contains('busy')"
        )
        expect(box.locator(".hole-tag")).to_have_text("unverified")
        box.click()
        expect(verdict).to_contain_text("holds no `def run(...)` method")
        page.wait_for_function("!document.body.classList.contains('busy')")
        page.click("#fill-node")
        expect(page.locator("#fill-progress")).to_be_visible()
        written = page.locator('#fill-verdict[data-status="written"]')
        expect(written).to_be_visible(timeout=240_000)
        expect(written).to_contain_text("verified and written")
        # the canvas reloaded: the node has code now
        expect(box).not_to_have_class("hole", timeout=10_000)
        expect(box.locator(".hole-tag")).to_have_count(0)
        assert "upper()" in app.read_text() and "raise Hole" not in app.read_text()
        _shot(page, "studio-fill-written")
    finally:
        page.context.close()
        server.stop()
    assert not errors, errors


# -- optimize an agent ----------------------------------------------------------------------------


def test_optimize_an_agent_and_write_on_confirm(tmp_path: Path, browser: Browser) -> None:
    agent = tmp_path / "triage.py"
    agent.write_text(OPTIMIZE.AGENT, encoding="utf-8")
    (tmp_path / "triage_suite.py").write_text(OPTIMIZE.SUITE, encoding="utf-8")
    (tmp_path / "proposer.py").write_text(OPTIMIZE.PROPOSER, encoding="utf-8")
    settings = OptimizeSettings(proposers={"scripted": f"{tmp_path / 'proposer.py'}:proposer"})
    server = StudioServer(agent, port=0, project=tmp_path, optimize=settings).start()
    errors: list[str] = []
    page = _open(browser, server, errors, h=900)
    before = agent.read_text()
    try:
        page.wait_for_function("!document.body.classList.contains('busy')")
        page.click("#optimize")
        panel = page.locator("#optimize-panel")
        expect(panel).to_be_visible()
        assert page.locator("#optimize-agent").input_value() == "agent"
        assert page.locator("#optimize-suite").input_value() == "triage_suite.py"
        page.click("#optimize-run")
        done = page.locator('#optimize-job[data-status="done"]')
        expect(done).to_be_visible(timeout=120_000)
        scores = page.locator("#optimize-scores")
        expect(scores).to_contain_text("held-out")
        expect(scores.locator("td.better")).to_contain_text("100%")
        expect(scores).to_contain_text("0% (0/4")
        expect(page.locator("#optimize-instructions")).to_contain_text("exactly one word")
        expect(page.locator("#optimize-diff .add").first).to_be_visible()
        assert agent.read_text() == before  # nothing written yet
        page.mouse.move(5, 600)  # no hover on the panel's buttons in the picture
        _shot(page, "studio-optimize")
        page.click("#optimize-write")
        _confirm(page)
        expect(page.locator("#optimize-verdict")).to_have_text("Written into the file.")
    finally:
        page.context.close()
        server.stop()
    assert not errors, errors
    text = agent.read_text()
    assert text != before and "exactly one word" in text and "Examples:" in text


def test_cancelling_the_write_leaves_the_file(tmp_path: Path, browser: Browser) -> None:
    agent = tmp_path / "triage.py"
    agent.write_text(OPTIMIZE.AGENT, encoding="utf-8")
    (tmp_path / "triage_suite.py").write_text(OPTIMIZE.SUITE, encoding="utf-8")
    (tmp_path / "proposer.py").write_text(OPTIMIZE.PROPOSER, encoding="utf-8")
    settings = OptimizeSettings(proposers={"scripted": f"{tmp_path / 'proposer.py'}:proposer"})
    server = StudioServer(agent, port=0, project=tmp_path, optimize=settings).start()
    errors: list[str] = []
    page = _open(browser, server, errors)
    before = agent.read_text()
    try:
        page.wait_for_function("!document.body.classList.contains('busy')")
        page.click("#optimize")
        page.fill("#optimize-rounds", "1")
        page.click("#optimize-run")
        expect(page.locator('#optimize-job[data-status="done"]')).to_be_visible(timeout=120_000)
        page.click("#optimize-write")
        expect(page.locator("#dbg-confirm")).to_be_visible()
        page.click("#dbg-confirm-cancel")
        expect(page.locator("#optimize-write")).to_be_visible()
    finally:
        page.context.close()
        server.stop()
    assert not errors, errors
    assert agent.read_text() == before


# -- effects in doubt -----------------------------------------------------------------------------


def _in_thread(fn: Any) -> Any:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, fn()).result()


def test_answer_an_effect_in_doubt_in_the_debugger(tmp_path: Path, browser: Browser) -> None:
    path = tmp_path / "pay.py"
    path.write_text(OPS.PAY, encoding="utf-8")
    db = tmp_path / "runs.db"

    async def plant() -> None:
        backend = SqliteBackend(db)
        try:
            await OPS.plant_in_doubt(path, backend, "order-17", key="0:Pay:0:pay")
        finally:
            await backend.aclose()

    _in_thread(plant)
    server = StudioServer(path, port=0, project=tmp_path, backend=f"sqlite:///{db}").start()
    errors: list[str] = []
    page = _open(browser, server, errors, w=1500, h=860)
    try:
        page.wait_for_selector("#dbg-panel:not([hidden])", timeout=10_000)
        page.fill("#dbg-search", "order-17")
        page.click('.dbg-thread-row[data-thread="order-17"]')
        card = page.locator("#dbg-doubt")
        expect(card).to_be_visible(timeout=10_000)
        expect(card).to_contain_text("1 effect in doubt")
        item = card.locator('.dbg-doubt-item[data-key="0:Pay:0:pay"]')
        expect(item.locator(".policy")).to_have_text("ask")
        expect(item).to_contain_text("waits for a person")
        expect(item).to_contain_text('"amount": 5')
        expect(page.locator("#dbg-doubt-happened")).to_have_count(0)  # not asked yet
        page.click("#dbg-run")
        _confirm(page)
        expect(page.locator("#dbg-waiting")).to_contain_text("effect in doubt", timeout=15_000)
        expect(page.locator("#dbg-doubt-happened")).to_be_visible()
        # the head checkpoint's journal marks the same effect
        expect(page.locator(".dbg-effects tr.in-doubt")).to_contain_text("in doubt (ask)")
        _shot(page, "studio-debug-in-doubt", x=0, y=0, width=360, height=620)
        page.fill("#dbg-doubt-result", '"r-from-bank"')
        page.click("#dbg-doubt-happened")
        expect(page.locator("#dbg-confirm")).to_contain_text("r-from-bank")
        _confirm(page)
        page.wait_for_function(
            "() => window.__studio.debug.thread?.status === 'completed' "
            "&& !window.__studio.debug.busy",
            timeout=15_000,
        )
        expect(page.locator("#dbg-doubt")).to_be_hidden()
    finally:
        page.context.close()
        server.stop()
    assert not errors, errors

    async def receipt() -> Any:
        backend = SqliteBackend(db)
        try:
            loaded = GraphSource(path).get()
            assert loaded.graph is not None
            return await loaded.graph.aget_state("order-17", backend)
        finally:
            await backend.aclose()

    assert _in_thread(receipt).receipt == "r-from-bank"
    assert not (tmp_path / "charges.log").exists()  # the payment never ran twice
