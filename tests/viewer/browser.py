"""The viewer in a real browser: Debian's chromium, headless, driven by Playwright for Python.

`.ci/run` installs chromium when it is missing and sets INFLIGHT_BROWSER_REQUIRED=1, so there the
tests cannot quietly skip; on a developer's machine without it they are skipped. Playwright's own
browser downloads are never used: `executable_path` points at the system's chromium (or at
INFLIGHT_CHROMIUM). The `browser` fixture is in this folder's conftest.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page


def chromium_executable() -> str:
    found = os.environ.get("INFLIGHT_CHROMIUM") or shutil.which("chromium")
    if found is None:
        if os.environ.get("INFLIGHT_BROWSER_REQUIRED") == "1":
            raise RuntimeError("chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed")
    return found


@dataclass
class Viewer:
    """A page on the viewer, recording every request it makes and every error it logs."""

    page: Page
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def elsewhere(self, origin: str) -> list[str]:
        return [url for url in self.requests if not url.startswith(origin + "/")]


def open_viewer(browser: Browser, proxy_url: str, *, width: int = 1280, height: int = 900, path: str = "") -> Viewer:
    page = browser.new_page(viewport={"width": width, "height": height})
    viewer = Viewer(page)
    page.on("request", lambda request: viewer.requests.append(request.url))
    page.on("console", viewer.console)
    page.on("pageerror", lambda error: viewer.errors.append(str(error)))
    page.goto(proxy_url.removesuffix("/v1") + "/inflight/ui" + path)
    return viewer


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
