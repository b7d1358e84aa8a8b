"""TensorSketch Studio in a real browser: the committed bundle, the real server, Chromium.

Each test serves a temporary copy of the support router with ``StudioServer`` on a free
127.0.0.1 port and drives Debian's Chromium through Playwright. Every gesture is checked where
it lands: the file on disk (re-extracted and compared with the IR the gesture should produce;
the node bodies it did not touch byte-identical) and the layout sidecar.

Skipped, with the reason, when ``/usr/bin/chromium`` or Playwright for Python is missing.
With ``TS_STUDIO_SCREENSHOTS=1`` the screenshots of docs/studio.md are rewritten in
docs/images/ (``test_paints_support_router``, ``test_gestures_write_the_file``,
``test_live_trace_overlay``, and the subgraph tests' ``studio-subgraph-*`` /
``studio-debug-subgraph*``).
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.canvas import END, START, edits, extract, layout_path
from tensorsketch.canvas._pyparse import parse_python
from tensorsketch.canvas.ir import EdgeIR, GraphIR, Port
from tensorsketch.testing import browser as test_browser

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "support_router.py"
#: Screenshots go to docs/images/ (the pictures in docs/studio.md) with TS_STUDIO_SCREENSHOTS=1,
#: else to a temporary folder, so a plain test run leaves the work tree as it was.
IMAGES = test_browser.screenshot_folder(ROOT / "docs" / "images")

test_browser.skip_module_unless_chromium("the Studio browser tests")
test_browser.skip_module_unless_built(
    ROOT / "packages/tensorsketch-canvas/src/tensorsketch/canvas/studio/static/index.html",
    "nox -s studio-build",
)

from playwright.sync_api import Browser, Page, expect  # noqa: E402

from tensorsketch.canvas.studio.app import Studio as StudioApp  # noqa: E402
from tensorsketch.canvas.studio.server import StudioServer  # noqa: E402

pytestmark = pytest.mark.timeout(120)

#: The support router with its routing function's targets written as a mapping (as in the
#: docs), so the canvas shows ``route: billing``-style conditional edges.
MAPPED = (
    EXAMPLE.read_text(encoding="utf-8")
    .replace(
        '    return {"billing": "Billing", "tech": "Tech"}.get(state.intent, "Fallback")',
        "    return state.intent",
    )
    .replace(
        '.conditional("Classify", route)',
        '.conditional("Classify", route, {"billing": "Billing", "tech": "Tech", '
        '"other": "Fallback"})',
    )
)
assert "return state.intent" in MAPPED and '"other": "Fallback"' in MAPPED


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with test_browser.chromium() as chromium:
        yield chromium


class Studio:
    def __init__(self, path: Path, server: StudioServer, page: Page) -> None:
        self.path = path
        self.server = server
        self.page = page
        self.errors: list[str] = []

    @property
    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def ir(self) -> GraphIR:
        return extract(self.text)

    def sidecar(self) -> dict[str, Any]:
        side = layout_path(self.path)
        return json.loads(side.read_text(encoding="utf-8"))["nodes"] if side.exists() else {}

    def paints(self) -> int:
        return int(self.page.evaluate("window.__studio.paints"))

    def wait_paint_after(self, before: int, timeout: float = 5.0) -> None:
        self.page.wait_for_function(
            f"window.__studio.paints > {before} && !document.body.classList.contains('busy')",
            timeout=timeout * 1000,
        )

    def settle(self, quiet_ms: int = 300) -> None:
        """Wait until no write is in flight and nothing has repainted for ``quiet_ms``: the
        quiet reload an edit starts can repaint a moment after the edit's own paint, and a
        drag begun across that repaint is measured against boxes that just moved."""
        deadline = time.monotonic() + 10
        last = -1
        while time.monotonic() < deadline:
            self.page.wait_for_function("!document.body.classList.contains('busy')")
            now = self.paints()
            if now == last:
                return
            last = now
            self.page.wait_for_timeout(quiet_ms)

    def box(self, name: str) -> Any:
        return self.page.locator(f'#boxes g.box[data-id="{name}"]')

    def _rect_center(self, name: str, selector: str) -> tuple[float, float]:
        # one JS call: a repaint between finding the element and measuring it cannot interfere
        self.box(name).wait_for()
        x, y = self.page.evaluate(
            """([id, sel]) => {
                const g = document.querySelector(`#boxes g.box[data-id="${id}"]`);
                const r = g.querySelector(sel).getBoundingClientRect();
                return [r.x + r.width / 2, r.y + r.height / 2];
            }""",
            [name, selector],
        )
        return x, y

    def center(self, name: str) -> tuple[float, float]:
        return self._rect_center(name, ":scope > g")

    def handle(self, name: str) -> tuple[float, float]:
        return self._rect_center(name, ".handle")

    def drag(self, start: tuple[float, float], end: tuple[float, float]) -> None:
        mouse = self.page.mouse
        mouse.move(*start)
        mouse.down()
        for i in range(1, 9):
            t = i / 8
            mouse.move(start[0] + (end[0] - start[0]) * t, start[1] + (end[1] - start[1]) * t)
        mouse.up()

    def wire_point(self, source: str, target: str) -> tuple[float, float]:
        """A screen point on the wire ``source`` → ``target`` (halfway along its path)."""
        point = self.page.evaluate(
            """([s, t]) => {
                const p = document.querySelector(
                    `g.wire[data-source="${s}"][data-target="${t}"] path.hit`);
                const q = p.getPointAtLength(p.getTotalLength() / 2);
                const m = p.getScreenCTM();
                return [q.x * m.a + q.y * m.c + m.e, q.x * m.b + q.y * m.d + m.f];
            }""",
            [source, target],
        )
        return point[0], point[1]


@pytest.fixture
def studio(tmp_path: Path, browser: Browser) -> Iterator[Studio]:
    path = tmp_path / "support_router.py"
    path.write_text(MAPPED, encoding="utf-8")
    server = StudioServer(path, port=0, project=tmp_path).start()
    context = browser.new_context(viewport={"width": 1400, "height": 800}, accept_downloads=True)
    page = context.new_page()
    s = Studio(path, server, page)
    page.on("pageerror", lambda exc: s.errors.append(str(exc)))
    page.goto(server.url)
    page.wait_for_function(
        "window.__studio && window.__studio.paints > 0 && window.__studio.state.connected",
        timeout=10_000,
    )
    try:
        yield s
    finally:
        context.close()
        server.stop()
    assert not s.errors, f"errors in the page: {s.errors}"


# -- helpers -----------------------------------------------------------------------------------


def class_sources(text: str) -> dict[str, str]:
    """Each top-level class's source text, exactly as in the file."""
    tree = parse_python(text)  # the Studio's threads may be parsing too
    return {
        node.name: ast.get_source_segment(text, node) or ""
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }


def same_graph(got: GraphIR, want: GraphIR) -> None:
    """Equal IRs, except that a created node's hole message is the server's to word."""
    assert [n.name for n in got.nodes] == [n.name for n in want.nodes]
    for g, w in zip(got.nodes, want.nodes, strict=True):
        assert (g.name, g.inputs, g.outputs, g.has_hole) == (
            w.name,
            w.inputs,
            w.outputs,
            w.has_hole,
        )
    assert got.edges == want.edges


ORIGINAL_CLASSES = class_sources(MAPPED)
BODIES = ["Support", "Classify", "Billing", "Tech", "Fallback"]


def bodies_untouched(text: str, names: list[str] = BODIES) -> None:
    now = class_sources(text)
    for name in names:
        assert now[name] == ORIGINAL_CLASSES[name], f"class {name} changed"


# -- painting ----------------------------------------------------------------------------------


def test_paints_support_router(studio: Studio) -> None:
    page = studio.page
    for name in ("Classify", "Billing", "Tech", "Fallback"):
        expect(studio.box(name)).to_be_visible()
        expect(studio.box(name).locator("text.name")).to_have_text(name)
    expect(studio.box(START)).to_contain_text("START")
    expect(studio.box(END)).to_contain_text("END")
    # typed ports: In on the left (green), Out on the right (violet), with their type text
    expect(studio.box("Classify").locator('.port.in[data-port="query"]')).to_have_text("query: str")
    expect(studio.box("Classify").locator('.port.out[data-port="intent"]')).to_have_text(
        "intent: Intent"
    )
    classify = studio.box("Classify").bounding_box()
    port_in = studio.box("Classify").locator(".port.in circle").bounding_box()
    port_out = studio.box("Classify").locator(".port.out circle").bounding_box()
    assert classify and port_in and port_out
    assert port_in["x"] < classify["x"] + 10 < port_out["x"]
    # conditional routes: dashed blue, labelled with the routing function and key
    labels = page.evaluate(
        "[...document.querySelectorAll('#labels .edge-label')].map((e) => e.textContent)"
    )
    assert sorted(labels) == ["route: billing", "route: other", "route: tech"]
    assert page.locator('g.wire.conditional[data-source="Classify"]').count() == 3
    assert page.locator('g.wire.solid[data-target="__end__"]').count() == 3
    # a layered layout, left to right: START < Classify < specialists < END
    xs = {n: studio.center(n)[0] for n in (START, "Classify", "Billing", END)}
    assert xs[START] < xs["Classify"] < xs["Billing"] < xs[END]
    # nothing falls off screen
    for name in (START, "Classify", "Billing", "Tech", "Fallback", END):
        bb = studio.box(name).bounding_box()
        assert bb and bb["x"] >= 0 and bb["y"] >= 46 and bb["x"] + bb["width"] <= 1400
        assert bb["y"] + bb["height"] <= 800
    expect(page.locator("#holes-count")).to_have_text("0")
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / "studio-support-router.png"))


