"""Headless Chromium for the browser tests: Debian's ``/usr/bin/chromium`` driven by
Playwright for Python.

The tests never run ``playwright install`` (a download at test time, and a second Chromium to
keep patched): they use the system's. Without it, or without Playwright, a browser test module
skips itself with the reason (:func:`skip_module_unless_chromium`), so a machine without a
browser still runs everything else. Playwright is imported only when a browser is launched,
because it is an optional test dependency of the distributions that have browser tests.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import pytest

#: Debian's Chromium (``apt-get install chromium``).
CHROMIUM: Final = Path("/usr/bin/chromium")
#: No sandbox (tests run as root in containers), no GPU, nothing fetched behind the test's back.
CHROMIUM_ARGS: Final = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
)


def missing_browser() -> str | None:
    """Why a browser test cannot run here, or ``None`` when Chromium and Playwright are there."""
    if not CHROMIUM.exists():
        return f"no {CHROMIUM}: install Debian's Chromium (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return (
            "Playwright for Python is not installed (pip install playwright; the tests use "
            f"{CHROMIUM}, never `playwright install`)"
        )
    return None


#: Set to ``1`` to have browser tests rewrite the documentation's pictures.
SCREENSHOTS_ENV: Final = "TS_STUDIO_SCREENSHOTS"


def screenshot_folder(docs_images: Path | None = None) -> Path:
    """Where a browser test saves a screenshot: ``docs_images`` (the pictures the docs show)
    when :data:`SCREENSHOTS_ENV` is ``1``, else a temporary folder, so a plain test run leaves
    the work tree as it was."""
    if docs_images is not None and os.environ.get(SCREENSHOTS_ENV) == "1":
        return docs_images
    return Path(tempfile.gettempdir()) / "tensorsketch-studio-screenshots"


def skip_module_unless_built(page: Path, build: str) -> None:
    """Skip the calling test module when the front-end bundle whose entry is ``page`` has not
    been built; ``build`` is the command that builds it."""
    if not page.exists():
        pytest.skip(f"{page.name} is not built here ({build})", allow_module_level=True)


def skip_module_unless_chromium(what: str) -> None:
    """Skip the calling test module (call it at module level, before importing Playwright)
    when :func:`missing_browser` names a reason; ``what`` says what is skipped."""
    reason = missing_browser()
    if reason is not None:
        pytest.skip(f"{reason}; skipping {what}", allow_module_level=True)


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless Chromium (a Playwright ``Browser``), closed on exit.

    Playwright's sync API: use it from sync tests and fixtures only (it runs an event loop of
    its own in this thread).
    """
    reason = missing_browser()
    if reason is not None:
        pytest.skip(reason)
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=list(CHROMIUM_ARGS)
        )
        try:
            yield browser
        finally:
            browser.close()
