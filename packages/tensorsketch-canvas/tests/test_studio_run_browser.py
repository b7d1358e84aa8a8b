"""Running from the canvas in a real browser: the run panel's form, a question answered at its
node, an approval answered in place, an agent's chat and its messages — in memory (no
``--backend``) and durable on SQLite, where the debugger opens the run's thread.

Debian's Chromium drives the committed bundle through Playwright against ``StudioServer`` on
a free port. Each check is made against the run itself (the thread's state read back from the
backend, the tool's side effect on disk). Skipped, with the reason, without Chromium or
Playwright. ``TS_STUDIO_SCREENSHOTS=1`` rewrites docs/images/studio-run-panel.png and
studio-run-ask.png; every other screenshot goes to a temporary folder.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.testing import browser as test_browser

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "support_router.py"
SHOTS = test_browser.screenshot_folder()
#: The docs' pictures are rewritten only with TS_STUDIO_SCREENSHOTS=1 (from the in-memory runs).
DOCS_IMAGES = test_browser.screenshot_folder(ROOT / "docs" / "images")

test_browser.skip_module_unless_chromium("the Studio run panel's browser tests")
test_browser.skip_module_unless_built(
    ROOT / "packages/tensorsketch-canvas/src/tensorsketch/canvas/studio/static/index.html",
    "nox -s studio-build",
)

from playwright.sync_api import Browser, Page, expect  # noqa: E402

from tensorsketch.canvas.studio.debug_source import GraphSource  # noqa: E402
from tensorsketch.canvas.studio.server import StudioServer  # noqa: E402
from tensorsketch.runtime.backends.sqlite import SqliteBackend  # noqa: E402

pytestmark = pytest.mark.timeout(120)

TRIAGE = textwrap.dedent(
    """
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
)

#: A fake-model agent: it looks the order up (a tool that runs freely), asks to refund it (a
#: tool that needs an approval, logged to refunds.log), then says what happened.
AGENT = textwrap.dedent(
    '''
    from pathlib import Path

    from tensorsketch import FakeProvider, create_agent, tool
    from tensorsketch.messages import ToolCall, assistant

    LOG = Path(__file__).with_name("refunds.log")


    @tool
    def look_up(order_id: str) -> str:
        """Find an order."""
        return f"{order_id}: 2 mugs, paid"


    @tool(requires_approval=True)
    def issue_refund(order_id: str) -> str:
        """Refund an order."""
        with LOG.open("a", encoding="utf-8") as out:
            out.write(order_id + "\\n")
        return f"refunded {order_id}"


    def policy(messages, tools):
        last = messages[-1]
        order = next(m.text for m in reversed(messages) if m.role == "user")
        if last.role == "user":
            return assistant(tool_calls=[ToolCall(id="c1", name="look_up", args={"order_id": order})])
        if last.role == "tool" and last.tool_call_id == "c1":
            call = ToolCall(id="c2", name="issue_refund", args={"order_id": order})
            return assistant("Found it; refunding.", tool_calls=[call])
        return assistant(f"Done: {last.text}.")


    app = create_agent(FakeProvider(policy=policy), tools=[look_up, issue_refund])
    '''
)