def test_dynamic_route_draws_the_targets_its_code_names(tmp_path: Path, browser: Browser) -> None:
    """The example as shipped routes without a mapping, but ``route``'s own code names where
    it goes: one dotted ``route?`` wire to each of Billing, Tech and Fallback, selected (and
    deleted) together as the one ``conditional(...)`` call they are."""
    path = tmp_path / "support_router.py"
    shutil.copy(EXAMPLE, path)
    original = path.read_text(encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        expect(page.locator("g.box.stub")).to_have_count(0)
        wires = page.locator('g.wire.dynamic[data-source="Classify"]')
        assert wires.count() == 3
        targets = sorted(wires.nth(i).get_attribute("data-target") or "" for i in range(3))
        assert targets == ["Billing", "Fallback", "Tech"]
        labels = page.evaluate(
            "[...document.querySelectorAll('#labels .edge-label')].map((e) => e.textContent)"
        )
        assert labels == ["route?", "route?", "route?"]
        for name in ("Billing", "Tech", "Fallback"):  # laid out a rank after Classify
            assert box_x(page, name) > box_x(page, "Classify")
        wires.first.click(force=True)
        expect(page.locator("#inspector h3")).to_have_text("Classify → Billing | Tech | Fallback")
        expect(page.locator("#inspector")).to_contain_text(
            "route can route to Billing, Tech or Fallback (read from its code"
        )
        assert page.locator("g.wire.dynamic.selected").count() == 3
        page.keyboard.press("Delete")
        expect(page.locator("g.wire.dynamic")).to_have_count(0)
        assert '.conditional("Classify", route)' not in path.read_text(encoding="utf-8")
        page.click("#undo")
        expect(page.locator("g.wire.dynamic")).to_have_count(3)
        assert path.read_text(encoding="utf-8") == original
        page.close()
        assert not errors, errors


def test_renaming_or_deleting_a_node_the_route_returns_says_why_it_is_refused(
    tmp_path: Path, browser: Browser
) -> None:
    """``route`` returns "Tech" and "Fallback" by name: renaming or deleting either on the
    canvas is refused in the red note (the server's 422), saying to change the routing code
    first, and nothing is written."""
    path = tmp_path / "support_router.py"
    shutil.copy(EXAMPLE, path)
    original = path.read_text(encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        page.locator('#boxes g.box[data-id="Tech"]').click()
        page.fill("#rename-input", "Techie")
        page.press("#rename-input", "Enter")
        toast = page.locator("#toast.error")
        expect(toast).to_contain_text("cannot rename 'Tech' to 'Techie': the routing function")
        expect(toast).to_contain_text("Change the routing code first (in your editor")
        # the field shows the node's real name again, not the refused one
        expect(page.locator("#rename-input")).to_have_value("Tech")
        page.click("#toast")
        page.locator('#boxes g.box[data-id="Fallback"]').click()
        page.click("#delete-node")
        expect(toast).to_contain_text("cannot remove 'Fallback'")
        expect(page.locator('#boxes g.box[data-id="Fallback"]')).to_be_visible()
        expect(page.locator('#boxes g.box[data-id="Tech"]')).to_be_visible()
        assert page.locator("g.wire.dynamic").count() == 3  # still the three known routes
        assert path.read_text(encoding="utf-8") == original
        page.close()
        assert not errors, errors


def box_x(page: Page, name: str) -> float:
    """The x of a node's box on the page (the layout runs left to right)."""
    box = page.locator(f'g.box[data-id="{name}"]').bounding_box()
    assert box is not None
    return box["x"]


#: The example with a routing function whose targets only the run knows.
OPAQUE = EXAMPLE.read_text(encoding="utf-8").replace(
    '    return {"billing": "Billing", "tech": "Tech"}.get(state.intent, "Fallback")',
    '    return ROUTES.get(state.intent, "Fallback")',
)


def test_dynamic_route_the_code_does_not_spell_out_is_a_stub(
    tmp_path: Path, browser: Browser
) -> None:
    """A routing function whose targets the code does not name: a `route → ?` stub, no
    invented edges."""
    path = tmp_path / "support_router.py"
    path.write_text(OPAQUE, encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        expect(page.locator("g.box.stub")).to_have_text("route → ?")
        assert page.locator('g.wire.dynamic[data-source="Classify"]').count() == 1
        assert page.locator("g.wire.conditional").count() == 0
        page.close()


def test_retry_and_timeout_badges_on_nodes(tmp_path: Path, browser: Browser) -> None:
    """``add(..., retry=..., timeout=...)`` shows as read-only badges on the node's top edge."""
    source = MAPPED.replace(
        ".add(Tech)", ".add(Tech, retry=RetryPolicy(max_attempts=3), timeout=5)"
    ).replace("from tensorsketch import ", "from tensorsketch import RetryPolicy, ")
    assert "timeout=5" in source
    path = tmp_path / "support_router.py"
    path.write_text(source, encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        badges = page.locator('g.box[data-id="Tech"] .node-badge')
        expect(badges).to_have_count(2)
        expect(badges.nth(0).locator("text")).to_contain_text("↻ RetryPolicy(")
        expect(badges.nth(0).locator("title")).to_have_text("retry=RetryPolicy(max_attempts=3)")
        expect(badges.nth(1).locator("text")).to_have_text("◷ 5")
        expect(badges.nth(1).locator("title")).to_have_text("timeout=5")
        assert page.locator('g.box[data-id="Billing"] .node-badge').count() == 0
        # inside the box's width, above its top edge, clear of the name
        box = page.locator('g.box[data-id="Tech"] > g').first.bounding_box()
        for i in range(2):
            b = badges.nth(i).bounding_box()
            assert (
                box and b and box["x"] <= b["x"] and b["x"] + b["width"] <= box["x"] + box["width"]
            )
            assert b["y"] < box["y"] + 12
        page.close()


def test_static_breakpoints_show_as_badges(tmp_path: Path, browser: Browser) -> None:
    """``compile(interrupt_before=[...], interrupt_after=[...])`` marks exactly those nodes."""
    source = MAPPED.replace(
        ").compile()", ').compile(interrupt_before=["Billing"], interrupt_after=["Tech"])'
    )
    assert 'interrupt_before=["Billing"]' in source
    path = tmp_path / "support_router.py"
    path.write_text(source, encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        billing = page.locator('g.box[data-id="Billing"] .node-badge')
        expect(billing).to_have_count(1)
        expect(billing.locator("text")).to_have_text("‖ before")
        tech = page.locator('g.box[data-id="Tech"] .node-badge')
        expect(tech).to_have_count(1)
        expect(tech.locator("text")).to_have_text("‖ after")
        assert page.locator('g.box[data-id="Fallback"] .node-badge').count() == 0
        page.close()


def test_custom_wiring_and_loops_are_drawn(tmp_path: Path, browser: Browser) -> None:
    source = MAPPED.replace(
        '    .edge("Fallback", END)\n',
        '    .edge("Fallback", END)\n    .edge(*("Tech", "Fallback"))\n',
    )
    path = tmp_path / "custom.py"
    path.write_text(source, encoding="utf-8")
    ir = extract(source)
    assert any(e.kind == "custom" for e in ir.edges), "the fixture needs a custom element"
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        custom = page.locator("g.box.custom")
        expect(custom).to_have_count(1)
        expect(custom.locator("text.code")).to_contain_text('.edge(*("Tech", "Fallback"))')
        page.close()
    loop = tmp_path / "loop.py"
    loop.write_text(LOOP, encoding="utf-8")
    assert [e.label for e in extract(LOOP).edges if e.branch == "loop"] == ["repeat", "exit"]
    with StudioServer(loop, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        arc = page.locator('g.wire[data-source="Increment"][data-target="Increment"]')
        expect(arc).to_have_count(1)
        labels = page.evaluate(
            "[...document.querySelectorAll('#labels .edge-label')].map((e) => e.textContent)"
        )
        assert sorted(labels) == ["exit", "repeat until done"]
        # the arc rises above the node
        node = page.locator('#boxes g.box[data-id="Increment"]').bounding_box()
        bb = arc.bounding_box()
        assert node and bb and bb["y"] < node["y"] - 30
        page.close()


LOOP = """\
from tensorsketch import END, START, Context, Graph, Node, Schema


class C(Schema):
    n: int = 0


class Increment(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(n=inp.n + 1)


def done(state: C) -> bool:
    return state.n >= 3


app = Graph(C).add(Increment).edge(START, "Increment").loop("Increment", until=done, exit=END)
"""


# -- gestures ----------------------------------------------------------------------------------


def test_gestures_write_the_file(studio: Studio) -> None:
    page = studio.page
    want = studio.ir()

    # + node: a typed-hole stub in the file, dropped unwired
    before = studio.paints()
    page.click("#add-node")
    page.fill("#new-name", "Escalate")
    page.fill("#new-inputs", "query: str")
    page.fill("#new-outputs", "answer: str")
    page.click("#new-ok")
    expect(studio.box("Escalate")).to_be_visible()
    studio.wait_paint_after(before)
    want = edits.add_node(want, "Escalate", [("query", "str")], [("answer", "str")])
    same_graph(studio.ir(), want)
    assert studio.ir().node("Escalate").has_hole
    assert "class Escalate" in studio.text
    bodies_untouched(studio.text)
    expect(studio.box("Escalate").locator(".hole-tag")).to_have_text("needs code")
    expect(page.locator("#holes-count")).to_have_text("1")
    assert "Escalate" in studio.sidecar()  # dropped where the user is looking

    # the hole's message on hover
    page.mouse.move(*studio.center("Escalate"))
    expect(page.locator("#tooltip")).to_be_visible()
    expect(page.locator("#tooltip")).to_contain_text("needs code")

    # wire: drag from Escalate's right edge onto END
    studio.drag(studio.handle("Escalate"), studio.center(END))
    expect(page.locator('g.wire[data-source="Escalate"][data-target="__end__"]')).to_have_count(1)
    want = edits.add_edge(want, "Escalate", END)
    same_graph(studio.ir(), want)
    bodies_untouched(studio.text)
    page.mouse.move(*studio.center("Escalate"))
    expect(page.locator("#tooltip")).to_be_visible()
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / "studio-editing.png"))

    # delete an edge: select Tech → END, press Delete
    page.mouse.click(*studio.wire_point("Tech", END))
    expect(page.locator('g.wire.selected[data-source="Tech"]')).to_have_count(1)
    page.keyboard.press("Delete")
    expect(page.locator('g.wire[data-source="Tech"][data-target="__end__"]')).to_have_count(0)
    index = next(i for i, e in enumerate(want.edges) if (e.source, e.target) == ("Tech", END))
    want = edits.remove_edge(want, index)
    same_graph(studio.ir(), want)
    bodies_untouched(studio.text)

    # rename: select the node, type the new name (once the delete's write-back and its quiet
    # reload are done: a click measured before that reload's repaint can miss the node)
    studio.settle()
    page.mouse.click(*studio.center("Escalate"))
    page.fill("#rename-input", "Escalation")
    page.press("#rename-input", "Enter")
    expect(studio.box("Escalation")).to_be_visible()
    want = edits.rename_node(want, "Escalate", "Escalation")
    same_graph(studio.ir(), want)
    bodies_untouched(studio.text)
    assert "Escalation" in studio.sidecar() and "Escalate" not in studio.sidecar()
    # a stub made with + node is still the node's own: its class takes the new name (the
    # docs' rename rule), and the holes list names it as the canvas does
    assert "class Escalation(Node):" in studio.text and "class Escalate" not in studio.text
    assert studio.ir().node("Escalation").cls == "Escalation"
    page.click("#holes-badge")
    expect(page.locator("#holes-list tr.hole-row")).to_contain_text("Escalation")
    page.keyboard.press("Escape")
    expect(page.locator("#holes-list")).to_be_hidden()

    # move: the sidecar changes, the file does not
    text_before_move = studio.text
    studio.settle()
    x0, y0 = studio.center("Billing")
    old = dict(studio.sidecar().get("Billing", {}))
    studio.drag((x0, y0), (x0 + 60, y0 + 140))
    page.wait_for_function("() => !document.body.classList.contains('busy')")
    deadline = time.monotonic() + 3
    while "Billing" not in studio.sidecar() and time.monotonic() < deadline:
        time.sleep(0.05)
    moved = studio.sidecar()["Billing"]
    assert moved != old
    assert studio.text == text_before_move
    x1, y1 = studio.center("Billing")
    assert abs(x1 - (x0 + 60)) < 3 and abs(y1 - (y0 + 140)) < 3

    # undo the move (sidecar only): Billing was placed by the automatic layout, so the undo
    # unpins it (it is not left pinned where it was) ...
    assert not old
    page.click("#undo")
    page.wait_for_function("() => !window.__studio.state.layout.Billing")
    assert "Billing" not in studio.sidecar()
    x2, y2 = studio.center("Billing")
    assert abs(x2 - x0) < 3 and abs(y2 - y0) < 3
    assert studio.text == text_before_move
    # ... then the rename (an inverse edit through the file)
    page.click("#undo")
    expect(studio.box("Escalate")).to_be_visible()
    same_graph(studio.ir(), edits.rename_node(want, "Escalation", "Escalate"))
    bodies_untouched(studio.text)
    assert "class Escalate(Node):" in studio.text and "Escalation" not in studio.text

    # redo the rename
    page.click("#redo")
    expect(studio.box("Escalation")).to_be_visible()
    same_graph(studio.ir(), want)
    bodies_untouched(studio.text)

    # keyboard undo/redo of the wiring
    page.mouse.click(700, 760)  # the background: no selection, focus on the canvas
    page.keyboard.press("Control+z")  # redo stack cleared by nothing: undoes the redo'd rename
    expect(studio.box("Escalate")).to_be_visible()
    page.keyboard.press("Control+Shift+z")
    expect(studio.box("Escalation")).to_be_visible()
    same_graph(studio.ir(), want)


def test_delete_one_conditional_route(studio: Studio) -> None:
    page = studio.page
    want = studio.ir()
    page.mouse.click(*studio.wire_point("Classify", "Billing"))
    expect(page.locator("#inspector")).to_contain_text("route → billing")
    page.keyboard.press("Backspace")
    expect(page.locator('g.wire[data-source="Classify"][data-target="Billing"]')).to_have_count(0)
    index = next(i for i, e in enumerate(want.edges) if e.label == "billing")
    same_graph(studio.ir(), edits.remove_edge(want, index))
    bodies_untouched(studio.text)
    labels = page.evaluate(
        "[...document.querySelectorAll('#labels .edge-label')].map((e) => e.textContent)"
    )
    assert sorted(labels) == ["route: other", "route: tech"]


def test_undo_and_redo_of_deletions_rewrite_the_file(studio: Studio) -> None:
    """Deleting a node or a route and undoing it gives the file back byte for byte."""
    page = studio.page
    original = studio.text
    page.mouse.click(*studio.center("Tech"))
    page.click("#delete-node")
    expect(studio.box("Tech")).to_have_count(0)
    deleted = studio.text
    assert "Tech" not in [n.name for n in studio.ir().nodes]
    assert '"tech": "Tech"' not in deleted and '.edge("Tech", END)' not in deleted
    bodies_untouched(deleted)  # the class stays in the code
    expect(page.locator("#undo")).to_be_enabled()

    page.click("#undo")
    expect(studio.box("Tech")).to_be_visible()
    assert studio.text == original
    page.click("#redo")
    expect(studio.box("Tech")).to_have_count(0)
    assert studio.text == deleted
    page.mouse.click(700, 760)
    page.keyboard.press("Control+z")
    expect(studio.box("Tech")).to_be_visible()
    assert studio.text == original

    # one conditional route: delete it, undo it
    page.mouse.click(*studio.wire_point("Classify", "Billing"))
    page.keyboard.press("Delete")
    expect(page.locator('g.wire[data-source="Classify"][data-target="Billing"]')).to_have_count(0)
    assert '"billing": "Billing"' not in studio.text
    page.click("#undo")
    expect(page.locator('g.wire[data-source="Classify"][data-target="Billing"]')).to_have_count(1)
    assert studio.text == original


def test_route_stub_can_be_deleted_and_restored(tmp_path: Path, browser: Browser) -> None:
    path = tmp_path / "support_router.py"
    path.write_text(OPAQUE, encoding="utf-8")
    original = path.read_text(encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        page.locator("g.box.stub").click()  # the stub stands for its route: selecting it
        expect(page.locator("#inspector")).to_contain_text("Classify → ?")
        expect(page.locator("#delete-edge")).to_have_text("delete route (Del)")
        page.keyboard.press("Delete")
        expect(page.locator("g.box.stub")).to_have_count(0)
        text = path.read_text(encoding="utf-8")
        assert '.conditional("Classify", route)' not in text
        assert [e for e in extract(text).edges if e.kind == "dynamic"] == []
        page.click("#undo")
        expect(page.locator("g.box.stub")).to_have_text("route → ?")
        assert path.read_text(encoding="utf-8") == original
        page.click("#redo")
        expect(page.locator("g.box.stub")).to_have_count(0)
        page.close()
        assert not errors, errors


JOINED = """\
from tensorsketch import END, START, Graph, Node, Schema


class S(Schema):
    x: int = 0


class Fetch(Node):
    pass


class Search(Node):
    pass


class Answer(Node):
    pass


g = Graph(S)
fetch, search, answer = g.nodes(Fetch, Search, Answer)
START >> fetch
START >> search
[fetch, search] >> answer >> END
app = g.compile()
"""


def test_a_join_is_drawn_from_each_source_and_deleted_whole(
    tmp_path: Path, browser: Browser
) -> None:
    path = tmp_path / "joined.py"
    path.write_text(JOINED, encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        joins = page.locator('g.wire.join[data-target="Answer"]')
        expect(joins).to_have_count(2)
        sources = sorted(joins.nth(i).get_attribute("data-source") or "" for i in range(2))
        assert sources == ["Fetch", "Search"]
        labels = page.evaluate(
            "[...document.querySelectorAll('#labels .edge-label')].map((e) => e.textContent)"
        )
        assert labels == ["join", "join"]
        # selecting either wire selects the join; Delete removes all of it
        studio = Studio(path, server, page)
        page.mouse.click(*studio.wire_point("Search", "Answer"))
        expect(page.locator("g.wire.join.selected")).to_have_count(2)
        expect(page.locator("#inspector")).to_contain_text("[Fetch, Search] → Answer")
        expect(page.locator("#delete-edge")).to_have_text("delete join (Del)")
        page.keyboard.press("Delete")
        expect(page.locator("g.wire.join")).to_have_count(0)
        assert "[fetch, search] >> answer" not in path.read_text(encoding="utf-8")
        page.click("#undo")
        expect(page.locator("g.wire.join")).to_have_count(2)
        assert path.read_text(encoding="utf-8") == JOINED
        page.close()
        assert not errors, errors


def test_ports_on_a_hole_and_deleting_a_node(studio: Studio) -> None:
    page = studio.page
    page.click("#add-node")
    page.fill("#new-name", "Triage")
    page.fill("#new-inputs", "query: str")
    page.click("#new-ok")
    expect(studio.box("Triage")).to_be_visible()
    page.mouse.click(*studio.center("Triage"))
    expect(page.locator("#inspector")).to_be_visible()
    page.select_option("#port-side", "out")
    page.fill("#port-name", "intent")
    page.fill("#port-type", "Intent")
    page.click("#port-add")
    expect(studio.box("Triage").locator('.port.out[data-port="intent"]')).to_have_text(
        "intent: Intent"
    )
    node = studio.ir().node("Triage")
    assert node.inputs == [Port("query", "str")] and node.outputs == [Port("intent", "Intent")]
    page.click('[data-remove-port="in:query"]')
    expect(studio.box("Triage").locator('.port.in[data-port="query"]')).to_have_count(0)
    assert studio.ir().node("Triage").inputs == []
    bodies_untouched(studio.text)
    # delete the node and its wiring: gone from the graph, its class stays in the code
    page.click("#delete-node")
    expect(studio.box("Triage")).to_have_count(0)
    assert "Triage" not in [n.name for n in studio.ir().nodes]
    bodies_untouched(studio.text)


def test_illegal_wiring_is_refused_before_the_file(studio: Studio) -> None:
    page = studio.page
    text = studio.text
    # Classify routes through `route`'s mapping: a wire from it is a new route, so the page
    # asks its label first; cancelling writes nothing
    studio.drag(studio.handle("Classify"), studio.center("Billing"))
    expect(page.locator("#route-dialog")).to_be_visible()
    expect(page.locator("#route-hint")).to_contain_text("routes through route")
    page.keyboard.press("Escape")
    expect(page.locator("#route-dialog")).to_be_hidden()
    assert studio.text == text
    # the compiler's rule, from the server: a node's successors come from one place, so a
    # loop next to Classify's routes is refused with the teaching message, nothing written
    page.mouse.click(*studio.center("Classify"))
    page.select_option("#wire-kind", "loop")
    page.select_option("#wire-fn", "route")
    page.click("#wire-add")
    expect(page.locator("#toast.error")).to_contain_text("successors come from one place")
    assert studio.text == text
    page.keyboard.press("Escape")
    # a rule the canvas knows itself: nothing enters START
    page.click("#toast")
    studio.drag(studio.handle("Billing"), studio.center(START))
    expect(page.locator("#toast.error")).to_contain_text("START")
    assert studio.text == text
    # a node whose port is not in the state: refused, with the field the state has
    page.click("#add-node")
    page.fill("#new-name", "Bad")
    page.fill("#new-inputs", "qurey: str")
    page.click("#new-ok")
    expect(page.locator("#toast.error")).to_contain_text("query")
    assert studio.text == text
    expect(studio.box("Bad")).to_have_count(0)


# -- the file changes under the canvas ---------------------------------------------------------


def test_external_edit_repaints_without_reload(studio: Studio) -> None:
    page = studio.page
    page.evaluate("window.__marker = 42")
    studio.path.write_text(studio.text.replace("Fallback", "General"), encoding="utf-8")
    t0 = time.monotonic()
    expect(studio.box("General")).to_be_visible(timeout=2000)
    assert time.monotonic() - t0 < 2.0
    assert page.evaluate("window.__marker") == 42  # no page reload
    expect(studio.box("Fallback")).to_have_count(0)


#: The router with a hole added under another name: class Outline, the node "Plan".
OUTLINE = (
    "class Outline(Node):\n"
    "    class In(Schema):\n        query: str\n\n"
    "    class Out(Schema):\n        answer: str\n\n"
    "    async def run(self, ctx: Context, inp: In) -> Out:\n"
    '        raise Hole("outline the answer")\n\n\n'
)
WITH_HOLE = (
    MAPPED.replace("def route", OUTLINE + "def route")
    .replace("    .add(Fallback)\n", '    .add(Fallback)\n    .add(Outline, name="Plan")\n')
    .replace("Graph, Node", "Graph, Hole, Node")
)
assert '.add(Outline, name="Plan")' in WITH_HOLE and "Hole, Node" in WITH_HOLE


def test_parse_error_keeps_last_good_graph_read_only(studio: Studio) -> None:
    page = studio.page
    studio.path.write_text(WITH_HOLE, encoding="utf-8")
    expect(page.locator("#holes-count")).to_have_text("1")
    good = studio.text
    page.mouse.click(*studio.center("Tech"))
    inspector = page.locator("#inspector")
    expect(inspector).to_be_visible()
    assert _top(page, "#inspector") == 46
    studio.path.write_text(good + "\napp = (\n", encoding="utf-8")
    banner = page.locator("#banner")
    expect(banner).to_be_visible(timeout=2000)
    expect(banner).to_contain_text("line")
    expect(banner).to_contain_text("was never closed; fix the syntax error first")
    assert "cannot parse" not in banner.inner_text()  # the file and line are said once
    expect(studio.box("Classify")).to_be_visible()
    expect(page.locator("#add-node")).to_be_disabled()
    # the open panel's controls are disabled too (#41: they still looked enabled)
    for control in ("#rename-input", "#rename-ok", "#delete-node"):
        expect(page.locator(control)).to_be_disabled()
    assert page.evaluate("document.body.classList.contains('read-only')")
    # Found by QA: the banner covered the top of the side panel; now the panel sits below it
    page.wait_for_function(
        "() => document.getElementById('inspector').getBoundingClientRect().top >= "
        "document.getElementById('banner').getBoundingClientRect().bottom - 0.5"
    )
    assert _top(page, "#inspector") > 46
    # ... and the holes badge does not drop to 0 because the file cannot be read for now
    expect(page.locator("#holes-count")).to_have_text("1")
    studio.path.write_text(good, encoding="utf-8")
    expect(banner).to_be_hidden(timeout=2000)
    expect(page.locator("#add-node")).to_be_enabled()
    for control in ("#rename-input", "#rename-ok", "#delete-node"):
        expect(page.locator(control)).to_be_enabled()
    page.wait_for_function(
        "() => document.getElementById('inspector').getBoundingClientRect().top === 46"
    )
    expect(page.locator("#holes-count")).to_have_text("1")


def _top(page: Page, selector: str) -> float:
    return float(page.evaluate(f"document.querySelector('{selector}').getBoundingClientRect().top"))


def test_conflict_reloads(studio: Studio) -> None:
    """An edit made against an old version is a 409: the canvas says so and reloads."""
    page = studio.page

    # the file changed after the canvas read it: the edit carries the version it saw before
    def stale(route: Any) -> None:
        body = json.loads(route.request.post_data or "{}")
        body["version"] = "0" * 64
        route.continue_(post_data=json.dumps(body))

    page.route("**/api/edit", stale)
    studio.drag(studio.handle("Fallback"), studio.center("Tech"))
    expect(page.locator("#toast.conflict")).to_be_visible()
    assert [(e.source, e.target) for e in studio.ir().edges].count(("Fallback", "Tech")) == 0


def test_holes_badge_lists_holes(tmp_path: Path, browser: Browser) -> None:
    other = tmp_path / "other.py"
    other.write_text(
        "from tensorsketch import Context, Hole, Node, Schema\n\n\n"
        "class Draft(Node):\n"
        "    class In(Schema):\n        query: str\n\n"
        "    class Out(Schema):\n        answer: str\n\n"
        "    async def run(self, ctx: Context, inp: In) -> Out:\n"
        '        raise Hole("draft a reply from the docs")\n',
        encoding="utf-8",
    )
    path = tmp_path / "support_router.py"
    path.write_text(MAPPED, encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        expect(page.locator("#holes-count")).to_have_text("1")
        page.click("#holes-badge")
        row = page.locator("#holes-list tr.hole-row")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("Draft")
        expect(row).to_contain_text("draft a reply from the docs")
        expect(row).to_contain_text("other.py")
        # Escape closes the list
        page.keyboard.press("Escape")
        expect(page.locator("#holes-list")).to_be_hidden()
        expect(page.locator("#holes-badge")).to_have_attribute("aria-expanded", "false")
        # a hole of the opened file is named as the canvas names its node
        path.write_text(WITH_HOLE, encoding="utf-8")
        expect(page.locator("#holes-count")).to_have_text("2")
        page.click("#holes-badge")
        plan = row.filter(has_text="outline the answer")
        expect(plan.locator("td").nth(1)).to_have_text("Plan (class Outline)")
        expect(page.locator('#boxes g.box[data-id="Plan"]')).to_be_visible()
        page.close()


# -- view and export ---------------------------------------------------------------------------


def test_zoom_fit_and_export(studio: Studio) -> None:
    page = studio.page
    k0 = page.evaluate("window.__studio.state.view.k")
    page.click("#zoom-in")
    assert page.evaluate("window.__studio.state.view.k") > k0
    page.click("#reset")
    assert page.evaluate("window.__studio.state.view.k") == 1
    page.click("#fit")
    assert page.evaluate("window.__studio.state.view.k") == pytest.approx(k0)
    # pan by dragging the background
    x0 = page.evaluate("window.__studio.state.view.x")
    studio.drag((700, 760), (600, 760))
    assert page.evaluate("window.__studio.state.view.x") == pytest.approx(x0 - 100, abs=2)
    page.click("#export-mermaid")
    expect(page.locator("#export-text")).to_have_value(_contains("Classify"))
    page.click("#export-dialog button")
    svg = page.evaluate("window.__studio.exportSvg()")
    assert svg.startswith("<svg") and "Classify" in svg and "font/woff2;base64" in svg
    with page.expect_download() as dl:
        page.click("#export-png")
    png = Path(dl.value.path()).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def _contains(text: str) -> Any:
    import re

    return re.compile(re.escape(text))


# -- layout and accessibility -----------------------------------------------------------------


#: Every visible toolbar control, where it is, and where the stage starts.
TOOLBAR = """() => {
    const t = document.getElementById('toolbar');
    const r = t.getBoundingClientRect();
    const controls = [...t.querySelectorAll('button, select')].filter((e) => e.offsetParent);
    const off = controls.filter((e) => {
        const b = e.getBoundingClientRect();
        return b.left < 0 || b.right > innerWidth || b.top < 0 || b.bottom > r.bottom;
    });
    return {scroll: t.scrollWidth, client: t.clientWidth, bottom: r.bottom, n: controls.length,
            off: off.map((e) => e.id),
            stage: document.getElementById('stage').getBoundingClientRect().top};
}"""


@pytest.mark.parametrize("size", [(900, 600), (1280, 800), (1500, 860)])
def test_every_toolbar_control_is_on_screen(
    tmp_path: Path, browser: Browser, size: tuple[int, int]
) -> None:
    """Found by QA: at 900 px the export buttons were past the window's edge (the toolbar
    did not wrap), and Tab could focus a control nobody could see."""
    path = tmp_path / "support_router.py"
    path.write_text(MAPPED, encoding="utf-8")
    width, height = size
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": width, "height": height})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        page.click("#live")  # the run picker too: the widest toolbar without a backend
        expect(page.locator("#run-picker")).to_be_visible()
        geo = page.evaluate(TOOLBAR)
        assert geo["scroll"] <= geo["client"] and geo["off"] == [], geo
        assert geo["n"] >= 12
        assert geo["stage"] == pytest.approx(geo["bottom"], abs=1)  # nothing hides under it
        if width >= 1280:
            assert geo["bottom"] == 46  # one row, as it always was
        else:
            assert geo["bottom"] < 100  # two rows at most
        # every control Tab reaches is on screen while it has the focus
        page.evaluate("document.activeElement && document.activeElement.blur()")
        seen: list[tuple[str, bool]] = []
        for _ in range(geo["n"]):
            page.keyboard.press("Tab")
            seen.append(
                tuple(  # type: ignore[arg-type]
                    page.evaluate(
                        "(() => { const e = document.activeElement; "
                        "const b = e.getBoundingClientRect(); return [e.id, b.left >= 0 && "
                        "b.right <= innerWidth && b.top >= 0 && b.bottom <= innerHeight]; })()"
                    )
                )
            )
        assert all(ok for _, ok in seen), seen
        assert {"add-node", "holes-badge", "export-mermaid", "export-png"} <= {i for i, _ in seen}
        page.close()
        assert not errors, errors


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


def test_every_control_has_a_name(tmp_path: Path, browser: Browser) -> None:
    path = tmp_path / "support_router.py"
    path.write_text(WITH_HOLE, encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        assert page.evaluate(UNNAMED) == []
        # a hole's side panel: the rename field, the ports' remove buttons, the new port
        page.locator('#boxes g.box[data-id="Plan"]').click()
        expect(page.locator("#port-name")).to_be_visible()
        expect(page.locator("#inspector [data-remove-port]")).to_have_count(2)
        assert page.evaluate(UNNAMED) == []
        expect(page.locator("#rename-input")).to_have_attribute("aria-label", "new name for Plan")
        page.close()


def test_a_file_without_a_graph_shows_the_servers_message(tmp_path: Path, browser: Browser) -> None:
    """Found by QA: the page said "No graph to show yet." whatever the server explained."""
    path = tmp_path / "helpers.py"
    path.write_text("from tensorsketch import Node\n\n\nclass Draft(Node):\n    pass\n")
    message = StudioApp(path=path, token="t", project=tmp_path).graph_view()["message"]
    assert message
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        expect(page.locator("#empty")).to_be_visible()
        expect(page.locator("#empty")).to_have_text(message)
        page.close()


# -- live trace overlay ------------------------------------------------------------------------


def _run_graph(
    path: Path, url: str, queries: list[str], *, break_tech: bool = False, ask: bool = False
) -> None:
    """Run the file's graph in-process, its spans sent to the Studio as they finish.
    ``ask``: Billing waits for a person's answer (the run suspends on a durable thread)."""
    from tensorsketch import InMemoryBackend, InMemoryTracer, MultiTracer
    from tensorsketch.observability.export import http_span_sink

    source = path.read_text(encoding="utf-8")
    if ask:  # a copy whose Billing node asks a person first
        billing = 'return self.Out(answer=f"[Billing] Looking into your billing question:'
        assert billing in source
        source = source.replace(
            billing,
            "from tensorsketch import interrupt\n"
            '        await interrupt(ctx, "refund it?", id="refund")\n'
            "        " + billing,
        )
    if break_tech:  # a copy whose Tech node fails (the Studio's file stays as it is)
        source = source.replace(
            """return self.Out(answer=f"[Tech] Let's debug that: {inp.query}")""",
            'raise RuntimeError("tech desk is down")',
        )
        assert "tech desk is down" in source
    copy = path.with_name(f"_run_{time.monotonic_ns()}.py")
    copy.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(copy.stem, copy)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sink = http_span_sink(url + "/api/trace")

    def work() -> None:
        for query in queries:
            tracer = MultiTracer(InMemoryTracer(), sink)
            durable: dict[str, Any] = (
                {"thread_id": f"ask-{query}", "backend": InMemoryBackend()} if ask else {}
            )
            try:
                asyncio.run(module.app.invoke({"query": query}, tracer=tracer, **durable))
            except Exception:  # the failing run is the point
                pass

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(30)
    assert sink.flush(10)
    sink.close()


def test_live_trace_overlay(studio: Studio) -> None:
    page = studio.page
    page.click("#live")
    expect(page.locator("#run-picker")).to_be_visible()
    _run_graph(studio.path, studio.server.base_url, ["I'd like a refund on my invoice"])
    ring = page.locator('.trace-ring[data-node="Billing"]')
    expect(ring).to_have_count(1, timeout=5000)
    expect(ring).to_have_class(_contains("ok"))
    expect(ring.locator(".trace-badge")).to_contain_text("1 call")
    expect(ring.locator(".trace-badge")).to_contain_text("ms")
    expect(page.locator('.trace-ring[data-node="Tech"]')).to_have_count(0)

    # a second run, failing in Tech: the picker tells the runs apart, the ring turns red
    _run_graph(studio.path, studio.server.base_url, ["The app shows an error"], break_tech=True)
    expect(page.locator("#run-picker option")).to_have_count(2, timeout=5000)
    tech = page.locator('.trace-ring[data-node="Tech"]')
    expect(tech).to_have_class(_contains("error"), timeout=5000)
    expect(page.locator('.trace-ring[data-node="Billing"]')).to_have_count(0)
    # clicking a node shows its last spans, with the error text
    page.mouse.click(*studio.center("Tech"))
    expect(page.locator("#inspector table.spans")).to_contain_text("tech desk is down")
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / "studio-live-overlay.png"))
    # back to the first run
    first = page.locator("#run-picker option").first.get_attribute("value")
    page.select_option("#run-picker", first)
    expect(page.locator('.trace-ring[data-node="Billing"]')).to_have_count(1)


def test_run_picker_labels_a_suspended_run_suspended(studio: Studio) -> None:
    """A run that returned waiting for a person is not "ok" (done) in the run picker."""
    page = studio.page
    page.click("#live")
    expect(page.locator("#run-picker")).to_be_visible()
    _run_graph(studio.path, studio.server.base_url, ["I'd like a refund"], ask=True)
    option = page.locator("#run-picker option")
    expect(option).to_have_count(1, timeout=5000)
    expect(option).to_contain_text("suspended")
    expect(option).not_to_contain_text(" ok ")
    ring = page.locator('.trace-ring[data-node="Billing"]')
    expect(ring).to_have_class(_contains("suspended"), timeout=5000)
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / "studio-suspended-run.png"))


def test_big_graph_has_minimap_and_fits(tmp_path: Path, browser: Browser) -> None:
    path = tmp_path / "big.py"
    path.write_text(generated_graph(120), encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0", timeout=20_000)
        expect(page.locator("#boxes g.box.node")).to_have_count(120)
        expect(page.locator("#minimap")).to_be_visible()
        # opened at a legible zoom on the START end, not shrunk to dots
        assert page.evaluate("window.__studio.state.view.k") >= 0.45
        start = page.locator('#boxes g.box[data-id="__start__"]').bounding_box()
        assert start and 0 <= start["x"] < 200 and 46 <= start["y"] < 800
        # fit shows all of it
        page.click("#fit")
        bb = page.locator("#viewport").bounding_box()
        assert bb and bb["x"] >= 0 and bb["x"] + bb["width"] <= 1400
        # the minimap moves the view
        x0 = page.evaluate("window.__studio.state.view.x")
        page.click("#minimap", position={"x": 200, "y": 75})
        assert page.evaluate("window.__studio.state.view.x") != x0
        # the Mermaid text opens at its first line (found by QA: it opened scrolled down)
        page.click("#export-mermaid")
        expect(page.locator("#export-text")).to_have_value(_contains("flowchart"))
        area = page.evaluate(
            "(() => { const t = document.getElementById('export-text'); "
            "return [t.scrollTop, t.scrollHeight > t.clientHeight, t.selectionStart]; })()"
        )
        assert area == [0, True, 0]
        page.close()


def generated_graph(n: int) -> str:
    """A file with ``n`` nodes: a chain with a conditional fan-out every tenth node."""
    lines = [
        "from tensorsketch import END, START, Context, Graph, Node, Schema",
        "",
        "",
        "class S(Schema):",
        "    text: str = ''",
        "    step: int = 0",
        "",
    ]
    for i in range(n):
        lines += [
            "",
            f"class N{i}(Node):",
            "    class In(Schema):",
            "        text: str",
            "",
            "    class Out(Schema):",
            "        text: str",
            "",
            "    async def run(self, ctx: Context, inp: In) -> Out:",
            f"        return self.Out(text=inp.text + '{i % 10}')",
            "",
        ]
    lines += ["", "def pick(state: S) -> str:", "    return 'a'", "", "", "app = (", "    Graph(S)"]
    lines += [f"    .add(N{i})" for i in range(n)]
    lines.append('    .edge(START, "N0")')
    for i in range(n - 1):
        if i % 10 == 5 and i + 2 < n:
            lines.append(f'    .conditional("N{i}", pick, {{"a": "N{i + 1}", "b": "N{i + 2}"}})')
        elif i % 10 == 6:
            lines.append(f'    .edge("N{i}", "N{i + 2}")')
        else:
            lines.append(f'    .edge("N{i}", "N{i + 1}")')
    lines.append(f'    .edge("N{n - 1}", END)')
    lines.append(").compile()")
    return "\n".join(lines) + "\n"


def test_generated_graph_is_valid() -> None:
    ir = extract(generated_graph(30))
    assert len(ir.nodes) == 30
    assert any(e.kind == "conditional" for e in ir.edges)
    assert EdgeIR("N29", END) in ir.edges
    assert sys.version_info >= (3, 11)


# -- #41 defect 1: no gesture can lose code ----------------------------------------------------


def _transform(page: Page) -> str:
    return str(page.evaluate("document.getElementById('viewport').getAttribute('transform')"))


def test_an_edit_is_painted_once_and_keeps_the_view(studio: Studio) -> None:
    """After an edit the page made, the quiet reload that follows brings the same graph back:
    no second paint and no re-fit, so the canvas does not jump a moment after the edit (the
    flake ``settle()`` works around; this test deliberately does not call it)."""
    page = studio.page
    page.mouse.click(*studio.center("Tech"))
    paints = studio.paints()

    def graph_get(resp: Any) -> bool:
        return "/api/graph" in resp.url and resp.request.method == "GET"

    # the edit's own paint, then the quiet reload it starts: wait for that reload's answer
    with page.expect_response(graph_get):
        page.fill("#rename-input", "Techie")
        page.press("#rename-input", "Enter")
        studio.wait_paint_after(paints)
        after_edit = studio.paints()
        view = _transform(page)
    expect(studio.box("Techie")).to_be_visible()
    # the reload's answer has been handled once the page is idle again (two frames later);
    # a re-fit, were there one, would come on the frames after the repaint
    page.wait_for_function("!document.body.classList.contains('busy')")
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    page.wait_for_timeout(400)
    assert _transform(page) == view
    assert studio.paints() == after_edit == paints + 1
    assert studio.ir().node("Techie").cls == "Tech"
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / "studio-after-edit.png"))


def test_opening_the_panel_does_not_move_the_view(studio: Studio) -> None:
    page = studio.page
    before = _transform(page)
    tech = studio.center("Tech")
    page.mouse.click(*studio.center("Classify"))
    expect(page.locator("#inspector")).to_be_visible()
    assert _transform(page) == before
    assert studio.center("Tech") == pytest.approx(tech, abs=0.5)
    page.keyboard.press("Escape")
    expect(page.locator("#inspector")).to_be_hidden()
    assert _transform(page) == before


def test_double_click_rename_then_backspace_keeps_every_wire(studio: Studio) -> None:
    """The issue's path: double-click a node, type a name, press Backspace."""
    page = studio.page
    original = studio.text
    page.mouse.dblclick(*studio.center("Tech"))
    expect(page.locator("#rename-input")).to_be_focused()
    page.keyboard.type("Techie")
    page.keyboard.press("Backspace")
    assert studio.text == original
    expect(page.locator("#rename-input")).to_have_value("Techi")
    expect(page.locator('g.wire[data-source="Tech"][data-target="__end__"]')).to_have_count(1)


def test_backspace_deletes_only_a_wire_the_user_selected(studio: Studio) -> None:
    page = studio.page
    original = studio.text
    wire = 'g.wire[data-source="Tech"][data-target="__end__"]'
    # a double-click that lands on a wire is not a selection to delete
    page.mouse.dblclick(*studio.wire_point("Tech", END))
    page.keyboard.press("Backspace")
    page.wait_for_timeout(300)
    assert studio.text == original
    # typing after selecting a wire means the user thinks they are in a field: Backspace
    # then edits nothing
    page.keyboard.press("Escape")
    expect(page.locator("#inspector")).to_be_hidden()
    page.mouse.click(*studio.wire_point("Tech", END))
    expect(page.locator(f"{wire}.selected")).to_have_count(1)
    page.keyboard.type("Tx")
    page.keyboard.press("Backspace")
    page.wait_for_timeout(300)
    assert studio.text == original
    expect(page.locator(wire)).to_have_count(1)
    # a plain click, then Delete: the explicit gesture still deletes
    before = studio.paints()
    page.mouse.click(10, 400)
    page.mouse.click(*studio.wire_point("Tech", END))
    page.keyboard.press("Backspace")
    studio.wait_paint_after(before)
    expect(page.locator(wire)).to_have_count(0)
    assert '.edge("Tech", END)' not in studio.text


# -- #41 defect 2: undo is exact ---------------------------------------------------------------


def test_undoing_a_whole_session_in_the_page_gives_the_file_back(studio: Studio) -> None:
    """+ node, a wire, a deleted plain edge, a rename and a move, then Ctrl+Z for each: the
    file is byte-identical and no node stays pinned that was not pinned before."""
    page = studio.page
    original = studio.path.read_bytes()

    def step(action: Any) -> None:
        before = studio.paints()
        action()
        studio.wait_paint_after(before)
        studio.settle()  # the edit's quiet reload too: the next click lands on a still page

    def add_node() -> None:
        page.click("#add-node")
        page.fill("#new-name", "Escalate")
        page.fill("#new-inputs", "query: str")
        page.click("#new-ok")

    step(add_node)
    expect(studio.box("Escalate")).to_be_visible()
    step(lambda: studio.drag(studio.handle("Escalate"), studio.center(END)))
    page.mouse.click(*studio.wire_point("Tech", END))
    step(lambda: page.keyboard.press("Delete"))
    page.keyboard.press("Escape")
    page.mouse.click(*studio.center("Billing"))
    page.fill("#rename-input", "Payments")
    step(lambda: page.press("#rename-input", "Enter"))
    expect(studio.box("Payments")).to_be_visible()
    page.mouse.click(5, 790)  # the background: nothing selected, the side panel closes
    expect(page.locator("#inspector")).to_be_hidden()
    fallback = studio.center("Fallback")
    step(lambda: studio.drag(fallback, (fallback[0] - 60, fallback[1] + 90)))
    # (the paint step() waited for can be the previous edit's reload, on a busy machine: the
    # move's sidecar write may land a moment later)
    deadline = time.monotonic() + 5
    while "Fallback" not in studio.sidecar() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "Fallback" in studio.sidecar()
    changed = studio.path.read_bytes()
    assert changed != original

    page.mouse.click(5, 790)  # nothing focused, nothing selected
    for _ in range(5):
        page.keyboard.press("Control+z")
        page.wait_for_function("!document.body.classList.contains('busy')")
        page.wait_for_timeout(150)
    expect(page.locator("#undo")).to_be_disabled()
    assert studio.path.read_bytes() == original
    assert "Fallback" not in studio.sidecar(), "undoing a first move unpins the node"
    assert "Escalate" not in [n.name for n in studio.ir().nodes]
    expect(studio.box("Billing")).to_be_visible()
    # and redo gives the session's text back
    for _ in range(5):
        page.keyboard.press("Control+y")
        page.wait_for_function("!document.body.classList.contains('busy')")
        page.wait_for_timeout(150)
    assert studio.path.read_bytes() == changed


def test_nodes_reached_only_through_a_stub_sit_after_its_source(
    tmp_path: Path, browser: Browser
) -> None:
    """#41 defects 4/5: the targets of a `route → ?` stub are not placed beside START."""
    path = tmp_path / "support_router.py"
    path.write_text(OPAQUE, encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        expect(page.locator("g.box.stub")).to_have_text("route → ?")
        classify = box_x(page, "Classify")
        for name in ("Billing", "Tech", "Fallback"):
            assert box_x(page, name) > classify + 100, name
        assert box_x(page, "Classify") > box_x(page, START)
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "studio-stub-targets.png"))
        page.close()


#: Two branches in one rank, each a loop: whichever is drawn lower, its arc rises toward the
#: other (#41 item 5: the arc and its label were drawn over the node above).
TWO_LOOPS = LOOP.replace(
    'app = Graph(C).add(Increment).edge(START, "Increment").loop("Increment", until=done, '
    "exit=END)\n",
    "class Other(Increment):\n    pass\n\n\n"
    "class Third(Increment):\n    pass\n\n\n"
    "app = (\n    Graph(C).add(Increment).add(Other).add(Third)\n"
    '    .edge(START, "Increment").edge(START, "Other").edge(START, "Third")\n'
    '    .loop("Increment", until=done, exit=END)\n'
    '    .loop("Other", until=done, exit=END)\n'
    '    .loop("Third", until=done, exit=END)\n)\n',
)


def _overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_a_loop_arc_and_its_label_stay_clear_of_other_nodes(
    tmp_path: Path, browser: Browser
) -> None:
    assert "Other" in TWO_LOOPS
    path = tmp_path / "loops.py"
    path.write_text(TWO_LOOPS, encoding="utf-8")
    assert sum(e.branch == "loop" for e in extract(TWO_LOOPS).edges) == 6
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0")
        names = ["Increment", "Other", "Third"]
        boxes = {
            n: page.locator(f'#boxes g.box[data-id="{n}"] > g').first.bounding_box() for n in names
        }
        for name in names:
            arc = page.locator(f'g.wire[data-source="{name}"][data-target="{name}"] path.hit')
            bb = arc.bounding_box()
            for other in names:
                box = boxes[other]
                if other != name:
                    assert bb and box and not _overlaps(bb, box), (name, "arc over", other)
        labels = page.locator("#labels .edge-label", has_text="repeat until")
        assert labels.count() == 3
        for i in range(labels.count()):
            lb = labels.nth(i).bounding_box()
            for other in names:
                box = boxes[other]
                assert lb and box and not _overlaps(lb, box), (i, "label over", other)
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "studio-loops.png"))
        page.close()


