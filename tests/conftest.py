"""Shared fixtures: the repository root and, for slow tests, the embedded model and a browser."""
from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: ``make test`` stamps the end of each phase here (see the Makefile); the last line of the run reads it.
MAKE_CLOCK = ROOT / "_build" / ".make_test_clock"
#: The budget for ``make test`` in a fresh clone on the 2-core reference machine (tools/measure_ci.py).
BUDGET_MINUTES = 35
_SESSION_START = time.time()


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s" if seconds >= 60 else f"{seconds:.0f} s"


def make_test_phases(clock: Path, session_start: float, now: float) -> dict[str, float] | None:
    """Seconds per phase of this ``make test`` (install, book, browser, tests, total), or None when the
    clock is missing or belongs to another run (pytest started on its own, or long after the build)."""
    try:
        stamps = dict(line.split() for line in clock.read_text().split("\n") if line.strip())
        times = {name: float(value) for name, value in stamps.items()}
    except (OSError, ValueError):
        return None
    order = ["start", "install", "book", "browser"]
    if any(name not in times for name in order) or not 0 <= session_start - times["browser"] < 120:
        return None
    phases = {later: times[later] - times[earlier] for earlier, later in zip(order, order[1:])}
    phases.update(tests=now - session_start, total=now - times["start"])
    return {name: round(seconds, 1) for name, seconds in phases.items()}


def pytest_unconfigure(config):
    """The last line of ``make test``: the wall time of its install, build and tests, against the budget."""
    if hasattr(config, "workerinput"):
        return
    now = time.time()
    phases = make_test_phases(MAKE_CLOCK, _SESSION_START, now)
    if phases is None:
        return
    (ROOT / "_build" / "make_test_clock.json").write_text(json.dumps(phases, indent=2) + "\n")
    verdict = "within" if phases["total"] <= BUDGET_MINUTES * 60 else "OVER"
    print(f"make test: install {_minutes(phases['install'])} · book {_minutes(phases['book'])} · "
          f"browser {_minutes(phases['browser'])} · tests {_minutes(phases['tests'])} · "
          f"total {_minutes(phases['total'])} ({verdict} the {BUDGET_MINUTES}-minute budget for a fresh clone)")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def model_and_tokenizer():
    from cmlab.harness.models import load_model

    return load_model()


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium under Playwright, launched once for the session (a fresh temporary
    profile; no browser download). Skips when no Chromium is installed."""
    from browser_support import chromium_path, launch

    binary = chromium_path()
    if binary is None:
        pytest.skip("Chromium is not installed: `apt-get install -y chromium` (make test does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright is not installed: `pip install -c constraints.txt -e '.[test]'` (make install does)")
    with sync_playwright() as playwright:
        browser = launch(playwright, binary)
        yield browser
        browser.close()


# --- another model: tests/foreign_model.py, every chapter executed on it ------------------------------------

@pytest.fixture(scope="session")
def foreign(tmp_path_factory):
    """A small model that is not the embedded one (tests/foreign_model.py), built once per test session."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import foreign_model

    folder = foreign_model.build(tmp_path_factory.mktemp("foreign-model"))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    assert len(tok) != 49_152 and not tok.chat_template
    return folder


@pytest.fixture(scope="session")
def foreign_runs(foreign, tmp_path_factory) -> dict[str, dict]:
    """Every chapter executed on the foreign model, each under a fresh key in its own kernel, two at a time
    (tests/test_foreign_model.py checks them; tests/test_participant_edition.py reads their Build it checks).

    On this tiny model most of a chapter's time is its kernel's start, imports and small computations on one
    core, so two kernels of one CPU thread each finish the set in a little over half the time of one after
    the other (issue 41); each chapter still runs alone in its kernel, as a reader's would."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import claims_robustness

    from chainmark.keyfiles import write_key_file

    work = tmp_path_factory.mktemp("foreign-runs")

    def execute(chapter: str) -> tuple[str, dict]:
        folder = work / Path(chapter).stem
        folder.mkdir()
        key_file = folder / "teaching-or-not.key"
        write_key_file(key_file)
        return chapter, claims_robustness.execute(chapter, key_file, folder / "claims.jsonl", folder / "runs",
                                                  timeout=900, threads=1, keep_notebook=True)

    with pytest.MonkeyPatch.context() as env:  # the kernels take their settings from this environment
        env.setenv("CHAINMARK_MODEL", str(foreign))
        env.setenv("CHAINMARK_SCALE", "smoke")
        with ThreadPoolExecutor(max_workers=2) as pool:
            return dict(pool.map(execute, claims_robustness.toc_chapters()))