#: An agent as a node of a graph the canvas draws (``support``); its refund tool needs an
#: approval, which the page answers at that node.
AGENT_NODE = textwrap.dedent(
    '''
    from pathlib import Path

    from tensorsketch import END, START, Agent, FakeProvider, Graph, tool
    from tensorsketch.agents import AgentState
    from tensorsketch.messages import ToolCall, assistant

    LOG = Path(__file__).with_name("refunds.log")


    @tool(requires_approval=True)
    def issue_refund(order_id: str) -> str:
        """Refund an order."""
        with LOG.open("a", encoding="utf-8") as out:
            out.write(order_id + "\\n")
        return f"refunded {order_id}"


    def policy(messages, tools):
        last = messages[-1]
        if last.role == "tool":
            return assistant(f"Done: {last.text}.")
        call = ToolCall(id="c1", name="issue_refund", args={"order_id": last.text})
        return assistant(tool_calls=[call])


    support = Agent(FakeProvider(policy=policy), tools=[issue_refund], name="support")
    app = Graph(AgentState).add(support).edge(START, "support").edge("support", END).compile()
    '''
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with test_browser.chromium() as chromium:
        yield chromium


@pytest.fixture(params=["memory", "sqlite"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return None if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


class Served:
    def __init__(self, path: Path, server: StudioServer, page: Page) -> None:
        self.path, self.server, self.page = path, server, page
        self.errors: list[str] = []

    def state(self, thread: str) -> Any:
        """The thread's state, read back from the Studio's own backend (on a thread of its
        own: Playwright's sync API keeps a loop running in this one)."""
        runs = self.server.app.state.runs
        url = self.server.backend

        async def read() -> Any:
            graph = GraphSource(self.path).get().graph
            if url is None:  # in memory: the Studio's own store (safe from any loop)
                return await graph.aget_state(thread, runs.backend)
            store = SqliteBackend(str(url).removeprefix("sqlite:///"))  # as another process
            try:
                return await graph.aget_state(thread, store)
            finally:
                await store.aclose()

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, read()).result()


def _serve(tmp_path: Path, browser: Browser, name: str, text: str, url: str | None) -> Any:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    server = StudioServer(path, port=0, project=tmp_path, backend=url).start()
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    served = Served(path, server, page)
    page.on("pageerror", lambda exc: served.errors.append(str(exc)))
    page.goto(server.url)
    page.wait_for_function(
        "window.__studio && window.__studio.state.connected"
        " && !document.body.classList.contains('busy')",
        timeout=10_000,
    )
    return served, context


@pytest.fixture
def serve(tmp_path: Path, browser: Browser) -> Iterator[Any]:
    opened: list[tuple[Served, Any]] = []

    def open_(name: str, text: str, url: str | None) -> Served:
        served, context = _serve(tmp_path, browser, name, text, url)
        opened.append((served, context))
        return served

    yield open_
    for served, context in opened:
        context.close()
        served.server.stop()
        assert not served.errors, f"errors in the page: {served.errors}"


def _shot(page: Page, name: str, backend_url: str | None, *, docs: bool = False) -> None:
    """Screenshot the page: the docs' picture for the in-memory run, else a temporary one."""
    folder = DOCS_IMAGES if docs and backend_url is None else SHOTS
    variant = (
        "" if folder == DOCS_IMAGES and folder != SHOTS else "-sqlite" if backend_url else "-memory"
    )
    folder.mkdir(parents=True, exist_ok=True)
    page.mouse.move(2, 600)  # no button is drawn hovered
    page.screenshot(path=str(folder / f"{name}{variant}.png"))


def _open_panel(page: Page) -> None:
    page.wait_for_function("!document.body.classList.contains('busy')")
    page.click("#run-toggle")
    expect(page.locator("#run-panel")).to_be_visible()


def test_a_form_run_draws_its_path_on_the_canvas(serve: Any, backend_url: str | None) -> None:
    s = serve("support_router.py", EXAMPLE.read_text(encoding="utf-8"), backend_url)
    page = s.page
    page.wait_for_function("window.__studio.paints > 0")
    _open_panel(page)
    expect(page.locator("#run-where")).to_contain_text("durable" if backend_url else "in memory")
    # the form: one widget per state field, of the field's type
    expect(page.locator("#run-field-query")).to_have_attribute("type", "text")
    expect(page.locator("#run-field-intent option")).to_have_count(4)  # default + 3 literals
    page.click("#run-start")  # query is required: the server says so at the field
    expect(page.locator("#run-field-query-error")).to_contain_text("missing required")
    page.fill("#run-field-query", "I was charged twice, please refund")
    page.click("#run-start")
    expect(page.locator("#run-thread .dbg-status")).to_have_text("completed", timeout=10_000)
    expect(page.locator("#run-start")).to_be_enabled()  # a stopped run: another may start
    thread = page.locator("#run-thread-id").inner_text()
    # the live overlay turned on and shows the path the run took: Classify → Billing
    expect(page.locator("#live")).to_have_class("on")
    for node in ("Classify", "Billing"):
        ring = page.locator(f'.trace-ring[data-node="{node}"]')
        expect(ring).to_have_count(1, timeout=10_000)
        expect(ring).to_have_class("trace-ring ok")
    for node in ("Tech", "Fallback"):
        expect(page.locator(f'.trace-ring[data-node="{node}"]')).to_have_count(0)
    state = s.state(thread)
    assert state.intent == "billing" and state.answer.startswith("[Billing]")
    # the panel shows what the run answered: the state it stopped with
    shown = page.locator("#run-state")
    expect(shown.locator("dt")).to_have_text(["query", "intent", "answer"])
    expect(shown.locator("dd").nth(1)).to_have_text('"billing"')
    expect(shown.locator("dd").nth(2)).to_have_text(f'"{state.answer}"')
    if backend_url:  # durable: the debugger opened the same thread
        expect(page.locator("#dbg-thread h3.tid")).to_have_text(thread, timeout=10_000)
        expect(page.locator("#dbg-thread .dbg-status")).to_have_text("completed")
    _shot(page, "studio-run-panel", backend_url, docs=True)
    # a field added to the state in the editor appears in the open form
    text = s.path.read_text(encoding="utf-8")
    s.path.write_text(
        text.replace('    answer: str = ""\n', '    answer: str = ""\n    priority: int = 0\n', 1),
        encoding="utf-8",
    )
    expect(page.locator("#run-field-priority")).to_have_attribute("type", "number", timeout=10_000)


def test_a_question_is_answered_at_its_node(serve: Any, backend_url: str | None) -> None:
    s = serve("triage.py", TRIAGE, backend_url)
    page = s.page
    page.wait_for_function("window.__studio.paints > 0")
    _open_panel(page)
    page.fill("#run-field-query", "vpn is down")
    page.click("#run-start")
    ask = page.locator("#run-ask")
    expect(ask).to_be_visible(timeout=10_000)
    expect(ask).to_contain_text("Which desk takes: vpn is down?")
    expect(ask).to_contain_text("Asks in Triage")
    # the card sits at the node that asked, just below its box, once the view is still (on a
    # backend the debugger opens the thread meanwhile and the view moves; both rectangles are
    # read in the same frame)
    page.wait_for_function(
        """() => {
            const b = document.querySelector('#boxes g.box[data-node="Triage"]');
            const c = document.getElementById("run-ask");
            if (!b || !c || c.hidden) return false;
            const box = b.getBoundingClientRect(), card = c.getBoundingClientRect();
            return Math.abs(card.y - box.bottom) < 20
                && box.x - 5 <= card.x && card.x <= box.right;
        }""",
        timeout=10_000,
    )
    thread = page.locator("#run-thread-id").inner_text()
    if backend_url is None:  # (on a backend the debugger opens the stopped thread instead)
        # the overlay draws the node waiting for the answer apart from one that finished
        waiting = page.locator('.trace-ring[data-node="Triage"]')
        expect(waiting).to_have_class("trace-ring suspended", timeout=10_000)
        expect(waiting.locator(".trace-badge text")).to_contain_text("waiting")
    _shot(page, "studio-run-ask", backend_url, docs=True)
    page.fill("#run-ask-card-answer", "network")
    page.click("#run-ask-card-answer-ok")
    expect(page.locator("#run-thread .dbg-status")).to_have_text("completed", timeout=10_000)
    expect(ask).to_be_hidden()
    assert s.state(thread).desk == "network"


def test_the_chat_panel_shows_an_agents_messages_and_an_approval_resumes(
    serve: Any, backend_url: str | None, tmp_path: Path
) -> None:
    s = serve("refunds.py", AGENT, backend_url)
    page = s.page
    _open_panel(page)
    expect(page.locator("#run-panel h3")).to_have_text("Chat")
    page.fill("#run-message", "A-17")
    page.keyboard.press("Enter")
    waiting = page.locator("#run-waiting")
    expect(waiting).to_be_visible(timeout=10_000)
    expect(waiting).to_contain_text("issue_refund")
    expect(waiting).to_contain_text('"order_id": "A-17"')
    assert not (tmp_path / "refunds.log").exists()
    messages = page.locator("#run-messages li")
    expect(messages).to_have_count(4)  # user, call look_up, its result, call issue_refund
    expect(messages.nth(1)).to_contain_text("look_up")
    expect(messages.nth(2)).to_contain_text("tool · look_up")
    expect(messages.nth(2)).to_contain_text("A-17: 2 mugs, paid")
    page.click("#run-waiting-approve")
    expect(page.locator("#run-thread .dbg-status")).to_have_text("completed", timeout=10_000)
    expect(messages).to_have_count(6)
    expect(messages.nth(4)).to_contain_text("tool · issue_refund")
    expect(messages.nth(5)).to_contain_text("Done: refunded A-17.")
    expect(page.locator("#run-messages li.r-user")).to_have_text("userA-17")
    assert (tmp_path / "refunds.log").read_text() == "A-17\n"  # approved, ran once
    thread = page.locator("#run-thread-id").inner_text()
    assert [m.role for m in s.state(thread).messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    _shot(page, "studio-run-chat", backend_url)


def test_an_approval_is_answered_at_its_node(
    serve: Any, backend_url: str | None, tmp_path: Path
) -> None:
    s = serve("support_agent.py", AGENT_NODE, backend_url)
    page = s.page
    page.wait_for_function("window.__studio.paints > 0")
    _open_panel(page)
    page.fill("#run-message", "B-2")
    page.click("#run-send")
    ask = page.locator("#run-ask")
    expect(ask).to_be_visible(timeout=10_000)
    expect(ask).to_contain_text("Waiting for approval in support")
    expect(ask).to_contain_text("issue_refund")
    box = page.locator('#boxes g.box[data-node="support"]').bounding_box()
    card = ask.bounding_box()
    assert box is not None and card is not None
    assert abs(card["y"] - (box["y"] + box["height"])) < 20, (card, box)
    assert not (tmp_path / "refunds.log").exists()
    _shot(page, "studio-run-approval", backend_url)
    page.click("#run-ask-card-approve")
    expect(page.locator("#run-thread .dbg-status")).to_have_text("completed", timeout=10_000)
    expect(ask).to_be_hidden()
    expect(page.locator("#run-messages li").last).to_contain_text("Done: refunded B-2.")
    assert (tmp_path / "refunds.log").read_text() == "B-2\n"
    thread = page.locator("#run-thread-id").inner_text()
    if backend_url:  # a thread opened in the debugger: the chat shows its messages
        page.click("#run-new-chat")
        expect(page.locator("#run-messages")).to_have_count(0)
        page.locator("#dbg-panel li", has_text=thread).first.click()
        expect(page.locator("#run-thread-id")).to_have_text(thread, timeout=10_000)
        expect(page.locator("#run-messages li")).to_have_count(4)