# -- screenshots of three sizes, normal and debug (docs/studio.md, "Big graphs") --------------


@pytest.mark.parametrize(("label", "nodes"), [("router", 0), ("43", 43), ("117", 117)])
def test_three_graph_sizes_normal_and_debug(
    tmp_path: Path, browser: Browser, label: str, nodes: int
) -> None:
    """The support router, a 43-node and a 117-node graph at fit in a 1440x900 window, then in
    debug mode on a recorded thread (a checkpoint open): every node drawn, START and END on
    screen, nothing under the minimap."""
    from tensorsketch.canvas.studio.debug_source import GraphSource
    from tensorsketch.runtime.backends.sqlite import SqliteBackend

    path = tmp_path / ("support_router.py" if not nodes else f"graph_{nodes}.py")
    path.write_text(EXAMPLE.read_text(encoding="utf-8") if not nodes else generated_graph(nodes))
    db = tmp_path / "runs.db"
    app = GraphSource(path).get().graph
    assert app is not None

    async def record() -> None:
        backend = SqliteBackend(db)
        try:
            await app.invoke(
                {"query": "The app shows an error"} if not nodes else {"text": "x"},
                thread_id="sizes",
                backend=backend,
                max_steps=400,
            )
        finally:
            await backend.aclose()

    # Playwright's sync API runs an event loop on this thread: record on another one
    recorder = threading.Thread(target=lambda: asyncio.run(record()))
    recorder.start()
    recorder.join(120)
    assert db.exists()
    IMAGES.mkdir(parents=True, exist_ok=True)
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0", timeout=20_000)
        page.click("#fit")
        page.wait_for_timeout(200)
        expect(page.locator("#boxes g.box.node")).to_have_count(nodes or 4)
        _assert_all_on_screen_and_clear_of_the_minimap(page)
        # every node's name reads at 11 px or more on screen: drawn in the scene when the
        # zoom allows it, else again in screen space over the node
        k = page.evaluate("window.__studio.state.view.k")
        labels = page.locator("#min-labels text.min-label")
        if 20 * k >= 11:
            assert labels.count() == 0
        else:
            assert labels.count() == nodes
            heights = page.evaluate(
                "[...document.querySelectorAll('#min-labels text')].map(t => t.getBBox().height)"
            )
            assert min(heights) >= 11
        page.screenshot(path=str(IMAGES / f"studio-size-{label}.png"))
        page.close()
    with StudioServer(path, port=0, project=tmp_path, backend=f"sqlite:///{db}") as server:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(server.url)
        page.wait_for_selector("#dbg-panel:not([hidden])", timeout=10_000)
        page.fill("#dbg-search", "sizes")
        page.wait_for_function("window.__studio.debug.listed === 'sizes'", timeout=5000)
        page.click('.dbg-thread-row[data-thread="sizes"]')
        page.wait_for_function(
            "window.__studio.debug.thread?.thread_id === 'sizes' && "
            "window.__studio.debug.checkpoint?.id === window.__studio.debug.thread.head",
            timeout=10_000,
        )
        rows = page.locator(".tl-row")
        rows.nth(min(1, rows.count() - 1)).click()
        page.wait_for_timeout(300)
        page.click("#fit")
        page.wait_for_timeout(300)
        page.screenshot(path=str(IMAGES / f"studio-size-{label}-debug.png"))
        page.close()


