"""Browser tests: Python Playwright driving Debian's Chromium against a real server on
loopback. `playwright install` cannot download here: the Makefile installs the `chromium`
package when `/usr/bin/chromium` is missing, and `CHROMIUM_PATH` names another binary. When
either part is missing the tests fail (never skip) with one line saying what."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

OUTPUT = Path(__file__).resolve().parent / ".output"
# Every screen at a phone's and a desktop's size (docs/playground.md names the folder).
SCREENS = OUTPUT / "screens"
SCREEN_SIZES = ((390, 844), (1280, 800))
# Waits for what should happen (a page load, a streamed turn on a busy 2-core machine).
WAIT_MS = 30_000


def chromium_path() -> str:
    return os.environ.get("CHROMIUM_PATH") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Python playwright is missing: `make` installs requirements-dev.txt")
    binary = chromium_path()
    if not os.access(binary, os.X_OK):
        pytest.fail(
            f"no Chromium at {binary}: `make test` installs Debian's chromium "
            "(apt-get install chromium), or set CHROMIUM_PATH"
        )
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=binary,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        yield launched
        launched.close()


@dataclass
class Session:
    """One browser tab on the server at `origin`: what it logged and what it tried to reach
    outside the origin (blocked), and where its screenshots go."""

    page: Any
    origin: str
    shots: Path
    console_errors: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)

    def open(self) -> None:
        """The playground, once its script has asked the server for its config."""
        from playwright.sync_api import expect

        with self.page.expect_response(re.compile(r"/playground/config$"), timeout=WAIT_MS):
            self.page.goto(f"{self.origin}/", timeout=WAIT_MS)
        expect(self.page.locator("#signin")).to_be_visible(timeout=WAIT_MS)

    def dev_sign_in(self, name: str = "allievo", *, admin: bool = False) -> None:
        from playwright.sync_api import expect

        page = self.page
        page.fill("#dev-name", name)
        if admin:
            page.check("#dev-admin")
        page.click("#dev-signin")
        expect(page.locator("#app")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#toolbar input")).not_to_have_count(0, timeout=WAIT_MS)
        # Signed in once the chapters (welcome picker, progress) and the panels have loaded.
        expect(page.locator("#chapter-picker button")).not_to_have_count(0, timeout=WAIT_MS)
        expect(page.locator("#progress .chapter")).not_to_have_count(0, timeout=WAIT_MS)

    def open_settings(self) -> None:
        from playwright.sync_api import expect

        self.page.click("#nav-settings")
        expect(self.page.locator("#settings")).to_be_visible()

    def ask(self, query: str) -> Any:
        """Type `query`, send it with Enter; the new turn's element. Waits until the page
        takes a message: after a turn's `done` it still refreshes its panels, and a message
        sent meanwhile stays in the box (a user sees "Invia" disabled)."""
        from playwright.sync_api import expect

        page = self.page
        expect(page.locator("#send")).to_be_enabled()
        before = page.locator("#turns > li").count()
        page.fill("#query", query)
        page.press("#query", "Enter")
        return page.locator("#turns > li").nth(before)

    def answered(self, turn: Any) -> Any:
        """`turn` once its `done` event has been rendered."""
        from playwright.sync_api import expect

        expect(turn).to_have_class(re.compile(r"\bturn-done\b"))
        return turn

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def screens(self, name: str) -> list[Path]:
        """The screen as it is now at 390x844 and at 1280x800 (`SCREENS/<name>-WxH.png`);
        the viewport is put back afterwards."""
        SCREENS.mkdir(parents=True, exist_ok=True)
        before = self.page.viewport_size
        paths = []
        for width, height in SCREEN_SIZES:
            self.page.set_viewport_size({"width": width, "height": height})
            path = SCREENS / f"{name}-{width}x{height}.png"
            self.page.screenshot(path=str(path))
            paths.append(path)
        self.page.set_viewport_size(before)
        return paths


@pytest.fixture
def session_for(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """`session_for(origin, width=..., phone=...)`: a fresh browser context (no shared storage) on the
    server at `origin`. Requests to any other origin are recorded and aborted."""
    contexts: list[Any] = []

    def open_session(
        origin: str, *, width: int = 1280, height: int = 900, phone: float | None = None
    ) -> Session:
        """`phone`: a phone's device scale (2 or 3) with touch and mobile emulation (the
        viewport meta tag applies, as on a phone)."""
        extra = (
            {"is_mobile": True, "has_touch": True, "device_scale_factor": phone} if phone else {}
        )
        context = browser.new_context(viewport={"width": width, "height": height}, **extra)
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        page = context.new_page()
        shots = OUTPUT / request.node.name
        shots.mkdir(parents=True, exist_ok=True)
        session = Session(page, origin, shots)

        def guard(route: Any) -> None:
            if route.request.url.startswith(f"{origin}/"):
                route.continue_()
            else:
                session.outside.append(route.request.url)
                route.abort()

        context.route("**/*", guard)
        page.on("console", lambda m: m.type == "error" and session.console_errors.append(m.text))
        page.on("pageerror", lambda e: session.console_errors.append(str(e)))
        return session

    yield open_session
    for context in contexts:
        context.close()
