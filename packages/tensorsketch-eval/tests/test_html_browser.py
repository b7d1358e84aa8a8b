"""The HTML report in headless Chromium (Debian's /usr/bin/chromium through Playwright, as the
Studio tests do): it renders its charts, fetches nothing, and expands transcripts.

With TS_EVAL_SCREENSHOTS=1 the screenshot goes to docs/images/eval-report.png (the picture in
docs/evaluation.md); otherwise to a temporary folder.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorsketch.eval import evaluate, render_html
from tensorsketch.eval._agents import load_module
from tensorsketch.testing.browser import chromium, skip_module_unless_chromium

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "evaluation.py"
IMAGES = (
    ROOT / "docs" / "images"
    if os.environ.get("TS_EVAL_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "tensorsketch-eval-screenshots"
)

skip_module_unless_chromium("the HTML report's browser test")
if not EXAMPLE.exists():
    pytest.skip("examples/evaluation.py is not in this tree", allow_module_level=True)

from playwright.sync_api import Page  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

CHARTS = ("graders", "cases", "latency", "cost", "steps")


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    example = load_module(EXAMPLE)
    report = asyncio.run(
        evaluate(example.make_agent(wrong_every=2), example.capitals_suite(), concurrency=4)
    )
    path = tmp_path_factory.mktemp("html") / "eval-report.html"
    path.write_text(render_html(report), encoding="utf-8")
    return path


@pytest.fixture
def page() -> Iterator[Page]:
    with chromium() as browser:
        yield browser.new_page(viewport={"width": 1280, "height": 900})


def test_the_report_renders_its_charts_offline(report_file: Path, page: Page) -> None:
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(report_file.as_uri())
    assert requests == [report_file.as_uri()], "the report fetched something besides itself"
    for chart in CHARTS:
        svg = page.locator(f'svg[data-chart="{chart}"]')
        box = svg.bounding_box()
        assert box is not None and box["width"] > 200 and box["height"] > 100, chart
        bars = svg.locator("rect.bar")
        assert bars.count() > 0, f"the {chart} chart drew no bars"
        widths = [bars.nth(i).bounding_box() for i in range(bars.count())]
        assert all(b is not None and b["width"] > 0 and b["height"] > 0 for b in widths), chart
    # the grader chart: one bar per grader, the failing grader's bar shorter than a passing one
    graders = page.locator('svg[data-chart="graders"] rect.bar')
    lengths = sorted(graders.nth(i).bounding_box()["width"] for i in range(graders.count()))  # type: ignore[index]
    assert lengths[0] < lengths[-1]
    assert page.locator(".card .v").first.inner_text() == "90.0%"
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / "eval-report.png"), full_page=True)


def test_transcripts_expand_with_the_failing_graders_reason(report_file: Path, page: Page) -> None:
    page.goto(report_file.as_uri())
    failing = page.locator("details.trial.fail[open]").first
    assert failing.locator("tr.bad").first.inner_text().count("Nairobi") >= 1
    assert failing.locator(".msg.tool").first.is_visible()
    assert "atlas" in failing.locator(".msg .call").first.inner_text()
    closed = page.locator("details.case").last  # a passing case: collapsed at first
    assert closed.get_attribute("open") is None
    trial = closed.locator("details.trial").first
    assert not trial.locator(".transcript").is_visible()
    closed.locator("summary").first.click()
    trial.locator("summary").click()
    assert trial.locator(".transcript").is_visible()
    assert trial.locator(".msg.user").first.inner_text().startswith("USER")