def _assert_all_on_screen_and_clear_of_the_minimap(page: Page) -> None:
    stage = page.locator("#canvas").bounding_box()
    assert stage
    minimap = page.locator("#minimap")
    mm = minimap.bounding_box() if minimap.is_visible() else None
    for box in page.locator("#boxes g.box").all():
        bb = box.bounding_box()
        assert bb
        assert (
            bb["x"] >= stage["x"] - 1 and bb["x"] + bb["width"] <= stage["x"] + stage["width"] + 1
        )
        assert (
            bb["y"] >= stage["y"] - 1 and bb["y"] + bb["height"] <= stage["y"] + stage["height"] + 1
        )
        if mm:
            assert not _overlaps(bb, mm), f"the minimap covers {box.get_attribute('data-id')}"


def test_find_a_node_by_name_in_a_big_graph(tmp_path: Path, browser: Browser) -> None:
    """#41 item 11 (node search): '/' focuses the search, a name (or the only node a prefix
    starts) centres the view on it at a readable zoom and selects it."""
    path = tmp_path / "big.py"
    path.write_text(generated_graph(117), encoding="utf-8")
    with StudioServer(path, port=0, project=tmp_path) as server:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0", timeout=20_000)
        page.click("#fit")
        page.mouse.click(700, 880)
        page.keyboard.press("/")
        expect(page.locator("#node-search")).to_be_focused()
        page.keyboard.type("1")  # in N1, N10, N11...: more than one, the view stays
        page.keyboard.press("Enter")
        expect(page.locator("#toast")).to_contain_text("No single node matches")
        page.fill("#node-search", "n104")
        page.press("#node-search", "Enter")
        expect(page.locator('#boxes g.box.selected[data-id="N104"]')).to_have_count(1)
        expect(page.locator("#inspector h3")).to_have_text("N104")
        assert page.evaluate("window.__studio.state.view.k") >= 0.8
        box = page.locator('#boxes g.box[data-id="N104"] > g').first.bounding_box()
        stage = page.locator("#canvas").bounding_box()
        assert box and stage
        centre = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        assert abs(centre[0] - (stage["x"] + stage["width"] / 2)) < 40
        assert abs(centre[1] - (stage["y"] + stage["height"] / 2)) < 60
        # and F fits the whole graph again (typing keys never stops the shortcuts)
        page.locator("#node-search").blur()
        page.keyboard.press("f")
        page.wait_for_function("window.__studio.state.view.k < 0.8")
        page.close()


