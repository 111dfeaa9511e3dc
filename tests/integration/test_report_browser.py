"""The restart report opened in a real headless Chromium (Debian's package, driven by Playwright
pointed at that executable): every host's timeline renders, and the page logs no errors."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from test_report import render

CHROMIUM = "/usr/bin/chromium"
# Chromium as root in a closed network: no sandbox, and none of its background connections.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def browser_tools() -> None:
    """Install what the test needs when missing: the test setup does it, not the operator."""
    if not os.path.exists(CHROMIUM):
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    try:
        import playwright  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "playwright==1.65.2"], check=True)


def test_report_renders_in_headless_chromium(tmp_path, browser_tools) -> None:
    from playwright.sync_api import sync_playwright

    paths = render(tmp_path)
    errors = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto("file://" + paths["html"])
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
        finally:
            browser.close()
    assert errors == []
