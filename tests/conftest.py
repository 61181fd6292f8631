"""Shared fixtures: the repository root and, for slow tests, the embedded model."""
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