# -- #41: a rename in a `>>` file is one small diff -------------------------------------------

RSHIFT = '''"""A pipeline wired with >>."""

from tensorsketch import END, START, Context, Graph, Node, Schema


class S(Schema):
    query: str = ""
    answer: str = ""


class Parse(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        query: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(query=inp.query.strip())


class Answer(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=inp.query)


class Check(Node):
    class In(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> None:
        return None


g = Graph(S)
parse, answer, check = g.nodes(Parse, Answer, Check)
START >> parse >> answer  # the main path
answer >> check >> END
app = g.compile()
'''


def test_renaming_in_a_rshift_file_keeps_its_style(tmp_path: Path, browser: Browser) -> None:
    """Found in #41: a rename in a ``>>`` file gave the node a new handle, so every ``>>`` line
    that used it was rewritten (two chains merged into one). Now the diff is the declaration
    alone, the ``>>`` lines stay byte for byte, and undo gives the file back."""
    path = tmp_path / "pipeline.py"
    path.write_text(RSHIFT, encoding="utf-8")
    server = StudioServer(path, port=0, project=tmp_path).start()
    context = browser.new_context(viewport={"width": 1400, "height": 800})
    page = context.new_page()
    s = Studio(path, server, page)
    page.on("pageerror", lambda exc: s.errors.append(str(exc)))
    try:
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0", timeout=10_000)
        page.mouse.dblclick(*s.center("Answer"))
        expect(page.locator("#rename-input")).to_be_focused()
        page.fill("#rename-input", "Reply")
        before = s.paints()
        page.press("#rename-input", "Enter")
        s.wait_paint_after(before)
        expect(s.box("Reply")).to_be_visible()
        old_lines, new_lines = RSHIFT.splitlines(), s.text.splitlines()
        assert [line for line in old_lines if line not in new_lines] == [
            "parse, answer, check = g.nodes(Parse, Answer, Check)"
        ]
        added = [line for line in new_lines if line not in old_lines]
        # one line: the entry names its node, the tuple and the handle stay
        assert added == ['parse, answer, check = g.nodes(Parse, ("Reply", Answer), Check)']
        assert "START >> parse >> answer  # the main path\nanswer >> check >> END\n" in s.text
        assert [n.name for n in s.ir().nodes] == ["Parse", "Reply", "Check"]
        page.mouse.click(5, 790)
        page.keyboard.press("Control+z")
        page.wait_for_function("!document.body.classList.contains('busy')")
        expect(s.box("Answer")).to_be_visible()
        assert s.text == RSHIFT
    finally:
        context.close()
        server.stop()
    assert not s.errors, s.errors


