"""A real browser for the pages people look at: Debian's Chromium (scripts/setup.sh installs it), headless,
driven by Playwright without any browser download."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
# This machine has no network beyond loopback: Chromium's own background traffic only fails, slowly.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]  # fmt: skip


@contextmanager
def browser_page(width: int = 1700, height: int = 1000) -> Iterator[Page]:
    """A fresh headless Chromium tab (no saved preferences: the UI a new user sees)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()
