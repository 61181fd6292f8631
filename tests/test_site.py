"""Browser tests of the built site: the explorers work with no kernel and no network.

The built site (``_build/html``, made by ``make book``) is served on
127.0.0.1 from a thread; headless Chromium (Debian's ``chromium``) opens each
explorer page with every request that is not to the loopback address sent to
a dead proxy, moves every slider with the keyboard, and checks that the
numbers shown are the ones the Python closed forms (``chainmark.calibrate``)
and the detector (``chainmark.detect``) give. It records every request the
page makes and asserts that none left localhost, and saves a screenshot of
each explorer to ``_build/screenshots/``.

Chromium is driven through the Chrome DevTools Protocol over a pipe
(``--remote-debugging-pipe``), so no driver binary and no Python package
beyond the standard library are needed.
"""
from __future__ import annotations

import base64
import fcntl
import functools
import http.server
import json
import math
import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
import urllib.parse
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
EXPLORER_PAGES = ["book/10_explorers.html"]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}

pytestmark = pytest.mark.slow


def _chromium() -> str | None:
    # Debian's /usr/bin/chromium is a shell wrapper; the real binary keeps our fds 3 and 4
    if os.access("/usr/lib/chromium/chromium", os.X_OK):
        return "/usr/lib/chromium/chromium"
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


# --------------------------------------------------------------------------- a small CDP client


class CDPError(RuntimeError):
    pass


class Browser:
    """Headless Chromium driven over the DevTools pipe (fd 3 in, fd 4 out)."""

    def __init__(self, binary: str, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="cm-chromium-")
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()

        def wire() -> None:  # in the child: our pipe ends become fds 3 and 4
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 100)
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 100)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [
            binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
            "--disable-default-apps", "--disable-domain-reliability", "--no-default-browser-check",
            "--metrics-recording-only", "--disable-features=Translate,OptimizationHints,MediaRouter",
            "--hide-scrollbars", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
            # every request that is not to the loopback address goes to a dead proxy and fails
            "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>;127.0.0.1;localhost",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
            "about:blank",
        ]
        # Chromium's log goes to a file: a pipe nobody reads would fill up and stall the browser
        self.log = open(os.path.join(self.profile, "chromium.log"), "wb")
        self.proc = subprocess.Popen(args, preexec_fn=wire, pass_fds=(3, 4), stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        self.requests: list[str] = []  # every URL any page asked for
        self.session: str | None = None
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
            self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                     browser=True)["sessionId"]
            for domain in ("Page", "Network", "Runtime"):
                self.call(f"{domain}.enable")
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        except Exception:
            self.close()
            raise

    # -- transport
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError("timed out waiting for Chromium")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    self.log.flush()
                    err = Path(self.log.name).read_text(errors="replace")
                    raise CDPError(f"Chromium closed the DevTools pipe: {err[-2000:]}")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg = json.loads(raw)
        if msg.get("method") == "Network.requestWillBeSent":
            self.requests.append(msg["params"]["request"]["url"])
        return msg

    def call(self, method: str, params: dict | None = None, browser: bool = False) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if reply.get("method") in self.WANTED:
                self.events.append(reply)

    def wait_for(self, method: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        for i, ev in enumerate(self.events):
            if ev["method"] == method:
                return self.events.pop(i)
        while True:
            ev = self._read_message(deadline)
            if ev.get("method") == method:
                return ev
            if ev.get("method") in self.WANTED:
                self.events.append(ev)

    WANTED = ("Page.loadEventFired",)

    # -- page helpers
    def open(self, url: str, lands_on: str | None = None) -> None:
        """Navigate and return once the page at `lands_on` (default: `url`) has fully loaded.

        A load event alone is not enough: a page that redirects (the site's index.html does,
        by a meta refresh) fires one for itself and then navigates again, and a script run
        in between dies with the old document or waits on it forever.
        """
        self.events.clear()
        self.call("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")
        want = lands_on or url
        deadline = time.monotonic() + self.timeout
        state = None
        while time.monotonic() < deadline:
            try:
                state = self.call("Runtime.evaluate", {"expression": "[location.href, document.readyState]",
                                                       "returnByValue": True})["result"].get("value")
            except CDPError as err:  # the document went away under us: a navigation is under way
                if "navigated" not in str(err) and "context" not in str(err).lower():
                    raise
                state = None
            if state == [want, "complete"]:
                return
            time.sleep(0.1)
        raise CDPError(f"{url} did not settle on {want} (last seen: {state})")

    def js(self, expression: str):
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True})
        if "exceptionDetails" in res:
            raise CDPError(f"JavaScript error: {res['exceptionDetails']}")
        return res["result"].get("value")

    def key(self, key: str, code: int) -> None:
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key,
                                                 "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code})

    def screenshot(self, path: Path, selector: str | None = None) -> None:
        """PNG of the viewport, or of one element: the viewport is made tall enough to hold it
        and scrolled to it, so the capture never has to resize the page (which moves the layout)."""
        params: dict = {"format": "png"}
        if selector:
            q = json.dumps(selector)
            height = self.js(f"document.querySelector({q}).getBoundingClientRect().height")
            self.call("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": max(1000, int(height) + 60),
                                                             "deviceScaleFactor": 1, "mobile": False})
            self.js(f"document.querySelector({q}).scrollIntoView({{block: 'start'}})")
            time.sleep(0.3)
            box = self.js(f"(() => {{ const r = document.querySelector({q}).getBoundingClientRect();"
                          "return {x: r.left + window.scrollX, y: r.top + window.scrollY,"
                          " width: r.width, height: r.height}; })()")
            params["clip"] = {**box, "scale": 1}
        data = self.call("Page.captureScreenshot", params)["data"]
        if selector:
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close", browser=True)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


