"""The browser tests' shared preamble: where screenshots go and when a module skips itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.testing import browser


def test_screenshots_go_to_the_docs_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    docs = tmp_path / "docs" / "images"
    monkeypatch.delenv(browser.SCREENSHOTS_ENV, raising=False)
    temporary = browser.screenshot_folder(docs)
    assert temporary != docs and temporary == browser.screenshot_folder()
    monkeypatch.setenv(browser.SCREENSHOTS_ENV, "1")
    assert browser.screenshot_folder(docs) == docs
    # Without a docs folder there is nothing to rewrite: still the temporary one.
    assert browser.screenshot_folder() == temporary


def test_a_module_skips_itself_when_its_bundle_is_not_built(tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    with pytest.raises(
        pytest.skip.Exception, match=r"index\.html is not built here \(npm run build\)"
    ):
        browser.skip_module_unless_built(page, "npm run build")
    page.write_text("<html></html>", encoding="utf-8")
    browser.skip_module_unless_built(page, "npm run build")  # built: no skip
