"""The notebook edition in a real JupyterLab, as a workshop participant opens it: no extension, headless Chromium.

A JupyterLab server (the ``jupyterlab`` of the test environment, no extension beyond its own) serves a copy of
the built edition (``_build/edition``) and of the participant edition (``_build/participant``); Chromium opens
every notebook with every request that is not to the loopback address sent to a dead proxy, waits until its
cells are rendered, and reads the text a reader sees (``innerText``: collapsed code and outputs are not
there). Every notebook shows no raw MyST and no ``glue(``/``claim(``/``banner(`` code, and every number the
site pasted into a sentence of the page is on screen, formatted as on the site. The participant notebooks
pass the same checks with their Build its unwritten (their paragraphs carry the build's numbers).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from browser_support import GuardedPage, non_local
from test_notebook_edition import BOOKKEEPING, EDITION, RAW_MYST, SITE, site_pasted_numbers

ROOT = Path(__file__).resolve().parents[1]
PARTICIPANT = ROOT / "_build" / "participant"
TOKEN = "chainmark-edition-test"

pytestmark = [pytest.mark.slow, pytest.mark.built]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over copies of both editions: its base URL. Cells are all rendered at once (no
    windowing), so that the page holds every cell a reader scrolls to."""
    if not any(EDITION.glob("*.ipynb")):
        pytest.skip(f"no notebook edition in {EDITION}: run `make book` first (make test does)")
    pytest.importorskip("jupyterlab")
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(EDITION, root / "edition")
    shutil.copytree(PARTICIPANT, root / "participant", ignore=shutil.ignore_patterns("*.zip"))
    settings = root / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    (root / "settings" / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    (root / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port = _free_port()
    log = open(root / "jupyterlab.log", "w")
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(root / "settings"),
           "JUPYTER_CONFIG_DIR": str(root / "config"), "JUPYTER_RUNTIME_DIR": str(root / "runtime")}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False",
         "--ServerApp.allow_root=True", "--LabApp.news_url=", "--LabApp.extension_manager=readonly"],
        env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)  # a file: a pipe nobody reads fills and stalls it
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
            break
        except OSError:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab did not start: {(root / 'jupyterlab.log').read_text()[-2000:]}")
            time.sleep(0.5)
    else:
        server.kill()
        pytest.fail("JupyterLab did not answer within two minutes")
    try:
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _shutdown_kernels(base: str) -> None:
    """End the session (and its kernel) JupyterLab started for the notebook just read (nothing here runs a cell)."""
    sessions = json.loads(urllib.request.urlopen(f"{base}/api/sessions?token={TOKEN}", timeout=10).read())
    for session in sessions:
        request = urllib.request.Request(f"{base}/api/sessions/{session['id']}?token={TOKEN}", method="DELETE")
        urllib.request.urlopen(request, timeout=30)


SEEN_JS = """(() => {
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  if (!nb) return null;
  const cells = nb.querySelectorAll('.jp-Cell');
  const pending = nb.querySelectorAll('.jp-MarkdownCell:not(.jp-mod-rendered)').length;
  nb.querySelectorAll('details').forEach(d => { d.open = true; });  // a reader opens a solution to read it
  const tab = document.querySelector('.lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel');
  return {cells: cells.length, pending: pending, text: nb.innerText, tab: tab && tab.innerText,
          visibleCode: Array.from(nb.querySelectorAll('.jp-CodeCell .jp-InputArea'))
            .filter(area => area.offsetParent !== null && area.querySelector('.cm-content'))
            .map(area => area.querySelector('.cm-content').innerText),
          hiddenInputs: nb.querySelectorAll('.jp-InputPlaceholder').length};
})()"""


