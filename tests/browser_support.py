"""Helpers shared by the browser tests: a local file server and a guarded Playwright page.

Debian's Chromium is driven by Playwright for Python (no browser download: the
executable path is given). Every request any page makes is recorded, with its
failure if it failed. A request to anything but the loopback address goes to a
dead local proxy and fails, and no host name but localhost resolves, so nothing
leaves this machine.

Blocking is done by the browser's network stack, not by Playwright's router
(``context.route``): routing pauses every request in the driver and turns the
HTTP cache off, which made the tests that open every page of the site about 1.6
times slower, for no check the proxy does not already give.
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import threading
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
LOCAL_SCHEMES = {"file", "data", "blob", "about"}  # never leave the machine
VIEWPORT = {"width": 1280, "height": 1000}
TIMEOUT_MS = 60_000

LAUNCH_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
    "--disable-default-apps", "--disable-domain-reliability", "--no-default-browser-check",
    "--metrics-recording-only", "--hide-scrollbars",
    # no --disable-features: Chromium keeps only the last one given, which would drop Playwright's list
    # (it already disables OptimizationHints and MediaRouter)
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
]
# every request that is not to 127.0.0.1 or localhost goes to this port, where nothing listens
DEAD_PROXY = {"server": "http://127.0.0.1:9", "bypass": "<-loopback>,127.0.0.1,localhost"}
PROXY_FAILURE = "net::ERR_PROXY_CONNECTION_FAILED"


def chromium_path() -> str | None:
    """The system Chromium (Debian's /usr/bin/chromium), or None when none is installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def is_local(url: str) -> bool:
    """True for a URL that stays on this machine (loopback http, file:, data:, blob:, about:)."""
    parsed = urlparse(url)
    return parsed.scheme in LOCAL_SCHEMES or parsed.hostname in LOCAL_HOSTS


def non_local(urls: list[str]) -> list[str]:
    """The URLs in `urls` that would leave this machine."""
    return [url for url in urls if not is_local(url)]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest's output clean
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve `folder` on 127.0.0.1 from a thread; yields the base URL (ending in '/')."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def launch(playwright: Any, executable: str) -> Any:
    """Launch `executable` (a Chromium) headless with the flags above, the dead proxy and a fresh
    temporary profile (Playwright makes one per launch and removes it on close)."""
    return playwright.chromium.launch(executable_path=executable, args=LAUNCH_ARGS, proxy=DEAD_PROXY)


class GuardedPage:
    """One page in a fresh context of a browser from `launch`, with every request recorded
    (`requests`) and every failed one with its error (`failures`)."""

    def __init__(self, browser: Any):
        self.context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
        self.context.set_default_timeout(TIMEOUT_MS)
        self.requests: list[str] = []  # every URL any page asked for
        self.failures: dict[str, str] = {}  # URL -> Chromium's error, for the requests that failed
        self.context.on("request", lambda request: self.requests.append(request.url))
        self.context.on("requestfailed", lambda request: self.failures.__setitem__(request.url, request.failure))
        self.page = self.context.new_page()

    def open(self, url: str, lands_on: str | None = None) -> None:
        """Navigate and return once the page at `lands_on` (default: `url`) has fully loaded.

        A load event alone is not enough: a page that redirects (the site's index.html does,
        by a meta refresh) loads itself and then navigates again, and a script run in between
        dies with the old document.
        """
        want = lands_on or url
        self.page.goto(url, wait_until="commit")
        self.page.wait_for_url(lambda now: now == want, wait_until="load")

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        return self.page.evaluate(expression)

    def js_json(self, expression: str) -> Any:
        """The value of a JavaScript expression, sent back as one JSON string: for large arrays this is
        several times faster than Playwright's value-by-value transfer (no NaN, Infinity or -0)."""
        return json.loads(self.page.evaluate(f"(async () => JSON.stringify(await ({expression})))()"))

    def key(self, name: str) -> None:
        """Press and release one key (a Playwright key name such as 'ArrowRight')."""
        self.page.keyboard.press(name)

    def insert_text(self, text: str) -> None:
        """Insert text at the caret as an input method would (one input event, no key events)."""
        self.page.keyboard.insert_text(text)

    def type_keys(self, text: str) -> None:
        """Type text with real key events, one character at a time."""
        self.page.keyboard.type(text)

    def screenshot(self, path: Path, selector: str) -> None:
        """PNG of the first element matching `selector`: the viewport is made tall enough to hold
        it first, so the capture never has to resize the page (which moves the layout)."""
        element = self.page.locator(selector).first
        height = element.evaluate("e => e.getBoundingClientRect().height")
        self.page.set_viewport_size({"width": VIEWPORT["width"], "height": max(VIEWPORT["height"], int(height) + 60)})
        try:
            element.evaluate("e => e.scrollIntoView({block: 'start'})")
            self.wait(0.3)
            path.parent.mkdir(parents=True, exist_ok=True)
            element.screenshot(path=str(path))
        finally:
            self.page.set_viewport_size(VIEWPORT)

    def wait(self, seconds: float) -> None:
        """Let the page run for a while; unlike time.sleep, the request recorder keeps working."""
        self.page.wait_for_timeout(seconds * 1000)

    def close(self) -> None:
        self.context.close()
