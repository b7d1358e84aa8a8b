"""The Studio draws a file's agents and their handoffs, in real Chromium, and writes handoff
edits back: a drag from one agent onto another adds a ``handoffs=`` entry, the cross on an arrow
removes it, and the file comes back byte for byte.

Skipped, with the reason, when ``/usr/bin/chromium`` or Playwright for Python is missing. The
screenshot goes to ``docs/images/studio-handoffs.png`` with ``TS_STUDIO_SCREENSHOTS=1``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.canvas.handoffs import extract_handoffs
from tensorsketch.testing import browser as test_browser

ROOT = Path(__file__).resolve().parents[3]
IMAGES = test_browser.screenshot_folder(ROOT / "docs" / "images")

test_browser.skip_module_unless_chromium("the Studio browser tests")
test_browser.skip_module_unless_built(
    ROOT / "packages/tensorsketch-canvas/src/tensorsketch/canvas/studio/static/index.html",
    "nox -s studio-build",
)

from playwright.sync_api import Browser  # noqa: E402

from tensorsketch.canvas.studio.server import StudioServer  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _studio_helper() -> Any:
    """The page helper of test_studio_browser.py (``settle()``, ``drag()``, paint counts)."""
    spec = importlib.util.spec_from_file_location(
        "studio_browser_helpers", Path(__file__).with_name("test_studio_browser.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Studio


Studio = _studio_helper()

TEAM = """\
from tensorsketch import Agent, FakeProvider, create_agent, handoff
from tensorsketch.agents import without_tools

billing = Agent(FakeProvider(), name="billing", system="You handle billing.")
refunds = Agent(FakeProvider(), name="refunds", handoffs=["triage"])
triage = create_agent(
    FakeProvider(),
    name="triage",
    handoffs=[handoff(billing, input_filter=without_tools)],
)
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with test_browser.chromium() as chromium:
        yield chromium


@pytest.fixture
def studio(tmp_path: Path, browser: Browser) -> Iterator[Any]:
    path = tmp_path / "team.py"
    path.write_text(TEAM, encoding="utf-8")
    server = StudioServer(path, port=0, project=tmp_path).start()
    context = browser.new_context(viewport={"width": 1400, "height": 800})
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


def agent_center(s: Any, name: str) -> tuple[float, float]:
    box = s.page.locator(f'#boxes g.agent[data-agent="{name}"] rect').bounding_box()
    assert box is not None, f"agent {name} is not drawn"
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def arrows(s: Studio) -> list[tuple[str, str]]:
    return [
        (str(a), str(b))
        for a, b in s.page.evaluate(
            """() => [...document.querySelectorAll('#wires g.wire.handoff')]
                .map(g => [g.dataset.source, g.dataset.target])"""
        )
    ]


def test_handoffs_are_drawn_added_by_a_drag_and_removed_by_their_cross(studio: Any) -> None:
    page = studio.page
    studio.settle()
    assert sorted(arrows(studio)) == [("refunds", "triage"), ("triage", "billing")]
    assert page.locator("#empty").is_hidden()
    labels = page.locator("#labels .handoff-label text").all_text_contents()
    assert any("without_tools" in text for text in labels)
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / "studio-handoffs.png"))

    before = studio.paints()
    studio.drag(agent_center(studio, "billing"), agent_center(studio, "refunds"))
    studio.wait_paint_after(before)
    studio.settle()
    assert ("billing", "refunds") in sorted(arrows(studio))
    assert 'system="You handle billing.", handoffs=["refunds"])' in studio.text  # built below
    assert sorted((e.source, e.target) for e in extract_handoffs(studio.text).handoffs) == [
        ("billing", "refunds"),
        ("refunds", "triage"),
        ("triage", "billing"),
    ]
    page.screenshot(path=str(IMAGES / "studio-handoffs-added.png"))

    before = studio.paints()
    index = arrows(studio).index(("billing", "refunds"))
    page.locator(f'#labels .handoff-remove[data-index="{index}"]').click()
    studio.wait_paint_after(before)
    studio.settle()
    assert ("billing", "refunds") not in arrows(studio)
    assert studio.text == TEAM