# -- #41 item 9: every kind of wiring from the canvas -----------------------------------------

WIRING = RSHIFT.replace(
    "class Parse(Node):",
    """def pick(state: S) -> str:
    return "done" if state.answer else "again"


def enough(state: S) -> bool:
    return bool(state.answer)


def fan(state: S) -> list[Send]:
    return [Send("Check", {"answer": part}) for part in state.query.split()]


class Parse(Node):""",
).replace(
    "import END, START, Context, Graph, Node, Schema",
    "import END, START, Context, Graph, Node, Schema, Send",
)
WIRING_STATEMENT = WIRING.replace(
    "parse, answer, check = g.nodes(Parse, Answer, Check)\n"
    "START >> parse >> answer  # the main path\n"
    "answer >> check >> END\n",
    'g.add(Parse)\ng.add(Answer)\ng.add(Check)\ng.edge(START, "Parse")\n'
    'g.edge("Parse", "Answer")  # the main path\ng.edge("Check", END)\n',
)
assert 'g.edge("Check", END)' in WIRING_STATEMENT


def _serve(tmp_path: Path, browser: Browser, text: str, backend: str | None = None) -> Studio:
    path = tmp_path / "flow.py"
    path.write_text(text, encoding="utf-8")
    server = StudioServer(path, port=0, project=tmp_path, backend=backend).start()
    page = browser.new_context(viewport={"width": 1400, "height": 800}).new_page()
    s = Studio(path, server, page)
    page.on("pageerror", lambda exc: s.errors.append(str(exc)))
    page.goto(server.url)
    page.wait_for_function("window.__studio && window.__studio.paints > 0", timeout=10_000)
    return s


def _close(s: Studio) -> None:
    s.page.context.close()
    s.server.stop()
    assert not s.errors, s.errors


def _added(s: Studio, before: str) -> list[str]:
    old = set(before.splitlines())
    return [line for line in s.text.splitlines() if line not in old and not line.startswith("from")]


def _undo_all(s: Studio, steps: int) -> None:
    s.page.mouse.click(5, 790)
    for _ in range(steps):
        s.page.keyboard.press("Control+z")
        s.page.wait_for_function("!document.body.classList.contains('busy')")
        s.page.wait_for_timeout(150)


def test_routes_loops_fanouts_and_joins_are_drawn_from_the_node_panel(
    tmp_path: Path, browser: Browser
) -> None:
    """Each kind of wiring from the node panel's "wiring" section, in a statement-style file:
    the line it writes, the wire it draws, and undo back to the exact bytes."""
    s = _serve(tmp_path, browser, WIRING_STATEMENT)
    page = s.page
    try:
        functions = page.evaluate("window.__studio.state.functions")
        assert functions == ["pick", "enough", "fan"]

        def add(node: str, kind: str, **fields: str | list[str]) -> None:
            page.mouse.click(*s.center(node))
            page.select_option("#wire-kind", kind)
            for field, value in fields.items():
                if field == "wire-label":
                    page.fill(f"#{field}", str(value))
                else:
                    page.select_option(f"#{field}", value)
            before = s.paints()
            page.click("#wire-add")
            s.wait_paint_after(before)

        start = s.text
        add("Answer", "route", **{"wire-target": "Check", "wire-label": "done", "wire-fn": "pick"})
        assert _added(s, start) == ['g.conditional("Answer", pick, {"done": "Check"})']
        expect(page.locator('g.wire[data-source="Answer"][data-target="Check"]')).to_have_count(1)
        # the node routes now: a second route is a key of the same call, no function asked
        page.mouse.click(*s.center("Answer"))
        expect(page.locator("#wire-fn")).to_have_count(0)
        expect(page.locator("#wiring")).to_contain_text("via pick")
        one = s.text
        add("Answer", "route", **{"wire-target": "__end__", "wire-label": "stop"})
        assert _added(s, one) == ['g.conditional("Answer", pick, {"done": "Check", "stop": END})']
        # a loop and a fan-out need a node whose successors are free: Check's END edge goes
        page.mouse.click(*s.wire_point("Check", END))
        before = s.paints()
        page.keyboard.press("Delete")
        s.wait_paint_after(before)
        two = s.text
        add("Check", "loop", **{"wire-fn": "enough", "wire-target": "__end__"})
        assert _added(s, two) == ['g.loop("Check", until=enough)']
        expect(page.locator('g.wire[data-source="Check"][data-target="Check"]')).to_have_count(1)
        _undo_all(s, 1)
        assert s.text == two
        add("Check", "fanout", **{"wire-fn": "fan"})
        assert _added(s, two) == ['g.conditional("Check", fan)']
        # the fan-out's targets are read from fan's code: Send("Check", ...)
        expect(page.locator('g.wire[data-source="Check"][data-target="Check"]')).to_have_count(1)
        three = s.text
        add("Parse", "join", **{"wire-with": ["Answer"], "wire-target": "Check"})
        assert _added(s, three) == ['g.edge(["Parse", "Answer"], "Check")']
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.mouse.click(*s.center("Parse"))
        page.select_option("#wire-kind", "route")
        page.screenshot(path=str(IMAGES / "studio-wiring.png"))
        assert s.ir().nodes  # the file reads back
        _undo_all(s, 5)
        assert s.text == start
    finally:
        _close(s)


def test_a_wire_drawn_from_a_router_is_a_new_route_and_its_label_edits_in_place(
    tmp_path: Path, browser: Browser
) -> None:
    """In a ``>>`` file: a wire dragged from a node that routes asks for its label and adds it
    to the same ``Router(...)``; the wire's panel renames the label; undo is exact."""
    routed = WIRING.replace(
        "answer >> check >> END\n", "answer >> Router(pick, done=check)\ncheck >> END\n"
    )
    s = _serve(tmp_path, browser, routed)
    page = s.page
    try:
        start = s.text
        s.drag(s.handle("Answer"), s.center("Parse"))
        expect(page.locator("#route-dialog")).to_be_visible()
        expect(page.locator("#route-label")).to_have_value("parse")
        expect(page.locator("#route-hint")).to_contain_text("routes through pick")
        page.fill("#route-label", "again")
        before = s.paints()
        page.click("#route-ok")
        s.wait_paint_after(before)
        assert _added(s, start) == ["answer >> Router(pick, done=check, again=parse)"]
        one = s.text
        # cancelling the dialog writes nothing
        s.drag(s.handle("Answer"), s.center(END))
        expect(page.locator("#route-dialog")).to_be_visible()
        page.keyboard.press("Escape")
        page.wait_for_timeout(300)
        assert s.text == one
        # the label edits in the wire's panel
        page.mouse.click(*s.wire_point("Answer", "Parse"))
        expect(page.locator("#route-relabel")).to_have_value("again")
        page.fill("#route-relabel", "retry")
        before = s.paints()
        page.press("#route-relabel", "Enter")
        s.wait_paint_after(before)
        assert _added(s, one) == ["answer >> Router(pick, done=check, retry=parse)"]
        _undo_all(s, 2)
        assert s.text == start
    finally:
        _close(s)


# -- #41 item 12: a top-to-bottom layout ------------------------------------------------------


