"""The package's public surface: every exported name resolves, and importing it stays light."""
from __future__ import annotations

import subprocess
import sys

import pytest

import chainmark


@pytest.mark.parametrize("name", chainmark.__all__)
def test_every_exported_name_resolves(name: str) -> None:
    value = getattr(chainmark, name)
    assert getattr(value, "__module__", "chainmark").startswith("chainmark"), (name, value)


def test_unknown_name_is_a_clear_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'not_a_thing'"):
        chainmark.not_a_thing  # noqa: B018


def test_star_import_gives_the_public_names() -> None:
    namespace: dict = {}
    exec("from chainmark import *", namespace)
    assert set(chainmark.__all__) <= set(namespace)


def test_import_and_cli_do_not_load_torch_or_transformers() -> None:
    """An auditor's `chainmark --help` must not wait seconds for the deep-learning stack, nor for scipy.stats,
    which the modules ``chainmark``'s ``__init__`` imports load only in the functions that use it."""
    code = ("import sys, chainmark, chainmark.cli; chainmark.state_of(1, 'k', 5); "
            "print(sorted(m for m in ('torch', 'transformers', 'scipy.stats') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