# --------------------------------------------------------------------------- fixtures


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest's output clean
        pass


@pytest.fixture(scope="module")
def site_url():
    if not (SITE / "index.html").exists():
        pytest.skip(f"no built site at {SITE}: run `make book` first (make test does)")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(SITE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    binary = _chromium()
    if binary is None:
        pytest.skip("Chromium is not installed: `apt-get install -y chromium` (make test does)")
    b = Browser(binary)
    yield b
    b.close()


def _non_local(urls: list[str]) -> list[str]:
    bad = []
    for url in urls:
        parsed = urlparse(url)
        if parsed.scheme in ("data", "blob", "about"):
            continue
        if parsed.hostname not in LOCAL_HOSTS:
            bad.append(url)
    return bad


def _explorer(browser: Browser, kind: str) -> str:
    sel = f".cm-explorer[data-kind='{kind}']"
    assert browser.js(f"document.querySelectorAll({json.dumps(sel)}).length") >= 1, f"no {kind} explorer on the page"
    assert browser.js(f"document.querySelector({json.dumps(sel)}).getAttribute('data-mounted')") == "1", \
        f"the {kind} explorer did not start (its script did not run)"
    return sel


def _values(browser: Browser, sel: str) -> dict[str, float]:
    return browser.js(f"""(() => {{ const out = {{}};
        document.querySelector({json.dumps(sel)}).querySelectorAll('[data-field][data-value]')
          .forEach(e => out[e.getAttribute('data-field')] = parseFloat(e.getAttribute('data-value')));
        return out; }})()""")


def _texts(browser: Browser, sel: str) -> dict[str, str]:
    return browser.js(f"""(() => {{ const out = {{}};
        document.querySelector({json.dumps(sel)}).querySelectorAll('[data-field][data-value]')
          .forEach(e => out[e.getAttribute('data-field')] = e.textContent);
        return out; }})()""")


def _params(browser: Browser, sel: str) -> list[str]:
    return browser.js(f"""Array.from(document.querySelector({json.dumps(sel)})
        .querySelectorAll('input[type=range]')).map(e => e.getAttribute('data-param'))""")


def _slider_value(browser: Browser, sel: str, param: str):
    return browser.js(f"""(() => {{ const e = document.querySelector({json.dumps(sel)})
        .querySelector("input[data-param='{param}']");
        return {{index: parseInt(e.value), max: parseInt(e.max)}}; }})()""")


def _move(browser: Browser, sel: str, param: str, steps: int) -> None:
    """Focus a slider and press the arrow keys, as a reader would."""
    browser.js(f"""document.querySelector({json.dumps(sel)})
        .querySelector("input[data-param='{param}']").focus()""")
    for _ in range(abs(steps)):
        if steps > 0:
            browser.key("ArrowRight", 39)
        else:
            browser.key("ArrowLeft", 37)


def _data(browser: Browser, sel: str) -> dict:
    return json.loads(browser.js(f"document.querySelector({json.dumps(sel)})"
                                 ".querySelector('script.cm-data').textContent"))


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


# --------------------------------------------------------------------------- tests


def _redirect_target(page: str) -> str | None:
    """Where a page's meta refresh sends the browser, relative to the site root (None: no refresh)."""
    head = (SITE / page).read_text(encoding="utf-8", errors="replace")[:4000]
    m = re.search(r"""<meta[^>]+http-equiv=["']refresh["'][^>]+content=["'][^"';]*;\s*url=([^"']+)["']""",
                  head, re.IGNORECASE)
    return urllib.parse.urljoin(page, m.group(1).strip()) if m else None


def _open(browser: Browser, site_url: str, page: str, settle_s: float = 30.0) -> None:
    if not (SITE / page).exists():
        pytest.fail(f"{page} is missing from the built site")
    target = _redirect_target(page)
    if target is not None and not (SITE / urllib.parse.urlsplit(target).path).exists():
        pytest.fail(f"{page} redirects to {target}, which is missing from the built site")
    browser.open(site_url + page, lands_on=site_url + target if target else None)
    # wait until MathJax has typeset and fonts are in: both move the layout (and start requests);
    # the wait is bounded in the page, so a page that never settles fails by name
    settled = browser.js(
        "(async () => { const work = (async () => {"
        " if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }"
        " await document.fonts.ready; return 'settled'; })();"
        f" const late = new Promise(r => setTimeout(() => r('timed out'), {int(settle_s * 1000)}));"
        " return await Promise.race([work, late]); })()")
    if settled != "settled":
        pytest.fail(f"{page}: MathJax or the fonts did not settle within {settle_s:.0f} s")
    time.sleep(0.3)


def test_calibration_explorer(browser: Browser, site_url: str) -> None:
    from chainmark import calibrate as cal

    _open(browser, site_url, EXPLORER_PAGES[0])
    sel = _explorer(browser, "calibration")
    data = _data(browser, sel)

    def check() -> dict:
        idx = {p: _slider_value(browser, sel, p)["index"] for p in ("alpha", "n", "rho", "k")}
        a, n, r, k = data["alphas"][idx["alpha"]], data["ns"][idx["n"]], data["rhos"][idx["rho"]], data["ks"][idx["k"]]
        shown = _values(browser, sel)
        S = cal.s_star(n, r, a, k)
        assert int(shown["s_star"]) == S, (a, n, r, k)
        assert _close(shown["z_alpha"], cal.z_alpha(a), 1e-12)
        assert _close(shown["predicted_z"], cal.predicted_z(n, r, S, k))
        assert _close(shown["midpoint_threshold"], cal.midpoint_threshold(r, S, k))
        assert _close(shown["fpr_bound"], cal.hoeffding_fpr_bound(n, r, S, k), 1e-9)
        assert _texts(browser, sel)["s_star"] == str(S)
        return shown

    before = check()
    browser.screenshot(SHOTS / "calibration_start.png", sel)
    for param in _params(browser, sel):
        state = _slider_value(browser, sel, param)
        steps = 2 if state["index"] + 2 <= state["max"] else -2
        old = _values(browser, sel)
        _move(browser, sel, param, steps)
        assert _slider_value(browser, sel, param)["index"] == state["index"] + steps
        new = check()
        assert new != old, f"moving {param} changed nothing"
    assert check() != before
    browser.screenshot(SHOTS / "calibration_moved.png", sel)


def test_embedding_explorer(browser: Browser, site_url: str) -> None:
    from chainmark.calibrate import predicted_z
    from chainmark.detect import detect
    from chainmark.keys import book_key

    _open(browser, site_url, EXPLORER_PAGES[0])
    sel = _explorer(browser, "embedding")
    data = _data(browser, sel)
    key = book_key()

    def check() -> dict:
        S = data["S_values"][_slider_value(browser, sel, "S")["index"]]
        rho = data["rho_values"][_slider_value(browser, sel, "rho")["index"]]
        cell = next(c for c in data["cells"] if c["S"] == S and c["rho"] == rho)
        ex = cell["example"]
        shown = _values(browser, sel)
        det = detect(ex["token_ids"], key, S)  # the detector re-scores the shown text
        assert _close(shown["z"], det.z, 1e-9) and _close(shown["phi"], det.phi, 1e-9), (S, rho)
        assert _close(shown["p_value"], det.p_value, 1e-6)
        assert int(shown["n_tokens"]) == det.n_tokens
        assert _close(shown["self_ppl"], ex["self_ppl"])
        if ex["rho_realised"] > 0 and det.n_tokens >= 2:
            assert _close(shown["predicted_z"], predicted_z(det.n_tokens, ex["rho_realised"], S, 1))
        n_tok = browser.js(f"document.querySelector({json.dumps(sel)}).querySelectorAll('.cm-tokens .cm-tok').length")
        assert n_tok == len(ex["tokens"])
        return shown

    first = check()
    browser.screenshot(SHOTS / "embedding_start.png", sel)
    for param in _params(browser, sel):
        state = _slider_value(browser, sel, param)
        steps = 1 if state["index"] + 1 <= state["max"] else -1
        old = _values(browser, sel)
        _move(browser, sel, param, steps)
        new = check()
        assert new != old, f"moving {param} changed nothing"
    assert check() != first
    browser.screenshot(SHOTS / "embedding_moved.png", sel)


def test_robustness_explorer(browser: Browser, site_url: str) -> None:
    _open(browser, site_url, EXPLORER_PAGES[0])
    sel = _explorer(browser, "robustness")
    data = _data(browser, sel)

    def check() -> dict:
        i = _slider_value(browser, sel, "delta")["index"]
        d = data["deltas"][i]
        shown = _values(browser, sel)
        assert _close(shown["law"], (1 - d) ** 2)
        assert _close(shown["delta_star"], 1 - 1 / math.sqrt(2))
        assert _close(shown["mc_ratio"], data["mc"]["ratio"][i]) and _close(shown["text_ratio"], data["text"]["ratio"][i])
        assert _close(shown["mc_tpr"], data["mc"]["tpr"][i]) and _close(shown["text_tpr"], data["text"]["tpr"][i])
        return shown

    first = check()
    browser.screenshot(SHOTS / "robustness_start.png", sel)
    state = _slider_value(browser, sel, "delta")
    steps = 3 if state["index"] + 3 <= state["max"] else -3
    _move(browser, sel, "delta", steps)
    moved = check()
    assert moved["law"] != first["law"]
    browser.screenshot(SHOTS / "robustness_moved.png", sel)


def test_no_request_left_localhost(browser: Browser, site_url: str) -> None:
    """Every page of the site loads with nothing but localhost; explorer pages included."""
    pages = sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
                   if not p.name.startswith(("genindex", "search")))
    assert pages
    browser.requests = []
    for page in pages:
        _open(browser, site_url, page)
    assert browser.requests, "the browser recorded no request at all"
    assert not _non_local(browser.requests), f"requests left localhost: {_non_local(browser.requests)}"


