"""The Studio debugger in a real browser, on SQLite and on PostgreSQL.

Threads are recorded the way a user records them (``invoke`` with a ``thread_id`` and a
backend, in this process); the Studio is started on the same backend URL and Debian's
Chromium drives its page through Playwright. Every check is made against the backend
itself: the state the page shows against ``aget_state_at``, a fork's new thread, each step's
checkpoint, the approved tool's side effect.

One browser for the module, one Studio per backend and graph file (module scope): the tests
use distinct thread ids in a database of their own (a fresh SQLite file, a fresh PostgreSQL
database), so they share it without seeing each other's threads.
Skipped, with the reason, without ``/usr/bin/chromium`` or Playwright; the PostgreSQL half
fails (does not skip) when the server at ``TS_TEST_POSTGRES_DSN`` is unreachable, as the
backends' own tests do. ``TS_STUDIO_SCREENSHOTS=1`` rewrites docs/images/studio-debug-*.png.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import json
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tensorsketch.testing import browser as test_browser

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "support_router.py"
IMAGES = test_browser.screenshot_folder(ROOT / "docs" / "images")

test_browser.skip_module_unless_chromium("the Studio debugger's browser tests")
test_browser.skip_module_unless_built(
    ROOT / "packages/tensorsketch-canvas/src/tensorsketch/canvas/studio/static/index.html",
    "nox -s studio-build",
)

from playwright.sync_api import Browser, Page, expect  # noqa: E402

from tensorsketch.canvas.studio.server import StudioServer  # noqa: E402
from tensorsketch.registry import create_backend  # noqa: E402
from tensorsketch.runtime.backends.base import Backend  # noqa: E402
from tensorsketch.testing import postgres_server  # noqa: E402
from tensorsketch.testing import runs as testing_runs  # noqa: E402
from tensorsketch.threads import alist_threads  # noqa: E402

pytestmark = pytest.mark.timeout(180)

#: The refund agent of tensorsketch.testing.runs as a file the Studio opens: its tool needs
#: an approval and records every refund it makes in ``REFUNDS`` (this process's list).
AGENT = """\
from tensorsketch.testing.runs import refund_agent

app = refund_agent()
"""


#: A graph whose node asks a person which desk takes the query (``interrupt``).
TRIAGE = """\
from tensorsketch import END, START, Context, Graph, Node, Schema, interrupt


class Ask(Schema):
    query: str
    desk: str = ""


