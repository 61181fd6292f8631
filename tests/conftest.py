"""Shared fixtures: the repository root and, for slow tests, the embedded model and a browser."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def model_and_tokenizer():
    from chainmark.models import load_model

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
