"""The built site never contains the secret key the book was built with.

The book's key comes from ``chainmark.auditor.keyfiles.book_key()`` (the environment or
a per-machine key file), the same call the chapters make while the site is
built. Every file of ``_build/html`` and of the executed notebooks in
``_build/jupyter_execute`` is searched, as bytes, for the key in every
encoding a careless page could use: the raw bytes, hexadecimal (lower and
upper case), base64 (standard and URL-safe, with and without padding) and a
Python ``bytes`` literal.
"""
from __future__ import annotations

import base64
from pathlib import Path

import pytest

from chainmark.auditor.keyfiles import book_key

ROOT = Path(__file__).resolve().parents[1]
BUILT = [ROOT / "_build" / "html", ROOT / "_build" / "jupyter_execute"]


def encodings(key: bytes) -> dict[str, bytes]:
    """The ways a key could end up written into a file."""
    forms = {
        "raw bytes": key,
        "hex": key.hex().encode(),
        "HEX": key.hex().upper().encode(),
        "base64": base64.b64encode(key),
        "base64 (no padding)": base64.b64encode(key).rstrip(b"="),
        "urlsafe base64": base64.urlsafe_b64encode(key).rstrip(b"="),
        "bytes literal": repr(key).encode(),
    }
    return {name: value for name, value in forms.items() if len(value) >= 16}


def leaks(root: Path, key: bytes) -> list[str]:
    found = []
    needles = encodings(key)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.relative_to(root)}: {name}" for name, needle in needles.items() if needle in data]
    return found


def test_the_search_finds_a_planted_key(tmp_path):
    """The check is not vacuous: a key written in any of the encodings is found."""
    key = bytes(range(7, 39))
    for i, (name, needle) in enumerate(encodings(key).items()):
        (tmp_path / f"page{i}.html").write_bytes(b"<p>before " + needle + b" after</p>")
    found = set(leaks(tmp_path, key))
    for i, name in enumerate(encodings(key)):
        assert f"page{i}.html: {name}" in found, name
    assert leaks(tmp_path, bytes(range(40, 72))) == []


@pytest.mark.built
@pytest.mark.slow
@pytest.mark.parametrize("root", BUILT, ids=lambda p: p.name)
def test_built_site_holds_no_key(root):
    if not (root.exists() and any(root.rglob("*"))):
        pytest.skip(f"{root} is missing: build the book first (make test does)")
    key = book_key()
    assert len(key) >= 16
    found = leaks(root, key)
    assert not found, f"the book key appears in the build: {found}"
