"""Browser tests of the built site: the explorers work with no kernel and no network.

The built site (``_build/html``, made by ``make book``) is served on 127.0.0.1
from a thread; headless Chromium (Debian's ``chromium``, driven by Playwright)
opens each explorer page with every request that is not to the loopback
address sent to a dead proxy, moves every slider with the keyboard, and checks
that the numbers shown are the ones the Python closed forms
(``chainmark.calibrate``) and the detector (``chainmark.detection``) give. It
records every request the page makes and asserts that none left localhost, and
saves a screenshot of each explorer to ``_build/screenshots/``.
"""
from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
from pathlib import Path

import pytest

from browser_support import PROXY_FAILURE, GuardedPage, non_local, serve

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
EXPLORER_PAGES = ["book/10_explorers.html"]

pytestmark = [pytest.mark.slow, pytest.mark.built]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def site_url():
    if not (SITE / "index.html").exists():
        pytest.skip(f"no built site at {SITE}: run `make book` first (make test does)")
    with serve(SITE) as url:
        yield url


@pytest.fixture(scope="module")
def browser(chromium):
    page = GuardedPage(chromium)
    yield page
    page.close()


def _explorer(browser: GuardedPage, kind: str) -> str:
    sel = f".cm-explorer[data-kind='{kind}']"
    assert browser.js(f"document.querySelectorAll({json.dumps(sel)}).length") >= 1, f"no {kind} explorer on the page"
    assert browser.js(f"document.querySelector({json.dumps(sel)}).getAttribute('data-mounted')") == "1", \
        f"the {kind} explorer did not start (its script did not run)"
    return sel


def _values(browser: GuardedPage, sel: str) -> dict[str, float]:
    return browser.js(f"""(() => {{ const out = {{}};
        document.querySelector({json.dumps(sel)}).querySelectorAll('[data-field][data-value]')
          .forEach(e => out[e.getAttribute('data-field')] = parseFloat(e.getAttribute('data-value')));
        return out; }})()""")


def _texts(browser: GuardedPage, sel: str) -> dict[str, str]:
    return browser.js(f"""(() => {{ const out = {{}};
        document.querySelector({json.dumps(sel)}).querySelectorAll('[data-field][data-value]')
          .forEach(e => out[e.getAttribute('data-field')] = e.textContent);
        return out; }})()""")


def _params(browser: GuardedPage, sel: str) -> list[str]:
    return browser.js(f"""Array.from(document.querySelector({json.dumps(sel)})
        .querySelectorAll('input[type=range]')).map(e => e.getAttribute('data-param'))""")


def _slider_value(browser: GuardedPage, sel: str, param: str):
    return browser.js(f"""(() => {{ const e = document.querySelector({json.dumps(sel)})
        .querySelector("input[data-param='{param}']");
        return {{index: parseInt(e.value), max: parseInt(e.max)}}; }})()""")


def _move(browser: GuardedPage, sel: str, param: str, steps: int) -> None:
    """Focus a slider and press the arrow keys, as a reader would."""
    browser.js(f"""document.querySelector({json.dumps(sel)})
        .querySelector("input[data-param='{param}']").focus()""")
    for _ in range(abs(steps)):
        if steps > 0:
            browser.key("ArrowRight")
        else:
            browser.key("ArrowLeft")


def _data(browser: GuardedPage, sel: str) -> dict:
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


def _open(browser: GuardedPage, site_url: str, page: str, settle_s: float = 30.0) -> None:
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
    browser.wait(0.3)


def test_calibration_explorer(browser: GuardedPage, site_url: str) -> None:
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


def test_embedding_explorer(browser: GuardedPage, site_url: str) -> None:
    from chainmark.calibrate import predicted_z
    from chainmark.detection import detect
    from chainmark.config import ChainMarkConfig
    from cmlab.harness.reference.protocol import reference_key

    _open(browser, site_url, EXPLORER_PAGES[0])
    sel = _explorer(browser, "embedding")
    data = _data(browser, sel)
    key = reference_key()  # the explorer shows the reference run's grid (cmlab.harness.reference.explorer_grid)

    def check() -> dict:
        S = data["S_values"][_slider_value(browser, sel, "S")["index"]]
        rho = data["rho_values"][_slider_value(browser, sel, "rho")["index"]]
        cell = next(c for c in data["cells"] if c["S"] == S and c["rho"] == rho)
        ex = cell["example"]
        shown = _values(browser, sel)
        det = detect(ex["token_ids"], ChainMarkConfig(key, S=S), test="z")  # the detector re-scores the shown text
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


def test_robustness_explorer(browser: GuardedPage, site_url: str) -> None:
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