class Triage(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        desk: str

    async def run(self, ctx: Context, inp: In) -> Out:
        desk = await interrupt(ctx, f"Which desk takes: {inp.query}?")
        return self.Out(desk=str(desk))


app = Graph(Ask).add(Triage).edge(START, "Triage").edge("Triage", END).compile()
"""


# -- backends ----------------------------------------------------------------------------------


def _open(url: str) -> Backend:
    scheme = url.partition("://")[0]
    return create_backend("sqlite" if scheme == "sqlite" else "postgres", dsn=url)


def _run(url: str, fn: Any) -> Any:
    """``await fn(backend)`` on a backend of ``url`` opened for the call, closed after."""

    async def go() -> Any:
        backend = _open(url)
        try:
            return await fn(backend)
        finally:
            await backend.aclose()

    # on a thread of its own: Playwright's sync API keeps an event loop running in this one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def backend_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('debug') / 'runs.db'}"
        return
    yield from postgres_server.private_database("studiodbg")


# -- the graph files, recorded threads, the Studio -------------------------------------------


def _load(path: Path) -> ModuleType:
    """The file as its own module (like the Studio imports it), to run its graph here."""
    name = f"_dbg_{path.stem}_{uuid.uuid4().hex[:6]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with test_browser.chromium() as chromium:
        yield chromium


class Studio:
    def __init__(self, path: Path, url: str, server: StudioServer, module: ModuleType) -> None:
        self.path = path
        self.url = url
        self.server = server
        self.module = module

    @property
    def app(self) -> Any:
        return self.module.app

    @property
    def sqlite(self) -> bool:
        return self.url.startswith("sqlite")


def _serve(tmp: Path, name: str, text: str, url: str) -> Iterator[Studio]:
    path = tmp / f"{name}.py"
    path.write_text(text, encoding="utf-8")
    server = StudioServer(path, port=0, project=tmp, backend=url).start()
    try:
        yield Studio(path, url, server, _load(path))
    finally:
        server.stop()


@pytest.fixture(scope="module")
def router(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    yield from _serve(
        tmp_path_factory.mktemp("router"),
        "support_router",
        EXAMPLE.read_text(encoding="utf-8"),
        backend_url,
    )


#: The support router with a routing function whose targets only the run knows: the canvas
#: draws it as a `route → ?` stub.
OPAQUE = (
    EXAMPLE.read_text(encoding="utf-8")
    .replace(
        '    return {"billing": "Billing", "tech": "Tech"}.get(state.intent, "Fallback")',
        '    return ROUTES.get(state.intent, "Fallback")',
    )
    .replace("def route(", 'ROUTES = {"billing": "Billing", "tech": "Tech"}\n\n\ndef route(')
)


@pytest.fixture(scope="module")
def opaque(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    yield from _serve(tmp_path_factory.mktemp("opaque"), "opaque_router", OPAQUE, backend_url)


@pytest.fixture(scope="module")
def agent(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    yield from _serve(tmp_path_factory.mktemp("agent"), "refunds", AGENT, backend_url)


def _page(browser: Browser, studio: Studio, errors: list[str]) -> Page:
    context = browser.new_context(viewport={"width": 1500, "height": 860})
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(studio.server.url)
    page.wait_for_function("window.__studio && window.__studio.state.connected", timeout=10_000)
    page.wait_for_selector("#dbg-panel:not([hidden])", timeout=10_000)
    return page


@pytest.fixture(scope="module")
def triage(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    yield from _serve(tmp_path_factory.mktemp("triage"), "triage", TRIAGE, backend_url)


def _page_for(browser: Browser, studio: Studio) -> Iterator[Page]:
    errors: list[str] = []
    p = _page(browser, studio, errors)
    try:
        yield p
    finally:
        p.context.close()
    assert not errors, f"errors in the page: {errors}"


@pytest.fixture
def page(browser: Browser, router: Studio) -> Iterator[Page]:
    """The router's Studio in a fresh browser context."""
    yield from _page_for(browser, router)


@pytest.fixture
def triage_page(browser: Browser, triage: Studio) -> Iterator[Page]:
    """The triage graph's Studio in a fresh browser context."""
    yield from _page_for(browser, triage)


@pytest.fixture
def agent_page(browser: Browser, agent: Studio) -> Iterator[Page]:
    """The refund agent's Studio in a fresh browser context."""
    yield from _page_for(browser, agent)


def _search(page: Page, text: str) -> None:
    page.fill("#dbg-search", text)
    # the list shows that search (not just: the search was typed)
    page.wait_for_function("q => window.__studio.debug.listed === q", arg=text, timeout=5000)


def _open_thread(page: Page, thread: str) -> None:
    _search(page, thread)
    page.click(f'.dbg-thread-row[data-thread="{thread}"]')
    # open: the thread loaded and its head's detail too (not the last thread's checkpoint)
    page.wait_for_function(
        "t => { const d = window.__studio.debug; return d.thread?.thread_id === t "
        "&& d.checkpoint?.id === d.thread.head; }",
        arg=thread,
        timeout=10_000,
    )


def _pick(page: Page, checkpoint_id: str) -> None:
    page.click(f'.tl-row[data-id="{checkpoint_id}"]')
    page.wait_for_function(
        "id => window.__studio.debug.checkpoint && window.__studio.debug.checkpoint.id === id",
        arg=checkpoint_id,
        timeout=10_000,
    )


def _contains(text: str) -> re.Pattern[str]:
    return re.compile(re.escape(text))


def _confirm(page: Page) -> None:
    expect(page.locator("#dbg-confirm")).to_be_visible()
    page.click("#dbg-confirm-ok")


def _shot(studio: Studio, page: Page, name: str, **clip: float) -> None:
    """A screenshot for docs/studio.md (from the SQLite run: its label reads ``runs.db``)."""
    if not studio.sqlite:
        return
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(150)
    page.screenshot(path=str(IMAGES / f"studio-debug-{name}.png"), clip=clip or None)  # type: ignore[arg-type]


# -- browse ------------------------------------------------------------------------------------


def test_browse_a_recorded_thread(router: Studio, page: Page) -> None:
    app = router.app
    billing, tech = "ticket-refund", "ticket-crash"

    async def record(b: Backend) -> list[Any]:
        await app.invoke({"query": "I'd like a refund on my invoice"}, thread_id=billing, backend=b)
        await app.invoke({"query": "The app shows an error"}, thread_id=tech, backend=b)
        return await app.aget_history(billing, b)

    history = _run(router.url, record)
    page.click("#dbg-refresh")
    _search(page, "ticket-")
    rows = page.locator(".dbg-thread-row")
    expect(rows).to_have_count(2)
    # the rows are a listbox the keyboard walks: ↓ to the next row, Enter opens it
    assert page.locator('.dbg-thread-row[tabindex="0"]').count() == 1
    rows.first.focus()
    page.keyboard.press("ArrowDown")
    second = rows.nth(1).get_attribute("data-thread")
    assert page.evaluate("document.activeElement.dataset.thread") == second
    page.keyboard.press("Enter")
    page.wait_for_function(
        "t => window.__studio.debug.thread?.thread_id === t", arg=second, timeout=10_000
    )
    expect(rows.nth(1)).to_have_attribute("aria-selected", "true")
    page.keyboard.press("ArrowUp")
    page.keyboard.press(" ")
    first = rows.first.get_attribute("data-thread")
    page.wait_for_function(
        "t => window.__studio.debug.thread?.thread_id === t", arg=first, timeout=10_000
    )
    expect(page.locator(f'.dbg-thread-row[data-thread="{billing}"]')).to_contain_text(
        f"{len(history)} checkpoints"
    )
    _search(page, "crash")
    expect(rows).to_have_count(1)
    _open_thread(page, billing)
    # every checkpoint in the timeline, the head picked, newest on top
    expect(page.locator(".tl-row")).to_have_count(len(history))
    assert page.locator(".tl-row").first.get_attribute("data-id") == history[-1].id
    # each checkpoint's state as the page shows it == the state the runtime reads there
    for cp in history:
        _pick(page, cp.id)
        shown = page.evaluate("window.__studio.debug.checkpoint.state")
        expected = _run(router.url, lambda b, c=cp: app.aget_state_at(billing, b, c.id)).model_dump(
            mode="json"
        )
        for channel, value in expected.items():
            assert shown[channel]["value"] == value, (cp.id, channel)
            card = page.locator(f'.dbg-channel[data-channel="{channel}"] pre')
            expect(card.first).to_contain_text(json.dumps(value)[:40].strip('"'))
    # the superstep where Classify ran: marked on the canvas, intent changed, Billing next
    classify = next(
        c
        for c in history
        if "Classify"
        in (
            page.evaluate(
                "id => window.__studio.debug.thread.checkpoints.find(c => c.id === id).ran", c.id
            )
            or []
        )
    )
    _pick(page, classify.id)
    expect(page.locator('.dbg-mark.ran[data-node="Classify"]')).to_have_count(1)
    expect(page.locator('.dbg-mark.next[data-node="Billing"]')).to_have_count(1)
    # the route it took, over the wire route's code names: Classify -> Billing, nothing else
    expect(page.locator('.dbg-route[data-from="Classify"][data-to="Billing"]')).to_have_count(1)
    expect(page.locator(".dbg-route")).to_have_count(1)
    expect(page.locator('.dbg-channel.changed[data-channel="intent"]')).to_have_count(1)
    # replay Classify on its recorded input: what it returns now
    page.click('[data-replay="Classify"]')
    expect(page.locator("#dbg-replay-out")).to_contain_text('"intent": "billing"')
    _search(page, "")
    _shot(router, page, "checkpoint")
    # every control of the panels has a name (the icon buttons an aria-label, not only a
    # title), an edited value's text box too
    page.click('[data-edit="intent"]')
    expect(page.locator('[data-edit-area="intent"]')).to_be_visible()
    assert page.evaluate(UNNAMED) == []


def test_threads_page_on_and_long_values_expand(router: Studio, page: Page) -> None:
    app = router.app
    long_query = "refund " + "x" * 6000

    async def record(b: Backend) -> None:
        for n in range(42):  # more than a page (40) of the threads panel
            await app.aupdate_state(f"bulk-{n:02d}", b, {"query": f"question {n}"})
        await app.invoke({"query": long_query}, thread_id="long-query", backend=b)

    _run(router.url, record)
    page.click("#dbg-refresh")
    _search(page, "bulk-")
    rows = page.locator(".dbg-thread-row")
    expect(rows).to_have_count(40)
    page.click("#dbg-more")
    expect(rows).to_have_count(42)
    expect(page.locator("#dbg-more")).to_be_hidden()
    # newest first: the last one written is on top
    assert rows.first.get_attribute("data-thread") == "bulk-41"
    _open_thread(page, "long-query")
    card = page.locator('.dbg-channel[data-channel="query"]')
    expect(card).to_contain_text("truncated")
    assert len(card.locator("pre").inner_text()) < 3000
    card.locator("[data-expand]").click()
    expect(card.locator("[data-expand]")).to_have_count(0)
    assert json.loads(card.locator("pre").inner_text()) == long_query


def test_a_long_thread_draws_only_the_rows_in_view(router: Studio, page: Page) -> None:
    app = router.app
    thread = "long-history"
    edits = 150

    async def record(b: Backend) -> list[Any]:
        for n in range(edits):
            await app.aupdate_state(thread, b, {"answer": f"draft {n}"})
        return await app.aget_history(thread, b)

    history = _run(router.url, record)
    assert len(history) == edits
    page.click("#dbg-refresh")
    _open_thread(page, thread)
    assert page.evaluate("window.__studio.debug.thread.checkpoints.length") == edits
    in_dom = page.locator(".tl-row").count()
    assert 0 < in_dom < 60, in_dom  # the rows in view and a margin, not 150
    # the oldest row, at the bottom: drawn once scrolled to
    oldest = f'.tl-row[data-id="{history[0].id}"]'
    expect(page.locator(oldest)).to_have_count(0)
    page.evaluate("document.querySelector('.tl').scrollTop = 1e9")
    expect(page.locator(oldest)).to_have_count(1)
    assert page.locator(".tl-row").count() < 60
    # and the keyboard walks the timeline: ↑ from the oldest is the next one
    _pick(page, history[0].id)
    page.focus(".tl")
    page.keyboard.press("ArrowUp")
    page.wait_for_function(
        "id => window.__studio.debug.checkpoint?.id === id", arg=history[1].id, timeout=10_000
    )
    assert page.evaluate("window.__studio.debug.checkpoint.state.answer.value") == "draft 1"


# -- edit and fork -----------------------------------------------------------------------------


def test_edit_a_value_and_fork(router: Studio, page: Page) -> None:
    app = router.app
    origin = "forkme"

    async def record(b: Backend) -> list[Any]:
        await app.invoke({"query": "I'd like a refund on my invoice"}, thread_id=origin, backend=b)
        return await app.aget_history(origin, b)

    history = _run(router.url, record)
    page.click("#dbg-refresh")
    _open_thread(page, origin)
    # the input checkpoint (Classify next): a bad value first, then a new query
    _pick(page, history[0].id)
    page.click('[data-edit="intent"]')
    area = page.locator('[data-edit-area="intent"]')
    # a value the state schema refuses: the schema's message next to the field, nothing written
    area.fill('"sales"')
    page.click("#dbg-fork")
    _confirm(page)
    error = page.locator('[data-error-for="intent"]')
    expect(error).to_be_visible()
    expect(error).to_contain_text("intent")
    _shot(router, page, "edit-error")
    before = set(_run(router.url, _threads))
    page.click('[data-cancel-edit="intent"]')
    page.click('[data-edit="query"]')
    page.fill('[data-edit-area="query"]', '"The app shows an error"')
    page.click("#dbg-fork")
    # what the fork does with a side effect the origin ran after the fork point (#47): the
    # safe default stops before it; "reuse" replays the origin's result of an identical call
    choice = page.locator("#dbg-confirm-choice")
    expect(choice).to_have_value("")
    choice.select_option("reuse")
    _confirm(page)
    page.wait_for_function(
        "t => window.__studio.debug.thread && window.__studio.debug.thread.thread_id !== t",
        arg=origin,
        timeout=15_000,
    )
    new = page.evaluate("window.__studio.debug.thread.thread_id")
    assert new not in before
    # the fork ran from the edited input: Classify routed it to Tech this time
    state = _run(router.url, lambda b: app.aget_state(new, b))
    assert state.query == "The app shows an error"
    assert state.intent == "tech" and state.answer.startswith("[Tech]")
    # the original thread is untouched
    assert _run(router.url, lambda b: app.aget_state(origin, b)).answer.startswith("[Billing]")
    assert len(_run(router.url, lambda b: app.aget_history(origin, b))) == len(history)

    # update in place: only at the head (earlier checkpoints offer the fork alone)
    _open_thread(page, origin)
    _pick(page, history[0].id)
    page.click('[data-edit="answer"]')
    expect(page.locator("#dbg-update")).to_be_disabled()
    page.click('[data-cancel-edit="answer"]')
    _pick(page, history[-1].id)
    page.click('[data-edit="answer"]')
    page.fill('[data-edit-area="answer"]', '"refund sent"')
    page.click("#dbg-update")
    _confirm(page)
    page.wait_for_function(
        "n => window.__studio.debug.thread.checkpoints.length > n && !window.__studio.debug.busy",
        arg=len(history),
        timeout=10_000,
    )
    after = _run(router.url, lambda b: app.aget_history(origin, b))
    assert len(after) == len(history) + 1
    assert page.evaluate("window.__studio.debug.checkpoint.id") == after[-1].id
    assert _run(router.url, lambda b: app.aget_state(origin, b)).answer == "refund sent"


async def _threads(b: Backend) -> list[str]:
    return await alist_threads(b)


# -- step --------------------------------------------------------------------------------------


def test_a_slow_refresh_never_undoes_opening_another_thread(router: Studio, page: Page) -> None:
    """A refresh of the open thread whose answer comes back after the user opened another
    thread is dropped: the user's click wins, however the answers race."""
    app = router.app

    async def record(b: Backend) -> None:
        for thread in ("slow-a", "slow-b"):
            await app.invoke({"query": "My invoice is wrong"}, thread_id=thread, backend=b)

    _run(router.url, record)
    page.click("#dbg-refresh")
    _open_thread(page, "slow-a")
    # Hold the answer to the next read of thread slow-a for 1.5 s (in the page's fetch).
    page.evaluate(
        """() => { const plain = window.fetch; window.fetch = async (url, init) => {
             const res = await plain(url, init);
             if (String(url).endsWith("/api/debug/threads/slow-a")) {
               window.fetch = plain; await new Promise((r) => setTimeout(r, 1500));
             }
             return res; }; }"""
    )
    page.click("#dbg-reload-thread")  # the refresh of slow-a, now slow
    _open_thread(page, "slow-b")
    page.wait_for_timeout(2500)  # the held answer has come back by now
    assert page.evaluate("window.__studio.debug.thread.thread_id") == "slow-b"
    expect(page.locator("#dbg-thread .tid")).to_have_text("slow-b")


def test_a_fork_is_a_branch_of_its_origin_and_links_back(router: Studio, page: Page) -> None:
    app = router.app
    origin = "lanes"

    async def record(b: Backend) -> list[Any]:
        await app.invoke({"query": "My invoice is wrong"}, thread_id=origin, backend=b)
        return await app.aget_history(origin, b)

    history = _run(router.url, record)
    at = history[1]
    page.click("#dbg-refresh")
    _open_thread(page, origin)
    expect(page.locator(".tl-fork")).to_have_count(0)
    expect(page.locator(".tl-origin")).to_have_count(0)
    _pick(page, at.id)
    page.click('[data-edit="answer"]')
    page.fill('[data-edit-area="answer"]', '"draft"')
    page.click("#dbg-fork")
    _confirm(page)
    page.wait_for_function(
        "t => window.__studio.debug.thread && window.__studio.debug.thread.thread_id !== t",
        arg=origin,
        timeout=15_000,
    )
    fork = page.evaluate("window.__studio.debug.thread.thread_id")
    # the fork ends in a row naming where it came from
    back = page.locator(".tl-origin")
    expect(back).to_have_text(f"↓ forked from {origin} @ step {at.step}")
    expect(page.locator(".tl-row")).to_have_count(
        len(_run(router.url, lambda b: app.aget_history(fork, b)))
    )
    back.click()
    page.wait_for_function(
        "([t, id]) => { const d = window.__studio.debug; return d.thread?.thread_id === t "
        "&& d.checkpoint?.id === id; }",
        arg=[origin, at.id],
        timeout=10_000,
    )
    # the origin's timeline: the fork point branches off to the fork's thread
    chip = page.locator(f'.tl-row[data-id="{at.id}"] .tl-fork')
    expect(chip).to_have_count(1)
    expect(chip).to_have_attribute("data-thread", fork)
    expect(chip).to_contain_text(fork)
    expect(page.locator(".tl-branch")).to_have_count(1)
    expect(page.locator(".tl-origin")).to_have_count(0)
    _shot(router, page, "fork", x=0, y=0, width=332, height=420)
    chip.click()
    page.wait_for_function(
        "t => { const d = window.__studio.debug; return d.thread?.thread_id === t "
        "&& d.checkpoint?.id === d.thread.head; }",
        arg=fork,
        timeout=10_000,
    )


def test_step_superstep_by_superstep(router: Studio, page: Page) -> None:
    app = router.app
    thread = "step"

    async def start(b: Backend) -> None:
        await app.invoke(
            {"query": "The app shows an error"},
            thread_id=thread,
            backend=b,
            interrupt_before="Classify",
        )

    _run(router.url, start)
    page.click("#dbg-refresh")
    _open_thread(page, thread)
    expect(page.locator('.dbg-mark.next[data-node="Classify"]')).to_have_count(1)
    # the confirmation opens on cancel: Enter cancels, nothing runs
    before = len(_run(router.url, lambda b: app.aget_history(thread, b)))
    page.click("#dbg-step")
    expect(page.locator("#dbg-confirm")).to_be_visible()
    assert page.evaluate("document.activeElement.id") == "dbg-confirm-cancel"
    page.keyboard.press("Enter")
    expect(page.locator("#dbg-confirm")).to_be_hidden()
    page.wait_for_timeout(300)
    assert len(_run(router.url, lambda b: app.aget_history(thread, b))) == before
    for expect_ran in ("Classify", "Tech"):
        count = len(_run(router.url, lambda b: app.aget_history(thread, b)))
        page.click("#dbg-step")
        _confirm(page)
        page.wait_for_function(
            "n => window.__studio.debug.thread.checkpoints.length > n && !window.__studio.debug.busy",
            arg=count,
            timeout=15_000,
        )
        history = _run(router.url, lambda b: app.aget_history(thread, b))
        head = page.evaluate("window.__studio.debug.thread.head")
        assert head == history[-1].id
        page.wait_for_function(
            "id => window.__studio.debug.checkpoint?.id === id", arg=head, timeout=10_000
        )
        expect(page.locator(f'.dbg-mark.ran[data-node="{expect_ran}"]')).to_have_count(1)
        # the state panel shows the thread's state after this superstep
        shown = page.evaluate("window.__studio.debug.checkpoint.state")
        now = _run(router.url, lambda b: app.aget_state(thread, b)).model_dump(mode="json")
        assert {k: v["value"] for k, v in shown.items()} == now
        if expect_ran == "Classify":
            _shot(router, page, "step")
    state = _run(router.url, lambda b: app.aget_state(thread, b))
    assert state.answer.startswith("[Tech]")
    # Tech ends the graph: that step still stopped after it, and the next one ends the run
    expect(page.locator("#dbg-waiting")).to_contain_text("breakpoint")
    page.click("#dbg-step")
    _confirm(page)
    page.wait_for_function(
        "() => window.__studio.debug.thread?.status === 'completed' && !window.__studio.debug.busy",
        timeout=15_000,
    )
    # Found by QA: a step on the completed thread said "ran Tech" though nothing ran. Now
    # step and run are off, saying why; and a step that runs nothing says so.
    for button in ("#dbg-step", "#dbg-run"):
        expect(page.locator(button)).to_be_disabled()
        expect(page.locator(button)).to_have_attribute("title", _contains("completed"))
    head = page.evaluate("window.__studio.debug.thread.head")
    # A stale page: the button enabled and clicked in one go, so a live refresh that redraws
    # the toolbar in between cannot swap in a disabled button under the click.
    page.evaluate(
        "() => { const b = document.getElementById('dbg-step'); b.disabled = false; b.click(); }"
    )
    _confirm(page)
    expect(page.locator("#toast")).to_contain_text("Nothing ran: the thread is completed")
    assert _run(router.url, lambda b: app.aget_history(thread, b))[-1].id == head

    # ▶ run: from a breakpoint to the end in one go
    other = "run-through"

    async def paused(b: Backend) -> None:
        await app.invoke(
            {"query": "Hello!"}, thread_id=other, backend=b, interrupt_before="Classify"
        )

    _run(router.url, paused)
    page.click("#dbg-refresh")
    _open_thread(page, other)
    expect(page.locator("#dbg-waiting")).to_contain_text("breakpoint")
    page.click("#dbg-run")
    _confirm(page)
    page.wait_for_function(
        "() => window.__studio.debug.thread?.status === 'completed' && !window.__studio.debug.busy",
        timeout=15_000,
    )
    expect(page.locator("#dbg-waiting")).to_have_count(0)
    assert _run(router.url, lambda b: app.aget_state(other, b)).answer.startswith("[General]")


# -- small windows, long values, the banner ---------------------------------------------------


#: The controls of the page with no accessible name: an input without a label, a button
#: whose text is only a symbol and has no aria-label (a title alone is not a name).
UNNAMED = """() => [...document.querySelectorAll('button, input, select, textarea, [tabindex]')]
    .filter((e) => e.offsetParent && e.tabIndex >= 0 && !e.closest('[hidden]'))
    .filter((e) => {
        if (e.getAttribute('aria-label') || e.getAttribute('aria-labelledby')) return false;
        if (e.labels && e.labels.length) return false;
        if (e.tagName === 'INPUT' || e.tagName === 'SELECT' || e.tagName === 'TEXTAREA')
            return true;
        return !/[A-Za-z]/.test(e.textContent || '');
    })
    .map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className} ${e.textContent}`)"""


def _inside(page: Page, inner: str, outer: str) -> bool:
    return bool(
        page.evaluate(
            """([i, o]) => { const a = document.querySelector(i).getBoundingClientRect();
                const b = document.querySelector(o).getBoundingClientRect();
                return a.left >= b.left && a.right <= b.right && a.top >= b.top
                    && a.bottom <= b.bottom; }""",
            [inner, outer],
        )
    )


def test_a_small_window_keeps_the_next_node_in_sight(router: Studio, browser: Browser) -> None:
    """Found by QA: at 900x600 the two panels leave a narrow canvas, the fit stops at a
    legible zoom, and the node marked next was off-screen. The view centres on it."""
    app = router.app
    thread = "small-window"
    _run(
        router.url,
        lambda b: app.invoke(
            {"query": "I'd like a refund"}, thread_id=thread, backend=b, interrupt_before="Billing"
        ),
    )
    context = browser.new_context(viewport={"width": 900, "height": 600})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(router.server.url)
        page.wait_for_selector("#dbg-panel:not([hidden])", timeout=10_000)
        _open_thread(page, thread)
        mark = '.dbg-mark.next[data-node="Billing"]'
        expect(page.locator(mark)).to_have_count(1)
        page.wait_for_function(
            "() => { const m = document.querySelector('.dbg-mark.next').getBoundingClientRect();"
            " const c = document.getElementById('stage').getBoundingClientRect();"
            " return m.left >= c.left && m.right <= c.right; }",
            timeout=5000,
        )
        assert _inside(page, mark, "#stage")
        # the toolbar wraps rather than running off the window, and the panels start below it
        bar = page.evaluate(
            "(() => { const t = document.getElementById('toolbar'); return [t.scrollWidth, "
            "t.clientWidth, t.getBoundingClientRect().bottom, "
            "document.getElementById('dbg-panel').getBoundingClientRect().top]; })()"
        )
        assert bar[0] <= bar[1] and bar[3] == pytest.approx(bar[2], abs=1), bar
        for button in page.locator("#toolbar button:visible").all():
            assert _inside(page, f"#{button.get_attribute('id')}", "#toolbar")
    finally:
        context.close()
    assert not errors, errors


def test_long_values_stay_inside_the_state_panel(triage: Studio, triage_page: Page) -> None:
    """Found by QA: a changed value too long to diff showed its old value on one line that
    scrolled the panel sideways. And an edit of a waiting thread read "waiting"."""
    app, page = triage.app, triage_page
    thread = "long-edits"

    async def record(b: Backend) -> None:
        await app.invoke({"query": "refund please"}, thread_id=thread, backend=b)
        await app.aupdate_state(thread, b, {"query": "a" * 3000})
        await app.aupdate_state(thread, b, {"query": "b" * 3000})

    _run(triage.url, record)
    page.click("#dbg-refresh")
    _open_thread(page, thread)
    was = '.dbg-channel[data-channel="query"] .hint.was code'
    expect(page.locator(was)).to_be_visible()
    width = page.evaluate(
        "(() => { const p = document.getElementById('dbg-state'); "
        "return [p.scrollWidth, p.clientWidth]; })()"
    )
    assert width[0] <= width[1], width
    page.locator(was).scroll_into_view_if_needed()
    assert _inside(page, was, "#dbg-state")
    assert page.locator(was).get_attribute("title")  # the longer preview on hover
    # the two edits say what they are, though the thread still waits for its answer
    texts = page.locator(".tl-row .tl-ran").all_inner_texts()
    assert texts[:2] == ["state edited", "state edited"], texts
    expect(page.locator("#dbg-waiting")).to_be_visible()


def test_the_parse_error_banner_sits_above_the_panels(tmp_path: Path, browser: Browser) -> None:
    """Found by QA: the banner of a file that does not parse covered the top of the
    debugger's panels."""
    path = tmp_path / "support_router.py"
    good = EXAMPLE.read_text(encoding="utf-8")
    path.write_text(good, encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    app = _load(path).app
    _run(url, lambda b: app.invoke({"query": "Hello!"}, thread_id="banner", backend=b))
    with StudioServer(path, port=0, project=tmp_path, backend=url) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_selector("#dbg-panel:not([hidden])", timeout=10_000)
        _open_thread(page, "banner")
        for panel in ("#dbg-panel", "#dbg-state"):
            assert (
                page.evaluate(f"document.querySelector('{panel}').getBoundingClientRect().top")
                == 46
            )
        path.write_text(good + "\napp = (\n", encoding="utf-8")
        expect(page.locator("#banner")).to_be_visible(timeout=3000)
        below = (
            "() => ['dbg-panel', 'dbg-state'].every((id) => document.getElementById(id)"
            ".getBoundingClientRect().top >= document.getElementById('banner')"
            ".getBoundingClientRect().bottom - 0.5)"
        )
        page.wait_for_function(below, timeout=3000)
        banner = page.locator("#banner").bounding_box()
        assert banner and banner["x"] == 0 and banner["y"] == 46  # the whole width, one place
        path.write_text(good, encoding="utf-8")
        expect(page.locator("#banner")).to_be_hidden(timeout=3000)
        page.wait_for_function(
            "() => document.getElementById('dbg-panel').getBoundingClientRect().top === 46"
        )
        page.close()


# -- approve -----------------------------------------------------------------------------------


def test_approve_a_suspended_tool_call(agent: Studio, agent_page: Page) -> None:
    app = agent.app
    page = agent_page
    thread = "order-A17"
    testing_runs.REFUNDS.clear()

    async def start(b: Backend) -> None:
        await app.invoke(
            {"messages": [{"role": "user", "content": "A-17"}]}, thread_id=thread, backend=b
        )

    _run(agent.url, start)
    assert testing_runs.REFUNDS == []  # suspended before the tool ran
    page.click("#dbg-refresh")
    _open_thread(page, thread)
    card = page.locator("#dbg-waiting")
    expect(card).to_contain_text("approval")
    expect(card).to_contain_text("refund")
    expect(card).to_contain_text("A-17")
    _shot(agent, page, "approval", x=0, y=0, width=332, height=440)
    page.click("#dbg-approve")
    _confirm(page)
    page.wait_for_function(
        "window.__studio.debug.thread && !window.__studio.debug.thread.waiting && !window.__studio.debug.busy",
        timeout=15_000,
    )
    assert testing_runs.REFUNDS == ["A-17"]  # ran exactly once
    # a second approve has nothing to resume: refused, the tool does not run again
    status = page.evaluate(
        """async (t) => (await fetch(`/api/debug/threads/${encodeURIComponent(t)}/resume`, {method: "POST",
            headers: {"X-Studio-Token": new URLSearchParams(location.search).get("token"),
                      "Content-Type": "application/json"},
            body: JSON.stringify({action: "approve", confirm: true})})).status""",
        thread,
    )
    assert status in (404, 409)
    assert testing_runs.REFUNDS == ["A-17"]
    messages = _run(agent.url, lambda b: app.aget_state(thread, b)).messages
    assert messages[-1].text == "done: refunded A-17"


def test_the_thread_view_names_the_assistant_its_run_ran_with(
    agent: Studio, agent_page: Page
) -> None:
    """A run submitted with an assistant (a versioned configuration of the agent, #46): the
    thread view says which one and which version; a thread run on the bare graph says
    nothing of the kind."""
    from tensorsketch.runs import AsyncRunner

    app = agent.app
    page = agent_page
    thread, bare = "order-with-assistant", "order-bare"

    async def start(b: Backend) -> tuple[str, int]:
        async with AsyncRunner(app, backend=b) as runner:
            first = await runner.assistants.create("polite", {"system_prompt": "Be brief."})
            second = await runner.assistants.update("polite", {"system_prompt": "Be kind."})
            assert second.version == 2
            for thread_id, assistant in ((thread, "polite"), (bare, None)):
                record = await runner.submit(
                    {"messages": [{"role": "user", "content": "B-2"}]},
                    thread_id=thread_id,
                    assistant=assistant,
                )
                done = await runner.await_run(record.run_id, timeout=30)
                assert done.status == "suspended", done  # the refund waits for an approval
        return first.assistant_id, second.version

    assistant_id, version = _run(agent.url, start)
    page.click("#dbg-refresh")
    _open_thread(page, thread)
    line = page.locator("#dbg-assistant")
    expect(line).to_have_text(f"assistant polite v{version}")
    expect(line).to_have_attribute("title", _contains(assistant_id))
    shown = page.evaluate("window.__studio.debug.thread.run.assistant")
    assert shown == {"id": assistant_id, "name": "polite", "version": version}
    _shot(agent, page, "assistant", x=0, y=0, width=332, height=330)
    _open_thread(page, bare)
    expect(page.locator("#dbg-assistant")).to_have_count(0)


def test_reject_with_a_reason_the_agent_is_told(agent: Studio, agent_page: Page) -> None:
    """#41 item 5: reject has a field for the reason, and the agent's thread carries it."""
    app = agent.app
    page = agent_page
    thread = "order-B22"
    testing_runs.REFUNDS.clear()

    async def start(b: Backend) -> None:
        await app.invoke(
            {"messages": [{"role": "user", "content": "B-22"}]}, thread_id=thread, backend=b
        )

    _run(agent.url, start)
    page.click("#dbg-refresh")
    _open_thread(page, thread)
    expect(page.locator("#dbg-waiting")).to_contain_text("approval")
    page.fill("#dbg-reject-reason", "order B-22 is not eligible")
    page.click("#dbg-reject")
    expect(page.locator("#dbg-confirm")).to_contain_text("order B-22 is not eligible")
    _confirm(page)
    page.wait_for_function(
        "window.__studio.debug.thread && !window.__studio.debug.thread.waiting && !window.__studio.debug.busy",
        timeout=15_000,
    )
    assert testing_runs.REFUNDS == []  # the tool never ran
    messages = _run(agent.url, lambda b: app.aget_state(thread, b)).messages
    assert any("not eligible" in (m.text or "") for m in messages), [m.text for m in messages]


def test_answer_a_question(triage: Studio, triage_page: Page) -> None:
    app, page = triage.app, triage_page
    thread = "ask-1"
    _run(triage.url, lambda b: app.invoke({"query": "refund please"}, thread_id=thread, backend=b))
    page.click("#dbg-refresh")
    _open_thread(page, thread)
    card = page.locator("#dbg-waiting")
    expect(card).to_contain_text("Which desk takes: refund please?")
    page.fill("#dbg-answer", "billing")
    page.click("#dbg-answer-ok")
    _confirm(page)
    page.wait_for_function(
        "() => window.__studio.debug.thread?.status === 'completed' && !window.__studio.debug.busy",
        timeout=15_000,
    )
    assert _run(triage.url, lambda b: app.aget_state(thread, b)).desk == "billing"


# -- hostile requests --------------------------------------------------------------------------


def test_hostile_requests_from_the_page_are_refused(router: Studio, page: Page) -> None:
    app = router.app
    thread = "hostile"
    _run(router.url, lambda b: app.invoke({"query": "Hello!"}, thread_id=thread, backend=b))
    before = len(_run(router.url, lambda b: app.aget_history(thread, b)))
    results = page.evaluate(
        """async (t) => {
            const token = new URLSearchParams(location.search).get("token");
            const head = (await (await fetch(`/api/debug/threads/${t}`,
                {headers: {"X-Studio-Token": token}})).json()).head;
            const post = (path, body, headers) => fetch(path, {method: "POST",
                headers: {"Content-Type": "application/json", ...headers}, body: JSON.stringify(body)})
                .then(r => r.status);
            return {
                // no token: a script on another page cannot know it
                noToken: await post(`/api/debug/threads/${t}/update`,
                    {checkpoint_id: head, values: {answer: "x"}, confirm: true}, {}),
                // the token but no confirmation: every write is a deliberate action
                noConfirm: await post(`/api/debug/threads/${t}/update`,
                    {checkpoint_id: head, values: {answer: "x"}}, {"X-Studio-Token": token}),
                // a checkpoint of another thread, through this thread's route
                otherThread: await post(`/api/debug/threads/${t}-nope/fork`,
                    {checkpoint_id: head, values: {}, confirm: true}, {"X-Studio-Token": token}),
                // a DSN where a value goes is just a bad value, never a connection
                badBody: await post(`/api/debug/threads/${t}/update`, "postgresql://evil/x",
                    {"X-Studio-Token": token}),
            };
        }""",
        thread,
    )
    assert results["noToken"] in (401, 403), results
    assert results["noConfirm"] == 403, results
    assert results["otherThread"] == 404, results
    assert results["badBody"] == 400, results
    assert len(_run(router.url, lambda b: app.aget_history(thread, b))) == before
    assert _run(router.url, lambda b: app.aget_state(thread, b)).answer.startswith("[General]")


# -- live --------------------------------------------------------------------------------------


def test_pause_a_live_run_on_its_thread(router: Studio, page: Page) -> None:
    from tensorsketch import InMemoryTracer, MultiTracer
    from tensorsketch.observability.export import http_span_sink

    app = router.app
    thread = "live-1"
    page.click("#live")
    expect(page.locator("#pause-live")).to_be_visible()
    # a traced durable run: its spans go to the Studio, its checkpoints to the backend
    sink = http_span_sink(router.server.base_url + "/api/trace")

    async def traced(b: Backend) -> None:
        tracer = MultiTracer(InMemoryTracer(), sink)
        await app.invoke({"query": "refund please"}, thread_id=thread, backend=b, tracer=tracer)

    _run(router.url, traced)
    assert sink.flush(10)
    sink.close()
    expect(page.locator('.trace-ring[data-node="Billing"]')).to_have_count(1, timeout=15_000)
    page.click("#pause-live")
    page.wait_for_function(
        "t => window.__studio.debug.thread?.thread_id === t && "
        "window.__studio.debug.checkpoint?.id === window.__studio.debug.thread.head",
        arg=thread,
        timeout=10_000,
    )
    history = _run(router.url, lambda b: app.aget_history(thread, b))
    assert page.evaluate("window.__studio.debug.thread.head") == history[-1].id
    # the checkpoint's marks replace the overlay's rings while it is open
    expect(page.locator('.dbg-mark.ran[data-node="Billing"]')).to_have_count(1)
    expect(page.locator("#overlay")).to_be_hidden()
    # a write from elsewhere (the same API, as another tab would call it) reaches the open
    # thread through the `debug` event: no reload, no click
    status = page.evaluate(
        """async ([t, head]) => (await fetch(`/api/debug/threads/${t}/update`, {method: "POST",
            headers: {"X-Studio-Token": new URLSearchParams(location.search).get("token"),
                      "Content-Type": "application/json"},
            body: JSON.stringify({checkpoint_id: head, values: {answer: "edited"}, confirm: true})
        })).status""",
        [thread, history[-1].id],
    )
    assert status == 200
    page.wait_for_function(
        "n => window.__studio.debug.thread.checkpoints.length > n", arg=len(history), timeout=10_000
    )
    assert _run(router.url, lambda b: app.aget_state(thread, b)).answer == "edited"
    page.click("#dbg-state-close")
    expect(page.locator("#overlay")).to_be_visible()
    # the other way round: opening a thread in the panel points the overlay at its run
    sink = http_span_sink(router.server.base_url + "/api/trace")

    async def other(b: Backend) -> None:
        tracer = MultiTracer(InMemoryTracer(), sink)
        await app.invoke({"query": "crash"}, thread_id="live-2", backend=b, tracer=tracer)

    _run(router.url, other)
    assert sink.flush(10)
    sink.close()
    run_of = """t => window.__studio.state.runs.find(r => r.thread_id === t)?.run"""
    page.wait_for_function(f"() => !!({run_of})('live-2')", timeout=15_000)
    live2 = page.evaluate(run_of, "live-2")
    expect(page.locator("#run-picker")).to_have_value(live2)  # follows the newest run
    _open_thread(page, thread)
    expect(page.locator("#run-picker")).to_have_value(page.evaluate(run_of, thread))


# -- without a backend; the timeline's lanes ---------------------------------------------------


def test_without_a_backend_the_page_is_the_canvas(tmp_path: Path, browser: Browser) -> None:
    path = tmp_path / "support_router.py"
    path.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        page.wait_for_timeout(300)  # the status answer (debugger off) has come back
        expect(page.locator("#debug-toggle")).to_be_hidden()
        assert page.locator("#dbg-panel").count() == 0
        assert not page.evaluate("document.body.classList.contains('dbg-left')")
        assert page.evaluate("window.__studio.debug.status.enabled") is False
        page.close()


def _row(cid: str, parent: str | None, head: bool = True) -> dict[str, Any]:
    return {"id": cid, "parent_id": parent, "step": 0, "ran": [], "next": [],
            "created_at": None, "on_head_branch": head, "error": None}  # fmt: skip


def test_timeline_lanes(tmp_path: Path, browser: Browser) -> None:
    """The tree layout on synthetic histories (the runtime forks into new threads, so a
    thread with branches of its own is rare; the timeline still draws one as lanes)."""
    path = tmp_path / "support_router.py"
    path.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page()
        page.goto(server.url)
        page.wait_for_function("!!(window.__studio && window.__studio.layoutTree)")
        lay = "rows => { const l = window.__studio.layoutTree(rows); " \
              "return {ids: l.rows.map(r => r.id), lane: l.lane, lanes: l.lanes, " \
              "forks: [...l.forks].sort()}; }"  # fmt: skip
        # a chain: one lane, newest on top
        chain = page.evaluate(lay, [_row("a", None), _row("b", "a"), _row("c", "b")])
        assert chain == {"ids": ["c", "b", "a"], "lane": [0, 0, 0], "lanes": 1, "forks": []}
        # b forks: the head branch (c, e) keeps lane 0, the other branch (d) takes lane 1
        forked = [_row("a", None), _row("b", "a"), _row("c", "b"), _row("d", "b", head=False),
                  _row("e", "c")]  # fmt: skip
        out = page.evaluate(lay, forked)
        lanes = dict(zip(out["ids"], out["lane"], strict=True))
        assert lanes == {"a": 0, "b": 0, "c": 0, "e": 0, "d": 1} and out["lanes"] == 2
        assert out["forks"] == ["c", "d"]
        # two side branches that do not overlap in rows share lane 1
        seq = [_row("a", None), _row("x", "a", head=False), _row("b", "a"),
               _row("y", "b", head=False), _row("c", "b")]  # fmt: skip
        out = page.evaluate(lay, seq)
        lanes = dict(zip(out["ids"], out["lane"], strict=True))
        assert lanes["x"] == lanes["y"] == 1 and out["lanes"] == 2
        # twenty branches at once: capped at six lanes
        many = [_row("root", None)] + [_row(f"f{i}", "root", head=False) for i in range(20)]
        assert page.evaluate(lay, many)["lanes"] == 6
        page.close()


def test_a_file_that_does_not_import_is_read_only(tmp_path: Path, browser: Browser) -> None:
    """Threads stay readable; the write buttons are off and the panel says why."""
    path = tmp_path / "support_router.py"
    path.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    app = _load(path).app
    _run(url, lambda b: app.invoke({"query": "Hello!"}, thread_id="kept", backend=b))
    # the file as it is now: it extracts (the canvas draws it) but raises when imported
    path.write_text(path.read_text(encoding="utf-8") + '\nraise RuntimeError("half-edited")\n')
    with StudioServer(path, port=0, project=tmp_path, backend=url) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_selector(".dbg-error")
        expect(page.locator(".dbg-error")).to_contain_text("half-edited")
        _open_thread(page, "kept")
        expect(page.locator("#dbg-step")).to_be_disabled()
        expect(page.locator("#dbg-run")).to_be_disabled()
        expect(page.locator("[data-edit]")).to_have_count(0)
        expect(page.locator('.dbg-channel[data-channel="answer"]')).to_contain_text("[General]")
        page.close()


def test_an_edit_applied_as_a_node_reroutes_the_fork(router: Studio, page: Page) -> None:
    """#41 defect 3: at the checkpoint where Billing is next, intent edited to "tech". The page
    says the plan stays unless the edit is applied as a node; applied as Classify, the fork
    runs Tech."""
    app = router.app
    origin = "reroute-me"

    async def record(b: Backend) -> list[Any]:
        await app.invoke(
            {"query": "I'd like a refund on my invoice"},
            thread_id=origin,
            backend=b,
            interrupt_before=["Billing"],
        )
        return await app.aget_history(origin, b)

    history = _run(router.url, record)
    page.click("#dbg-refresh")
    _open_thread(page, origin)  # opens the head: the breakpoint before Billing
    assert page.evaluate("window.__studio.debug.checkpoint.id") == history[-1].id
    page.click('[data-edit="intent"]')
    page.fill('[data-edit-area="intent"]', '"tech"')
    note = page.locator("#dbg-route-note")
    expect(note).to_contain_text("Next runs Billing whatever the edit")
    expect(note).to_contain_text("node Classify")
    page.select_option("#dbg-as-node", "Classify")
    expect(page.locator("#dbg-route-note")).to_contain_text("Classify's successors run next")
    _shot(router, page, "as-node")
    page.click("#dbg-fork")
    expect(page.locator("#dbg-confirm")).to_contain_text("Applied as node Classify")
    _confirm(page)
    page.wait_for_function(
        "t => window.__studio.debug.thread && window.__studio.debug.thread.thread_id !== t",
        arg=origin,
        timeout=15_000,
    )
    new = page.evaluate("window.__studio.debug.thread.thread_id")
    state = _run(router.url, lambda b: app.aget_state(new, b))
    assert state.intent == "tech" and state.answer.startswith("[Tech]")


def test_a_computed_route_is_drawn_from_the_checkpoint(opaque: Studio, browser: Browser) -> None:
    """#41 defect 4: the canvas shows `route → ?` (the code does not name the targets); the
    checkpoint where Classify ran and Tech is next draws the route that ran, Classify → Tech."""
    app = opaque.app
    thread = "computed-route"

    async def record(b: Backend) -> list[Any]:
        await app.invoke({"query": "The app shows an error"}, thread_id=thread, backend=b)
        return await app.aget_history(thread, b)

    history = _run(opaque.url, record)
    at = next(c for c in history if "Tech" in c.next)
    for page in _page_for(browser, opaque):
        expect(page.locator("g.box.stub")).to_have_text("route → ?")
        _open_thread(page, thread)
        _pick(page, at.id)
        route = page.locator('g.dbg-route.computed[data-from="Classify"][data-to="Tech"]')
        expect(route).to_have_count(1)
        expect(route).to_contain_text("route → Tech")
        assert page.locator('g.dbg-route.computed[data-to="Billing"]').count() == 0
        _shot(opaque, page, "computed-route")


# -- #41: no debugger panel moves the view ----------------------------------------------------


def _node_places(page: Page) -> dict[str, tuple[float, float]]:
    """Each node box's centre on the screen."""
    places = page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('#boxes g.box')].map((g) => {
            const r = g.getBoundingClientRect();
            return [g.dataset.id, [r.x + r.width / 2, r.y + r.height / 2]];
        }))"""
    )
    return {name: (xy[0], xy[1]) for name, xy in places.items()}


def _same_places(page: Page, before: dict[str, tuple[float, float]], when: str) -> None:
    page.wait_for_timeout(100)  # a late re-fit (a resize observer, a frame) would show by now
    now = _node_places(page)
    assert now.keys() == before.keys()
    for name, xy in before.items():
        assert now[name] == pytest.approx(xy, abs=0.5), f"{when}: {name} moved"


def test_opening_or_closing_a_debugger_panel_never_moves_the_view(
    router: Studio, page: Page
) -> None:
    """Found in #41: the threads panel's toggle and the state panel re-fitted the view, so a
    node the user was about to click moved away under the pointer. Now every node stays where
    it is on the screen: the left panel covers part of the graph rather than shifting it."""
    thread = "panels-stay"
    _run(
        router.url,
        lambda b: router.app.invoke(
            {"query": "I'd like a refund"}, thread_id=thread, backend=b, interrupt_before="Classify"
        ),
    )
    page.wait_for_function("window.__studio.paints > 0")
    start = _node_places(page)
    page.click("#debug-toggle")
    expect(page.locator("#dbg-panel")).to_be_hidden()
    _same_places(page, start, "closing the threads panel")
    page.click("#debug-toggle")
    expect(page.locator("#dbg-panel")).to_be_visible()
    _same_places(page, start, "opening the threads panel")
    # the state panel: the checkpoint's marks (Classify, next) are in sight, so nothing pans
    _open_thread(page, thread)
    expect(page.locator("#dbg-state")).to_be_visible()
    expect(page.locator('.dbg-mark.next[data-node="Classify"]')).to_have_count(1)
    _same_places(page, start, "opening the state panel")
    page.click("#dbg-state-close")
    expect(page.locator("#dbg-state")).to_be_hidden()
    _same_places(page, start, "closing the state panel")
    # and a double-click on a node still lands on it: its rename field, no wire deleted
    text = router.path.read_text(encoding="utf-8")
    x, y = start["Tech"]
    page.mouse.dblclick(x, y)
    expect(page.locator("#rename-input")).to_be_focused()
    expect(page.locator("#rename-input")).to_have_value("Tech")
    _same_places(page, start, "opening the node panel")
    page.keyboard.press("Escape")
    assert router.path.read_text(encoding="utf-8") == text
