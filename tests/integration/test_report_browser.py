"""The restart report opened in a real headless Chromium (Debian's package, driven by Playwright
pointed at that executable): every host's timeline renders, and the page logs no errors."""
from __future__ import annotations

import os

import pytest

from helpers import browser
from test_report import render


@pytest.fixture(scope="session")
def browser_tools() -> None:
    browser.ensure_tools()


def test_report_renders_in_headless_chromium(tmp_path, browser_tools) -> None:
    paths = render(tmp_path)
    with browser.opened(paths["html"]) as (page, errors):
        rows = page.locator("#summary tbody tr")
        assert rows.count() == 3
        hosts = [rows.nth(i).get_attribute("data-host") for i in range(3)]
        assert hosts == ["gpu-1", "gpu-2", "gpu-3"]
        # each restarted host's timeline: one visible bar per phase, drawn with real width
        bars = page.locator("section.host").nth(0).locator("svg rect")
        assert bars.count() == 5
        widths = [float(bars.nth(i).bounding_box()["width"]) for i in range(5)]
        assert all(w >= 2 for w in widths) and max(widths) > 100
        assert page.locator("section.host").nth(1).locator("svg rect").count() == 1
        shot = os.environ.get("LLMOPS_REPORT_SCREENSHOT") or str(tmp_path / "report.png")
        page.screenshot(path=shot, full_page=True)
        assert os.path.getsize(shot) > 10000
    assert errors == []