def _boxes(page: Page) -> dict[str, tuple[float, float, float, float]]:
    """Each box's screen rectangle (x, y, width, height)."""
    rects = page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('#boxes g.box')].map((g) => {
            const r = g.querySelector(':scope > g').getBoundingClientRect();
            return [g.dataset.id, [r.x, r.y, r.width, r.height]];
        }))"""
    )
    return {k: (v[0], v[1], v[2], v[3]) for k, v in rects.items()}


def test_the_graph_can_be_laid_out_top_to_bottom(tmp_path: Path, browser: Browser) -> None:
    """The toolbar's *top-down* button lays the ranks out top to bottom: each rank below the
    last, wires leaving a box at its bottom and entering the next at its top, the whole graph
    in view; the choice outlives a reload, and the button turns it back."""
    path = tmp_path / "support_router.py"
    path.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    server = StudioServer(path, port=0, project=tmp_path).start()
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(server.url)
        page.wait_for_function("window.__studio && window.__studio.paints > 0", timeout=10_000)
        lr = _boxes(page)
        assert lr[START][0] < lr["Classify"][0] < lr[END][0]
        expect(page.locator("#direction")).to_have_attribute("aria-pressed", "false")
        page.click("#direction")
        expect(page.locator("#direction")).to_have_attribute("aria-pressed", "true")
        page.wait_for_timeout(200)

        def check_top_down() -> None:
            tb = _boxes(page)
            start, classify, end = tb[START], tb["Classify"], tb[END]
            assert start[1] + start[3] < classify[1] and classify[1] + classify[3] < tb["Tech"][1]
            assert tb["Tech"][1] + tb["Tech"][3] < end[1]
            # START sits above Classify, centred on it
            assert abs((start[0] + start[2] / 2) - (classify[0] + classify[2] / 2)) < 2
            # everything is on the stage: the fit used the height
            stage = page.evaluate(
                "(() => { const r = document.getElementById('canvas').getBoundingClientRect();"
                " return [r.x, r.y, r.right, r.bottom]; })()"
            )
            for name, (x, y, w, h) in tb.items():
                assert x >= stage[0] and y >= stage[1], name
                assert x + w <= stage[2] and y + h <= stage[3], name
            # START → Classify leaves START's bottom and ends on Classify's top edge
            tip = page.evaluate(
                """() => {
                    const p = document.querySelector(
                        'g.wire[data-source="__start__"][data-target="Classify"] path.hit');
                    const m = p.getScreenCTM();
                    const a = p.getPointAtLength(0), b = p.getPointAtLength(p.getTotalLength());
                    const s = (q) => [q.x * m.a + q.y * m.c + m.e, q.x * m.b + q.y * m.d + m.f];
                    return [s(a), s(b)];
                }"""
            )
            assert tip[0][1] == pytest.approx(start[1] + start[3], abs=4)
            assert tip[1][1] == pytest.approx(classify[1], abs=4)

        check_top_down()
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "studio-top-down.png"))
        page.reload()
        page.wait_for_function("window.__studio && window.__studio.paints > 0", timeout=10_000)
        expect(page.locator("#direction")).to_have_attribute("aria-pressed", "true")
        check_top_down()
        page.click("#direction")
        page.wait_for_timeout(200)
        back = _boxes(page)
        assert back[START][0] < back["Classify"][0] < back[END][0]
    finally:
        context.close()
        server.stop()
    assert not errors, errors


# -- #42: a subgraph node opens into its own canvas -------------------------------------------

SUBGRAPHS = ROOT / "examples" / "subgraphs.py"


def test_a_subgraph_node_opens_into_its_own_canvas(tmp_path: Path, browser: Browser) -> None:
    """``add(research)`` draws as one box with a second sheet behind it; its *open* tag (or the
    panel's button) opens the graph it runs, with a breadcrumb back. An edit in there is an
    edit of that graph, written into the same file; the parent's wiring stays as it was."""
    s = _serve(tmp_path, browser, SUBGRAPHS.read_text(encoding="utf-8"))
    page = s.page
    try:
        before = s.paints()
        page.select_option("#graph-picker", "app")
        s.wait_paint_after(before)
        expect(page.locator("#crumbs")).to_be_hidden()
        research = s.box("Research")
        expect(research.locator(".sheet")).to_have_count(1)
        expect(s.box("Write").locator(".subgraph-open")).to_have_count(0)
        before = s.paints()
        research.locator(".subgraph-open").click()
        s.wait_paint_after(before)
        expect(page.locator("#graph-picker")).to_have_value("research")
        expect(page.locator("#crumbs")).to_have_text("app \u203a research")
        expect(s.box("Search")).to_be_visible()
        expect(s.box("Write")).to_have_count(0)
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "studio-subgraph-open.png"))
        # an edit inside is the child graph's, in the file that defines it
        app_wiring = s.text.split("report = Graph(Report)")[1]
        page.mouse.click(*s.center("Check"))
        page.fill("#rename-input", "Verify")
        before = s.paints()
        page.press("#rename-input", "Enter")
        s.wait_paint_after(before)
        assert '.add(Check, name="Verify")' in s.text
        assert s.text.split("report = Graph(Report)")[1] == app_wiring
        assert [n.name for n in extract(s.text, "research").nodes] == ["Search", "Verify"]
        # the breadcrumb goes back; the panel's button opens it again
        before = s.paints()
        page.click('#crumbs .crumb[data-graph="app"]')
        s.wait_paint_after(before)
        expect(page.locator("#graph-picker")).to_have_value("app")
        expect(page.locator("#crumbs")).to_be_hidden()
        page.mouse.click(*s.center("Research"))
        before = s.paints()
        page.click("#open-subgraph")
        s.wait_paint_after(before)
        expect(s.box("Verify")).to_be_visible()
        expect(page.locator("#crumbs")).to_have_text("app \u203a research")
    finally:
        _close(s)


# -- #42: the debugger and the live overlay inside a subgraph ----------------------------------

#: A parent whose subgraph node Review polishes a draft and then asks for a verdict.
REVIEWED = (Path(__file__).parent / "graphs" / "reviewed.py").read_text(encoding="utf-8")


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"_sub_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _on_sqlite(db: Path, fn: Any) -> Any:
    """``await fn(backend)`` on the SQLite file, on a thread of its own (Playwright's sync API
    keeps an event loop running in this one)."""
    from tensorsketch.runtime.backends.sqlite import SqliteBackend

    async def go() -> Any:
        backend = SqliteBackend(db)
        try:
            return await fn(backend)
        finally:
            await backend.aclose()

    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(asyncio.run(go())))
    worker.start()
    worker.join(60)
    return out[0]


def _show_app(s: Studio) -> None:
    if s.page.input_value("#graph-picker") != "app":
        before = s.paints()
        s.page.select_option("#graph-picker", "app")
        s.wait_paint_after(before)
    s.settle()


def _near(page: Page, node: str, card: str = "run-ask") -> None:
    """Wait until the card sits just below ``node``'s box (both read in one frame)."""
    page.wait_for_function(
        """([node, card]) => {
            const b = document.querySelector(`#boxes g.box[data-node="${node}"]`);
            const c = document.getElementById(card);
            if (!b || !c || c.hidden) return false;
            const box = b.getBoundingClientRect(), at = c.getBoundingClientRect();
            return Math.abs(at.y - box.bottom) < 20 && box.x - 5 <= at.x && at.x <= box.right;
        }""",
        arg=[node, card],
        timeout=10_000,
    )


def test_the_debugger_opens_a_subgraphs_namespace(tmp_path: Path, browser: Browser) -> None:
    """A thread suspended inside its subgraph: the parent's checkpoint shows the child's state
    nested under its task; *open* opens the subgraph on the canvas and its own checkpoints
    in the debugger (time travel inside it as in the parent's); the child's question is
    answered there and the whole run resumes; the crumb goes back to the parent thread."""
    db = tmp_path / "runs.db"
    source = tmp_path / "flow.py"
    source.write_text(REVIEWED, encoding="utf-8")
    module = _module(source)
    _on_sqlite(db, lambda b: module.app.invoke({"draft": "v1"}, thread_id="doc-a", backend=b))
    s = _serve(tmp_path, browser, REVIEWED, backend=f"sqlite:///{db}")
    page = s.page
    try:
        page.wait_for_selector("#dbg-panel:not([hidden])", timeout=10_000)
        _show_app(s)
        page.click('.dbg-thread-row[data-thread="doc-a"]')
        page.wait_for_function(
            "() => { const d = window.__studio.debug; return d.thread?.thread_id === 'doc-a' "
            "&& d.checkpoint?.id === d.thread.head; }",
            timeout=10_000,
        )
        nested = page.locator('#dbg-subgraphs .dbg-sub[data-task="Review"]')
        expect(nested).to_contain_text("suspended")
        expect(nested).to_contain_text('"v1!"')
        expect(nested).to_contain_text("polished")  # a field only the child has
        expect(nested).to_contain_text("waits in Ask: approve v1!?")
        s.settle()
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "studio-debug-subgraph-nested.png"))
        before = s.paints()
        nested.locator(".dbg-sub-open").click()
        s.wait_paint_after(before)
        expect(page.locator("#graph-picker")).to_have_value("review")
        expect(page.locator("#crumbs")).to_have_text("app \u203a review")
        page.wait_for_function(
            "() => { const d = window.__studio.debug; "
            "return d.thread?.namespace?.[0]?.task === 'Review' && d.checkpoint; }",
            timeout=10_000,
        )
        expect(page.locator("#dbg-crumbs")).to_have_text("inside doc-a \u203a Review")
        child = page.evaluate("window.__studio.debug.thread")
        history = _on_sqlite(db, lambda b: module.review.aget_history(child["thread_id"], b))
        expect(page.locator(".tl-row")).to_have_count(len(history))
        expect(page.locator('.dbg-mark.next[data-node="Ask"]')).to_be_visible()
        # time travel inside: the checkpoint Polish wrote, marked on the child's canvas
        polished = next(c["id"] for c in child["checkpoints"] if c["ran"] == ["Polish"])
        page.click(f'.tl-row[data-id="{polished}"]')
        page.wait_for_function(
            "id => window.__studio.debug.checkpoint?.id === id", arg=polished, timeout=10_000
        )
        expect(page.locator('.dbg-mark.ran[data-node="Polish"]')).to_be_visible()
        expect(page.locator('#dbg-state [data-channel="notes"]')).to_contain_text("polished")
        expect(page.locator("#dbg-step")).to_be_disabled()  # it runs inside its parent
        s.settle()
        page.screenshot(path=str(IMAGES / "studio-debug-subgraph.png"))
        # the question inside the child, answered in its namespace: the run goes on
        page.fill("#dbg-answer", "ok")
        page.click("#dbg-answer-ok")
        expect(page.locator("#dbg-confirm")).to_be_visible()
        page.click("#dbg-confirm-ok")
        page.wait_for_function(
            "() => window.__studio.debug.thread?.status === 'completed'", timeout=15_000
        )
        state = _on_sqlite(db, lambda b: module.app.aget_state("doc-a", b))
        assert state.draft == "v1! (ok)" and state.published is True
        # the crumb goes back out: the parent's canvas and thread
        before = s.paints()
        page.click('#dbg-crumbs .crumb[data-depth="0"]')
        s.wait_paint_after(before)
        expect(page.locator("#graph-picker")).to_have_value("app")
        page.wait_for_function(
            "() => window.__studio.debug.thread?.thread_id === 'doc-a'", timeout=10_000
        )
        expect(page.locator("#dbg-crumbs")).to_have_count(0)
    finally:
        _close(s)


def test_the_live_overlay_and_a_question_inside_a_subgraph(
    tmp_path: Path, browser: Browser
) -> None:
    """A run from the panel stops on a question inside its subgraph: on the parent's canvas
    the subgraph node waits and the card is drawn at it; opened, the subgraph's canvas rings
    its own nodes (Polish finished, Ask waiting) and the card sits at Ask; the answer resumes
    the run to its end."""
    s = _serve(tmp_path, browser, REVIEWED)
    page = s.page
    try:
        _show_app(s)
        page.click("#run-toggle")
        page.fill("#run-field-draft", "v1")
        page.click("#run-start")
        ask = page.locator("#run-ask")
        expect(ask).to_contain_text("approve v1!?", timeout=10_000)
        expect(ask).to_contain_text("Asks in Review \u203a Ask")
        _near(page, "Review")
        review = page.locator('.trace-ring[data-node="Review"]')
        expect(review).to_have_class("trace-ring suspended", timeout=10_000)
        expect(page.locator('.trace-ring[data-node="Polish"]')).to_have_count(0)
        before = s.paints()
        s.box("Review").locator(".subgraph-open").click()
        s.wait_paint_after(before)
        expect(page.locator('.trace-ring[data-node="Polish"]')).to_have_class("trace-ring ok")
        expect(page.locator('.trace-ring[data-node="Ask"]')).to_have_class("trace-ring suspended")
        _near(page, "Ask")
        s.settle()
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "studio-subgraph-live.png"))
        page.fill("#run-ask-card-answer", "ok")
        page.click("#run-ask-card-answer-ok")
        expect(page.locator("#run-thread .dbg-status")).to_have_text("completed", timeout=10_000)
        expect(ask).to_be_hidden()
        expect(page.locator('.trace-ring[data-node="Ask"]')).to_have_class("trace-ring ok")
        before = s.paints()
        page.click('#crumbs .crumb[data-graph="app"]')
        s.wait_paint_after(before)
        expect(page.locator('.trace-ring[data-node="Publish"]')).to_have_class("trace-ring ok")
    finally:
        _close(s)


