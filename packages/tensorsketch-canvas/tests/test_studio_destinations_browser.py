"""The Studio draws a subgraph's ``add(child, destinations=(...))`` as the node's ``goto`` wires
and edits the tuple from the inspector, in real Chromium (``examples/escalation.py``: the
``Team`` subgraph hands the run back to ``Manager``).

Skipped, with the reason, when ``/usr/bin/chromium`` or Playwright for Python is missing. The
screenshot goes to ``docs/images/studio-destinations.png`` with ``TS_STUDIO_SCREENSHOTS=1``.
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

SOURCE = (ROOT / "examples" / "escalation.py").read_text(encoding="utf-8")
DECLARED = 'desk = Graph(Desk).add(team.compile(), destinations=("Manager",)).add(Manager)\n'


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with test_browser.chromium() as chromium:
        yield chromium


@pytest.fixture
def page(tmp_path: Path, browser: Browser) -> Iterator[tuple[Page, Path]]:
    path = tmp_path / "escalation.py"
    path.write_text(SOURCE, encoding="utf-8")
    server = StudioServer(path, port=0, project=tmp_path, graph="desk").start()
    context = browser.new_context(viewport={"width": 1400, "height": 760})
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


def _targets(page: Page) -> list[str]:
    return sorted(page.eval_on_selector_all("g.goto-wire", "els => els.map(e => e.dataset.target)"))


def _tick(page: Page, name: str, on: bool) -> None:
    before = int(page.evaluate("window.__studio.paints"))
    box = page.locator(f'#destinations input[data-destination="{name}"]')
    box.check() if on else box.uncheck()
    page.wait_for_function(
        f"window.__studio.paints > {before} && !document.body.classList.contains('busy')"
    )


def test_the_team_node_hands_back_and_its_destinations_are_edited(
    page: tuple[Page, Path],
) -> None:
    p, path = page
    assert DECLARED in SOURCE
    assert sorted(p.eval_on_selector_all("#boxes g.box", "els => els.map(e => e.dataset.id)")) == [
        "Manager",
        "Team",
        "__end__",
        "__start__",
    ]
    assert _targets(p) == ["Manager"]  # the goto wire Team -> Manager
    p.locator('#boxes g.box[data-id="Team"] > g').first.click()
    p.locator("#destinations").wait_for()
    assert p.locator('#destinations input[data-destination="Manager"]').is_checked()
    assert not p.locator('#destinations input[data-destination="__end__"]').is_checked()

    _tick(p, "__end__", True)
    text = path.read_text(encoding="utf-8")
    assert 'add(team.compile(), destinations=("Manager", END))' in text
    wider = DECLARED.replace('("Manager",)', '("Manager", END)')
    assert text == SOURCE.replace(DECLARED, wider)  # only the tuple changed
    p.wait_for_function("document.querySelectorAll('g.goto-wire').length === 2")
    IMAGES.mkdir(parents=True, exist_ok=True)
    p.screenshot(path=str(IMAGES / "studio-destinations.png"))

    _tick(p, "Manager", False)
    assert "destinations=(END,)" in path.read_text(encoding="utf-8")
    assert extract(path.read_text(encoding="utf-8"), "desk").node("Team").destinations == [
        "__end__"
    ]
    _tick(p, "__end__", False)  # none left: the argument goes
    text = path.read_text(encoding="utf-8")
    assert "desk = Graph(Desk).add(team.compile()).add(Manager)\n" in text
    assert _targets(p) == []
    _tick(p, "Manager", True)  # and back, byte for byte
    assert path.read_text(encoding="utf-8") == SOURCE