@pytest.fixture(scope="module")
def every_page(browser: GuardedPage, site_url: str) -> dict:
    """Every page of the site opened once (explorer pages included): the requests they made, and for each
    chapter page how wide its article and the page are at a 1280-px window. Two tests read this one pass."""
    pages = sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
                   if not p.name.startswith(("genindex", "search")))
    browser.requests = []
    widths = {}
    for page in pages:
        _open(browser, site_url, page)
        if page.startswith("book/"):
            widths[page] = browser.js(
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
    return {"pages": pages, "requests": list(browser.requests), "widths": widths}


def test_no_request_left_localhost(every_page: dict) -> None:
    """Every page of the site loads with nothing but localhost; explorer pages included."""
    assert every_page["pages"]
    assert every_page["requests"], "the browser recorded no request at all"
    assert not non_local(every_page["requests"]), f"requests left localhost: {non_local(every_page['requests'])}"


def test_math_renders_offline(browser: GuardedPage, site_url: str) -> None:
    """MathJax is served by the site itself and typesets the explorer page's formulas."""
    _open(browser, site_url, EXPLORER_PAGES[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if browser.js("document.querySelectorAll('mjx-container').length") > 0:
            break
        browser.wait(0.5)
    assert browser.js("document.querySelectorAll('mjx-container').length") > 0, "MathJax typeset nothing"
    assert browser.js("Array.from(document.scripts).some(s => /mathjax/.test(s.src) && s.src.startsWith(location.origin))")


def test_javascript_closed_forms_equal_python(browser: GuardedPage, tmp_path_factory) -> None:
    """The explorer script's closed forms against chainmark.calibrate on a grid (no built site needed)."""
    import itertools

    from chainmark import calibrate as cal
    from cmlab.teaching.widgets import calibration_explorer

    folder = tmp_path_factory.mktemp("explorer")
    (folder / "calibration.html").write_text(calibration_explorer().page(), encoding="utf-8")
    with serve(folder) as url:
        browser.open(url + "calibration.html")
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


def test_the_request_guard_records_and_blocks(browser: GuardedPage, tmp_path_factory) -> None:
    """The checks above are not vacuous: a page that asks another host is recorded and gets nothing.

    The remote names end in '.invalid' (reserved, never resolvable), and the browser sends every
    non-loopback request (an image, a script, a fetch) to a dead local proxy, so nothing leaves this
    machine; that the proxy, not a failed name lookup, stopped each one shows in its error.
    """
    remote = ["https://cdn.example.invalid/x.png", "https://cdn.example.invalid/lib.js",
              "https://api.example.invalid/data.json"]
    folder = tmp_path_factory.mktemp("guard")
    (folder / "remote.html").write_text(
        f"<!DOCTYPE html><html><body><img id='i' src='{remote[0]}'>"
        f"<script src='{remote[1]}'></script></body></html>", encoding="utf-8")
    with serve(folder) as url:
        try:
            browser.requests, browser.failures = [], {}
            browser.open(url + "remote.html")
            assert browser.js("document.getElementById('i').naturalWidth") == 0
            assert browser.js(f"fetch('{remote[2]}').then(() => 'answered', () => 'refused')") == "refused"
            bad = non_local(browser.requests)
            assert all(u in bad for u in remote), f"not recorded: {set(remote) - set(bad)}"
            assert {u: browser.failures.get(u) for u in remote} == {u: PROXY_FAILURE for u in remote}
            assert url + "remote.html" in browser.requests and not browser.failures.get(url + "remote.html")
        finally:
            browser.requests, browser.failures = [], {}


def test_index_redirects_to_first_chapter(browser: GuardedPage, site_url: str) -> None:
    """The site root sends readers to the introduction, and opening it repeatedly never wedges the browser."""
    target = _redirect_target("index.html")
    assert target == "book/intro.html"
    for _ in range(5):  # the redirect used to race the next navigation and hang a script for good
        _open(browser, site_url, "index.html")
        assert browser.js("location.pathname").endswith("/book/intro.html")
        _open(browser, site_url, "book/teaching.html")
        assert browser.js("document.title")


def test_site_opens_on_the_intro_and_shows_the_first_generation(browser: GuardedPage, site_url: str) -> None:
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


def test_no_page_overflows_at_1280_px(every_page: dict) -> None:
    """At a 1280-px window no page scrolls sideways: long outputs and code wrap, wide tables
    scroll inside their own box (_static/chainmark.css)."""
    assert len(every_page["widths"]) >= 20, "no chapter pages in the built site"
    wide = [f"{page}: article {got['article']} px in {got['room']} px, page {got['page']} px "
            f"in {got['window']} px (widest: {got['worst']})"
            for page, got in every_page["widths"].items()
            if got["article"] > got["room"] + 1 or got["page"] > got["window"] + 1]
    assert not wide, "pages that scroll sideways at 1280 px:\n" + "\n".join(wide)
