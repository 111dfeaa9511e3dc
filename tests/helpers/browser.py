"""A real headless Chromium (Debian's package) driven by Playwright, for tests that open a page
the collection wrote: installed when missing, one page per `opened()`, console and page errors
collected."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Any, Iterator, List, Tuple

CHROMIUM = "/usr/bin/chromium"
# Chromium as root in a closed network: no sandbox, and none of its background connections.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def ensure_tools() -> None:
    """Install what the tests need when missing: the test setup does it, not the operator."""
    if not os.path.exists(CHROMIUM):
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    try:
        import playwright  # noqa: F401  # pylint: disable=unused-import,import-outside-toplevel
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "playwright==1.65.2"], check=True)


@contextlib.contextmanager
def opened(path: str, height: int = 900) -> Iterator[Tuple[Any, List[str]]]:
    """(the page showing the local file `path`, the console and page errors seen so far)."""
    from playwright.sync_api import sync_playwright  # pylint: disable=import-outside-toplevel

    errors: List[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": height})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto("file://" + path)
            yield page, errors
        finally:
            browser.close()
