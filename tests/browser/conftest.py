"""Browser tests: headless Debian Chromium driven by Playwright against the real service (the
uvicorn ``server`` and Celery ``worker`` fixtures of the integration tests, on Postgres and Redis).

Screenshots go to ``test-output/screenshots/`` (kept as CI artifacts).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.real_service import REPO

KEY_STORAGE = "cuset.apiKey"  # where the dashboard keeps the key (api/static/js/api.js)
CHROMIUM = os.environ.get("CUSET_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = REPO / "test-output" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_collection_modifyitems(config, items):
    missing = shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists()
    for item in items:
        if "/browser/" not in str(item.fspath):
            continue
        item.add_marker(pytest.mark.browser)
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"no Chromium at {CHROMIUM} (apt install chromium)"))


@pytest.fixture(scope="session")
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Page:
    """A browser tab on the service: ``open(path)``, ``shot(name)``, and the JavaScript errors seen."""

    def __init__(self, tab, base: str):
        self.tab, self.base = tab, base
        self.errors: list[str] = []
        tab.on("pageerror", lambda error: self.errors.append(str(error)))
        tab.on("response", lambda r: r.status >= 400 and self.errors.append(f"{r.status} {r.url}"))
        tab.on("dialog", lambda dialog: dialog.accept())  # confirm() of the cancel button
        # The service often runs where nothing else can be reached: every page works from it alone.
        tab.on("request", lambda r: self._same_host(r.url) or self.errors.append(f"request to another host: {r.url}"))

    def _same_host(self, url: str) -> bool:
        return url.startswith((self.base, "data:", "blob:", "about:"))

    def open(self, path: str):
        self.tab.goto(self.base + path)
        return self.tab

    def shot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.tab.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture()
def page(browser, server, api_key) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    # The dashboard sends the key saved in localStorage, as a user would have typed it.
    # Seeded once per tab (a page that changes the key keeps its change across navigations).
    context.add_init_script(
        f"if (!sessionStorage.getItem('cuset.test.seeded')) {{ sessionStorage.setItem('cuset.test.seeded', '1');"
        f" localStorage.setItem({KEY_STORAGE!r}, {api_key!r}); }}"
    )
    context.set_default_timeout(30_000)
    yield Page(context.new_page(), server)
    context.close()


@pytest.fixture(scope="session")
def api(server, auth_headers) -> Iterator[httpx.Client]:
    """An HTTP client on the same server the browser uses (for setting up data)."""
    with httpx.Client(base_url=server, timeout=60, headers=auth_headers) as client:
        yield client