def test_math_renders_offline(browser: Browser, site_url: str) -> None:
    """MathJax is served by the site itself and typesets the explorer page's formulas."""
    _open(browser, site_url, EXPLORER_PAGES[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if browser.js("document.querySelectorAll('mjx-container').length") > 0:
            break
        time.sleep(0.5)
    assert browser.js("document.querySelectorAll('mjx-container').length") > 0, "MathJax typeset nothing"
    assert browser.js("Array.from(document.scripts).some(s => /mathjax/.test(s.src) && s.src.startsWith(location.origin))")


def test_javascript_closed_forms_equal_python(browser: Browser, tmp_path_factory) -> None:
    """The explorer script's closed forms against chainmark.calibrate on a grid (no built site needed)."""
    import itertools

    from chainmark import calibrate as cal
    from chainmark.widgets import calibration_explorer

    folder = tmp_path_factory.mktemp("explorer")
    (folder / "calibration.html").write_text(calibration_explorer().page(), encoding="utf-8")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        browser.open(f"http://127.0.0.1:{server.server_address[1]}/calibration.html")
        alphas = [1e-12, 1e-9, 1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.2, 0.4999, 0.5, 0.7]
        js_z = browser.js(f"{json.dumps(alphas)}.map(a => ChainMarkExplorers.forms.zAlpha(a))")
        for a, z in zip(alphas, js_z):
            assert _close(z, cal.z_alpha(a), 1e-12) or abs(z - cal.z_alpha(a)) < 1e-12, a
        combos = [(n, r, a, k) for n, r, a, k in itertools.product(
            (2, 3, 10, 64, 100, 257, 1000, 10000), (0.05, 0.1, 0.3, 0.5, 0.9, 1.0),
            (1e-6, 1e-3, 0.01, 0.1), (1, 2, 3, 7))]
        js = browser.js(f"""{json.dumps(combos)}.map(([n, r, a, k]) => {{
            const f = ChainMarkExplorers.forms, S = f.sStar(n, r, a, k);
            return [S, f.predictedZ(n, r, S, k), f.midpointThreshold(r, S, k), f.hoeffdingFprBound(n, r, S, k),
                    f.predictedZ(n, r, S + 3, k), f.hoeffdingFprBound(n, r, S + 3, k)]; }})""")
        for (n, r, a, k), (S, z, mid, fpr, z3, fpr3) in zip(combos, js):
            assert S == cal.s_star(n, r, a, k), (n, r, a, k)
            assert _close(z, cal.predicted_z(n, r, S, k)) and _close(z3, cal.predicted_z(n, r, S + 3, k))
            assert _close(mid, cal.midpoint_threshold(r, S, k))
            assert _close(fpr, cal.hoeffding_fpr_bound(n, r, S, k)) and _close(fpr3, cal.hoeffding_fpr_bound(n, r, S + 3, k))
        deltas = [0.0, 0.05, 0.29, 0.5, 1.0]
        assert browser.js(f"{json.dumps(deltas)}.map(d => ChainMarkExplorers.forms.zRatio(d))") == \
            pytest.approx([(1 - d) ** 2 for d in deltas], rel=1e-15)
        assert _close(browser.js("ChainMarkExplorers.forms.deltaStar()"), 1 - 1 / math.sqrt(2))
    finally:
        server.shutdown()
        server.server_close()


def test_the_request_guard_records_and_blocks(browser: Browser, tmp_path_factory) -> None:
    """The checks above are not vacuous: a page that asks another host is recorded and gets nothing.

    The remote names end in '.invalid' (reserved, never resolvable), and the browser sends every
    non-loopback request to a dead local proxy, so nothing leaves this machine.
    """
    folder = tmp_path_factory.mktemp("guard")
    (folder / "remote.html").write_text(
        "<!DOCTYPE html><html><body><img id='i' src='https://cdn.example.invalid/x.png'>"
        "<script src='https://cdn.example.invalid/lib.js'></script></body></html>", encoding="utf-8")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        browser.requests = []
        browser.open(f"http://127.0.0.1:{server.server_address[1]}/remote.html")
        time.sleep(0.5)
        assert browser.js("document.getElementById('i').naturalWidth") == 0
        bad = _non_local(browser.requests)
        assert "https://cdn.example.invalid/x.png" in bad and "https://cdn.example.invalid/lib.js" in bad
    finally:
        browser.requests = []
        server.shutdown()
        server.server_close()


def test_index_redirects_to_first_chapter(browser: Browser, site_url: str) -> None:
    """The site root sends readers to the introduction, and opening it repeatedly never wedges the browser."""
    target = _redirect_target("index.html")
    assert target == "book/intro.html"
    for _ in range(5):  # the redirect used to race the next navigation and hang a script for good
        _open(browser, site_url, "index.html")
        assert browser.js("location.pathname").endswith("/book/intro.html")
        _open(browser, site_url, "book/teaching.html")
        assert browser.js("document.title")


def test_site_opens_on_the_intro_and_shows_the_first_generation(browser: Browser, site_url: str) -> None:
    """What a reader sees first: the intro from the site root, and chapter 0's generated text,
    rendered from the output the build produced on the embedded model."""
    _open(browser, site_url, "index.html")
    assert "Article 50" in browser.js("document.body.innerText"), "the site root does not show the intro"
    _open(browser, site_url, "book/00_first_run.html")
    outputs = browser.js(
        "Array.from(document.querySelectorAll('div.cell')).filter(c => "
        "(c.querySelector('.cell_input') || {innerText: ''}).innerText.includes('model.generate('))"
        ".map(c => (c.querySelector('.cell_output') || {innerText: ''}).innerText)")
    assert outputs, "chapter 0 has no generation cell"
    generated, _, stats = outputs[0].rpartition("[")
    assert re.search(r"\d+ tokens in [\d.]+ s", stats), f"no generation statistics in {outputs[0]!r}"
    words = re.findall(r"[A-Za-z]{3,}", generated)
    assert len(words) >= 20, f"the first generation shows little text: {generated!r}"


def test_math_in_computed_outputs_is_typeset_not_shown_raw() -> None:
    """Sentences computed in code cells (display(Markdown(...))) carry $...$ math; the site must turn
    it into MathJax spans as it does for Markdown cells (nb_render_markdown_format: myst), never
    show the dollar signs and backslashes to the reader."""
    from bs4 import BeautifulSoup

    pages = sorted((SITE / "book").glob("*.html"))
    if not pages:
        pytest.skip(f"no built site at {SITE}: run `make book` first (make test does)")
    typeset, raw, outputs = 0, [], 0
    for page in pages:
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        outputs += len(soup.select("div.cell_output"))
        for out in soup.select("div.cell_output"):
            for tag in out(["script", "style"]):
                tag.decompose()
            typeset += len(out.select("span.math, div.math"))
            raw += [f"{page.name}: {m}" for m in
                    re.findall(r"\$[^$\n]{0,40}\\[A-Za-z]+[^$\n]{0,40}\$", out.get_text())]
    assert not raw, f"raw LaTeX in computed outputs: {raw[:5]}"
    assert outputs > 0, "no page has a computed output: the check would prove nothing"


def test_glued_numbers_reach_the_prose() -> None:
    """Numbers glued in code ({glue:text}`name` in a Markdown cell) are printed inside the sentence;
    a missing or misspelt name would leave the role's raw text (or nothing) on the page."""
    from bs4 import BeautifulSoup

    pages = sorted((SITE / "book").glob("*.html"))
    if not pages:
        pytest.skip(f"no built site at {SITE}: run `make book` first (make test does)")
    pasted, raw = 0, []
    for page in pages:
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        pasted += len(soup.select("span.pasted-text"))
        raw += [f"{page.name}: {m}" for m in re.findall(r"\{glue(?::\w+)?\}`[^`]*`", soup.get_text())]
    assert not raw, f"unresolved glue roles: {raw[:5]}"
    assert pasted > 0, "no page shows a glued number: the check would prove nothing"


def test_no_page_overflows_at_1280_px(browser: Browser, site_url: str) -> None:
    """At a 1280-px window no page scrolls sideways: long outputs and code wrap, wide tables
    scroll inside their own box (_static/chainmark.css)."""
    pages = sorted((SITE / "book").glob("*.html"))
    assert pages, "no chapter pages in the built site"
    wide = []
    for page in pages:
        _open(browser, site_url, f"book/{page.name}")
        got = browser.js(
            "(() => { const a = document.querySelector('article') || document.querySelector('main');"
            " const doc = document.documentElement;"
            " let worst = ''; let most = a.clientWidth;"
            " a.querySelectorAll('*').forEach(e => { const r = e.getBoundingClientRect();"
            "   const right = r.right - a.getBoundingClientRect().left;"
            "   if (right > most + 1 && e.offsetParent !== null) { most = right;"
            "     worst = e.tagName.toLowerCase() + (e.className && e.className.baseVal === undefined ?"
            "       '.' + String(e.className).split(' ').join('.') : ''); } });"
            " return {article: a.scrollWidth, room: a.clientWidth, page: doc.scrollWidth,"
            "         window: window.innerWidth, worst: worst}; })()")
        if got["article"] > got["room"] + 1 or got["page"] > got["window"] + 1:
            wide.append(f"{page.name}: article {got['article']} px in {got['room']} px, page {got['page']} px "
                        f"in {got['window']} px (widest: {got['worst']})")
    assert not wide, "pages that scroll sideways at 1280 px:\n" + "\n".join(wide)