def _open(browser: GuardedPage, base: str, path: str, first: bool) -> None:
    """Open a notebook as a reader does: the first of a folder by its address (JupyterLab starts, its file
    browser in that folder), the others by a double click in the file browser, in the same JupyterLab (a start
    per notebook took three times as long). The previous notebook's tab is closed, its changes discarded
    (JupyterLab marks a notebook changed when it fills in cell ids)."""
    if first:
        browser.page.goto(f"{base}/lab/tree/{path}?token={TOKEN}&reset", wait_until="load")
        return
    page = browser.page
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabCloseIcon").first.click()
    discard = page.locator(".jp-Dialog-button", has_text="Discard")
    if discard.count() or page.locator(".jp-Dialog").count():
        discard.first.click()
    name = path.rsplit("/", 1)[1]
    page.locator(f'.jp-DirListing-item[title*="Name: {name}"]').first.dblclick()


def _read(browser: GuardedPage, base: str, path: str, n_cells: int, first: bool) -> dict:
    """What a reader sees of one notebook in JupyterLab: its text and the code of every visible code cell, once
    every cell and output has rendered (the text no longer changes)."""
    _open(browser, base, path, first)
    name = path.rsplit("/", 1)[1]
    deadline, seen, before = time.monotonic() + 120, None, None
    while time.monotonic() < deadline:
        seen = browser.js(SEEN_JS)
        if seen and seen["tab"] == name and seen["cells"] >= n_cells and seen["pending"] == 0 \
                and seen["text"].strip():
            if before is not None and before == seen["text"]:
                return seen
            before = seen["text"]
        browser.wait(0.4)
    shot = ROOT / "_build" / "screenshots" / f"jupyterlab-{path.replace('/', '-')}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    browser.page.screenshot(path=str(shot))
    raise AssertionError(f"{path}: JupyterLab rendered {seen and seen['cells']} of {n_cells} cells in two minutes "
                         f"(the screen: {shot})")


def _notebooks(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.ipynb"))


@pytest.fixture(scope="module")
def seen(lab, chromium) -> dict[str, dict]:
    """Every edition and participant notebook as JupyterLab shows it, read once."""
    import nbformat

    browser = GuardedPage(chromium)
    out = {}
    try:
        for folder in os.environ.get("EDITION_TEST_FOLDERS", "edition participant").split():
            for i, path in enumerate(_notebooks(EDITION if folder == "edition" else PARTICIPANT)):
                n_cells = len(nbformat.read(path, as_version=4).cells)
                out[f"{folder}/{path.name}"] = _read(browser, lab, f"{folder}/{path.name}", n_cells, first=i == 0)
                _shutdown_kernels(lab)
        out["_requests"] = list(browser.requests)
    finally:
        browser.close()
    return out


def test_every_notebook_of_both_editions_opens_and_nothing_left_localhost(seen):
    names = [name for name in seen if not name.startswith("_")]
    assert len([n for n in names if n.startswith("edition/")]) == len(_notebooks(EDITION)) > 20
    assert len([n for n in names if n.startswith("participant/")]) == len(_notebooks(PARTICIPANT))
    assert not non_local(seen["_requests"]), non_local(seen["_requests"])[:5]


def test_no_raw_myst_and_no_bookkeeping_code_is_on_screen(seen):
    for name, page in seen.items():
        if name.startswith("_"):
            continue
        for raw in RAW_MYST:
            at = page["text"].find(raw)
            assert at < 0, (name, raw, page["text"][max(0, at - 200):at + 200])
        for code in page["visibleCode"]:
            assert not any(word in code for word in BOOKKEEPING), (name, code[:300])


def test_every_number_the_site_pasted_into_a_sentence_is_on_screen(seen):
    """In the edition, every number; a participant copy leaves the solutions out, and with them their numbers,
    so there each paragraph is checked to show the build's numbers rather than a value still to compute."""
    for name, page in seen.items():
        if name.startswith("participant/"):
            assert "not computed yet" not in page["text"], name
            continue
        if name.startswith("_"):
            continue
        numbers = site_pasted_numbers(SITE / "book" / name.split("/", 1)[1].replace(".ipynb", ".html"))
        text = " ".join(page["text"].split())
        missing = [n for n in numbers if " ".join(n.split()) not in text]
        assert not missing, (name, missing[:10], len(numbers))