def test_an_imported_subgraph_opens_into_the_module_that_defines_it(
    tmp_path: Path, browser: Browser
) -> None:
    """``add(research_app)`` with ``research_app`` imported from research_desk/research.py:
    the box opens into that module's graph (breadcrumb back, its file named); a rename in
    there is written to research_desk/research.py while the opened file stays byte for byte.
    A module that is missing draws an 'opaque' box whose panel says why."""
    shutil.copytree(ROOT / "examples" / "research_desk", tmp_path / "research_desk")
    parent = (ROOT / "examples" / "subgraph_imported.py").read_text(encoding="utf-8")
    parent += "\nfrom research_desk.gone import lost_app\n\nbroken = Graph(Report).add(lost_app)\n"
    s = _serve(tmp_path, browser, parent)
    page = s.page
    defining = tmp_path / "research_desk" / "research.py"
    try:
        before = s.paints()
        page.select_option("#graph-picker", "app")
        s.wait_paint_after(before)
        research = s.box("Research")
        expect(research.locator(".subgraph-open")).to_have_count(1)
        parent_bytes = s.path.read_bytes()
        before = s.paints()
        research.locator(".subgraph-open").click()
        s.wait_paint_after(before)
        expect(page.locator("#crumbs")).to_contain_text("app \u203a research_app")
        expect(page.locator("#crumbs .crumb-file")).to_have_text(" (research_desk/research.py)")
        expect(s.box("Search")).to_be_visible()
        expect(s.box("Write")).to_have_count(0)
        s.settle()
        page.mouse.click(*s.center("Check"))
        page.fill("#rename-input", "Verify")
        before = s.paints()
        page.press("#rename-input", "Enter")
        s.wait_paint_after(before)
        s.settle()
        expect(s.box("Verify")).to_be_visible()
        assert 'research.add(Check, name="Verify")' in defining.read_text(encoding="utf-8")
        assert s.path.read_bytes() == parent_bytes
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "studio-subgraph-imported.png"))
        # back to the parent: its nested child follows the edit; the opaque box says why
        before = s.paints()
        page.click('#crumbs .crumb[data-graph="app"]')
        s.wait_paint_after(before)
        expect(page.locator("#crumbs")).to_be_hidden()
        page.mouse.click(*s.center("Research"))
        expect(page.locator("#open-subgraph")).to_be_visible()
        before = s.paints()
        page.select_option("#graph-picker", "broken")
        s.wait_paint_after(before)
        expect(s.box("lost_app").locator(".subgraph-opaque")).to_have_count(1)
        s.settle()
        page.mouse.click(*s.center("lost_app"))
        expect(page.locator(".subgraph-error")).to_contain_text(
            "cannot find module 'research_desk.gone'"
        )
        expect(page.locator("#open-subgraph")).to_have_count(0)
    finally:
        _close(s)


def test_the_decomposed_agent_loop_opens_as_its_model_and_tools_cycle(
    tmp_path: Path, browser: Browser
) -> None:
    """``add(decompose(agent))``: the box opens, read-only, into the loop's ``model`` and
    ``tools`` nodes with the cycle between them, drawn from the file alone."""
    text = (
        "from tensorsketch import END, START, FakeProvider, Graph\n"
        "from tensorsketch.agents import Agent, AgentState, decompose\n\n"
        'helper = Agent(FakeProvider([]), name="helper")\n'
        'app = Graph(AgentState).add(decompose(helper)).edge(START, "helper").edge("helper", END)\n'
    )
    s = _serve(tmp_path, browser, text)
    page = s.page
    try:
        expect(s.box("helper").locator(".subgraph-open")).to_have_count(1)
        before = s.paints()
        s.box("helper").locator(".subgraph-open").click()
        s.wait_paint_after(before)
        expect(s.box("model")).to_be_visible()
        expect(s.box("tools")).to_be_visible()
        wires = page.evaluate(
            "[...document.querySelectorAll('g.wire')].map(w => "
            "`${w.getAttribute('data-source')}>${w.getAttribute('data-target')}`)"
        )
        assert {"model>tools", "tools>model", "model>model"} <= set(wires), wires
        expect(page.locator("#crumbs")).to_contain_text("read-only")
        assert page.evaluate("document.body.classList.contains('read-only')")
        page.screenshot(path=str(IMAGES / "studio-agent-loop.png"))
        before = s.paints()
        page.click('#crumbs .crumb[data-graph="app"]')
        s.wait_paint_after(before)
        expect(s.box("helper")).to_be_visible()
    finally:
        _close(s)


# -- #41 item 11: drop a node on a wire -------------------------------------------------------


def test_a_fresh_node_dropped_on_a_wire_is_spliced_into_it(studio: Studio) -> None:
    """A node with no wiring dropped on a plain wire goes on that edge (``Tech → Escalate →
    END``, written where the edge was), placed where it was dropped; undo gives the file back.
    A wired node moved over a wire only moves."""
    page = studio.page
    start = studio.text

    def add_node() -> None:
        page.click("#add-node")
        page.fill("#new-name", "Escalate")
        page.fill("#new-inputs", "answer: str")
        page.click("#new-ok")

    before = studio.paints()
    add_node()
    studio.wait_paint_after(before)
    studio.settle()  # the edit's quiet reload too: measured on a still page (it failed in CI)
    created = studio.text
    # a wired node dragged across the wire: a move, nothing rewired
    billing = studio.center("Billing")
    before = studio.paints()
    studio.drag(billing, studio.wire_point("Tech", END))
    studio.wait_paint_after(before)
    assert studio.text == created and "Billing" in studio.sidecar()
    page.keyboard.press("Control+z")  # the move
    page.wait_for_timeout(300)
    # the fresh node: the wire lights up under it, and the drop splices it in
    mouse, target = page.mouse, studio.wire_point("Tech", END)
    begin = studio.center("Escalate")
    mouse.move(*begin)
    mouse.down()
    for i in range(1, 9):
        mouse.move(
            begin[0] + (target[0] - begin[0]) * i / 8, begin[1] + (target[1] - begin[1]) * i / 8
        )
    expect(page.locator('g.wire.splice-target[data-source="Tech"]')).to_have_count(1)
    before = studio.paints()
    mouse.up()
    studio.wait_paint_after(before)
    text = studio.text
    assert '.edge("Tech", "Escalate")\n    .edge("Escalate", END)' in text
    assert '.edge("Tech", END)' not in text
    assert "Escalate" in studio.sidecar()
    same_graph(studio.ir(), edits.splice_node(extract(created), "Escalate", "Tech", END))
    page.mouse.click(5, 790)
    for _ in range(2):
        page.keyboard.press("Control+z")
        page.wait_for_function("!document.body.classList.contains('busy')")
        page.wait_for_timeout(150)
    assert studio.text == start


# -- #41 item 11: open in editor ----------------------------------------------------------------


def test_open_a_node_in_the_editor(
    studio: Studio, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node panel's *open in editor* starts ``$EDITOR`` on the node's class line (the
    server's in-process here, so the environment is the test's); the ``vscode://`` link
    beside it points at the same place."""
    out = tmp_path / "editor-args.txt"
    script = tmp_path / "fake-editor"
    script.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\n"
        f"pathlib.Path({str(out)!r}).write_text('\\n'.join(sys.argv[1:]))\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(script))
    page = studio.page
    line = next(n.line for n in studio.ir().nodes if n.name == "Billing")
    page.mouse.click(*studio.center("Billing"))
    link = page.locator("#editor-link")
    expect(link).to_have_attribute("href", f"vscode://file/{studio.path}:{line}")
    page.click("#open-editor")
    expect(page.locator("#toast")).to_contain_text(f"line {line}")
    deadline = time.monotonic() + 5
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.read_text(encoding="utf-8").splitlines() == [f"+{line}", str(studio.path)]


# -- #41 item 11: multi-select and move -------------------------------------------------------


def test_shift_click_gathers_nodes_that_move_together(studio: Studio) -> None:
    """Shift+click gathers nodes; dragging one moves them all by the same amount (the sidecar
    only), as one step that undo takes back whole."""
    page = studio.page
    text = studio.text
    page.mouse.click(*studio.center("Billing"))
    page.keyboard.down("Shift")
    page.mouse.click(*studio.center("Tech"))
    page.mouse.click(*studio.center("Fallback"))
    page.mouse.click(*studio.center("Classify"))
    page.mouse.click(*studio.center("Classify"))  # a second Shift+click takes it out again
    page.keyboard.up("Shift")
    expect(page.locator("#inspector h3")).to_have_text("3 nodes")
    expect(page.locator("#boxes g.box.selected")).to_have_count(3)
    before = {n: studio.center(n) for n in ("Billing", "Tech", "Fallback", "Classify")}
    boxes = page.evaluate(
        "Object.fromEntries([...window.__studio.state.scene.boxes].map(([k, b]) => [k, [b.x, b.y]]))"
    )
    tech = before["Tech"]
    paints = studio.paints()
    studio.drag(tech, (tech[0] + 40, tech[1] + 110))
    studio.wait_paint_after(paints)
    side = studio.sidecar()
    assert set(side) == {"Billing", "Tech", "Fallback"}
    deltas = {(round(side[n]["x"] - boxes[n][0]), round(side[n]["y"] - boxes[n][1])) for n in side}
    assert len(deltas) == 1 and deltas != {(0, 0)}, deltas
    assert studio.center("Classify") == pytest.approx(before["Classify"], abs=0.5)
    assert studio.text == text
    page.mouse.click(5, 790)
    expect(page.locator("#boxes g.box.selected")).to_have_count(0)
    paints = studio.paints()
    page.keyboard.press("Control+z")
    studio.wait_paint_after(paints)
    assert studio.sidecar() == {}, "undo unpins all three (none was pinned before)"
    for name in ("Billing", "Tech", "Fallback"):
        assert studio.center(name) == pytest.approx(before[name], abs=0.5)


# -- #41 item 11: the palette -------------------------------------------------------------------


def test_the_palette_places_a_class_of_the_file(studio: Studio) -> None:
    """*+ node* lists the file's node classes under a search; picking one places a node of
    that class (named after it, numbered while taken), unwired, with its ports; undo gives
    the file back."""
    page = studio.page
    start = studio.text
    page.click("#add-node")
    items = page.locator("#palette-list .palette-item")
    expect(items).to_have_count(4)  # Classify, Billing, Tech, Fallback (Support is the state)
    page.fill("#palette-search", "tec")
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("Tech")
    before = studio.paints()
    page.press("#palette-search", "Enter")
    studio.wait_paint_after(before)
    expect(page.locator("#node-dialog")).to_be_hidden()
    expect(studio.box("Tech2")).to_be_visible()
    assert '.add(Tech, name="Tech2")' in studio.text
    assert "class Tech2" not in studio.text
    placed = next(n for n in studio.ir().nodes if n.name == "Tech2")
    assert placed.cls == "Tech" and placed.inputs == [Port("query", "str")]
    assert "Tech2" in studio.sidecar()  # where the user was looking
    bodies_untouched(studio.text)
    page.mouse.click(5, 790)
    page.keyboard.press("Control+z")
    page.wait_for_function("!document.body.classList.contains('busy')")
    page.wait_for_timeout(200)
    assert studio.text == start


# -- #41 item 12: collapse a group of nodes ---------------------------------------------------


def test_a_group_of_nodes_collapses_into_one_box_and_expands(studio: Studio) -> None:
    """Gathered nodes (Shift+click) collapse into one box — the wires into and out of the group
    end on it — and its *expand* tag shows them again. Only the picture changes."""
    page = studio.page
    text = studio.text
    page.mouse.click(*studio.center("Billing"))
    page.keyboard.down("Shift")
    page.mouse.click(*studio.center("Tech"))
    page.mouse.click(*studio.center("Fallback"))
    page.keyboard.up("Shift")
    before = studio.paints()
    page.click("#collapse-group")
    studio.wait_paint_after(before)
    group = page.locator('#boxes g.box.group[data-id="group:Billing+Tech+Fallback"]')
    expect(group).to_have_count(1)
    expect(group).to_contain_text("3 nodes")
    for name in ("Billing", "Tech", "Fallback"):
        expect(studio.box(name)).to_have_count(0)
    # Classify's three routes end on the group; the group's three edges to END leave it
    routes = page.locator('g.wire[data-source="Classify"]')
    expect(routes).to_have_count(3)
    ends = page.locator('g.wire[data-target="__end__"]')
    expect(ends).to_have_count(3)
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / "studio-collapsed-group.png"))
    assert studio.text == text and studio.sidecar() == {}
    before = studio.paints()
    group.locator(".group-expand").click()
    studio.wait_paint_after(before)
    expect(group).to_have_count(0)
    for name in ("Billing", "Tech", "Fallback"):
        expect(studio.box(name)).to_be_visible()
    assert studio.text == text
