"""Key handling: HKDF against RFC 5869, key files, fingerprints, and no leaks."""
from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from chainmark.auditor.keyfiles import (_KEY_ENV, KEY_FILE_ENV, book_key, key_file_is_private, load_key, read_key_file,
                                write_key_file)
from chainmark.keys import _hkdf_extract, derive_key, generate_key, hkdf, hkdf_expand, key_fingerprint

ROOT = Path(__file__).resolve().parents[1]

# RFC 5869, Appendix A, test cases 1-3 (HMAC-SHA-256).
RFC5869 = [
    dict(  # case 1: basic
        ikm=bytes([0x0B] * 22),
        salt=bytes(range(0x00, 0x0D)),
        info=bytes(range(0xF0, 0xFA)),
        length=42,
        prk="077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5",
        okm="3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
            "34007208d5b887185865",
    ),
    dict(  # case 2: longer inputs and outputs
        ikm=bytes(range(0x00, 0x50)),
        salt=bytes(range(0x60, 0xB0)),
        info=bytes(range(0xB0, 0x100)),
        length=82,
        prk="06a6b88c5853361a06104c9ceb35b45cef760014904671014a193f40c15fc244",
        okm="b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c"
            "59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71"
            "cc30c58179ec3e87c14c01d5c1f3434f1d87",
    ),
    dict(  # case 3: zero-length salt and info
        ikm=bytes([0x0B] * 22),
        salt=b"",
        info=b"",
        length=42,
        prk="19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04",
        okm="8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
            "9d201395faa4b61a96c8",
    ),
]


@pytest.mark.parametrize("case", RFC5869, ids=["case1", "case2", "case3"])
def test_hkdf_matches_rfc5869(case):
    prk = _hkdf_extract(case["salt"], case["ikm"])
    assert prk.hex() == case["prk"]
    assert hkdf_expand(prk, case["info"], case["length"]).hex() == case["okm"]
    assert hkdf(case["ikm"], case["info"], case["length"], salt=case["salt"]).hex() == case["okm"]


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(master=b"", info=b""), ValueError, ["master"]),
    (dict(master="text", info=b""), TypeError, ["master", "bytes"]),
    (dict(master=b"k", info="text"), TypeError, ["info", "bytes"]),
    (dict(master=b"k", info=b"", length=0), ValueError, ["length", "[1, 8160]"]),
    (dict(master=b"k", info=b"", length=255 * 32 + 1), ValueError, ["length", "[1, 8160]"]),
    (dict(master=b"k", info=b"", length=2.0), TypeError, ["length"]),
    (dict(master=b"k", info=b"", salt="s"), TypeError, ["salt", "bytes"]),
])
def test_hkdf_rejects_bad_parameters(kwargs, exc, words):
    with pytest.raises(exc) as err:
        hkdf(**kwargs)
    for word in words:
        assert word in str(err.value)


def test_hkdf_expand_length_limits():
    prk = _hkdf_extract(b"", b"ikm")
    assert len(hkdf_expand(prk, b"", 255 * 32)) == 255 * 32
    with pytest.raises(ValueError, match="prk"):
        hkdf_expand(b"short", b"", 32)


def test_derive_key_is_deterministic_and_separates_contexts():
    master = bytes(range(32))
    a1 = derive_key(master, "acme-chat/2026-Q3")
    a2 = derive_key(master, "acme-chat/2026-Q3")
    b = derive_key(master, "acme-chat/2026-Q4")
    assert a1 == a2 and len(a1) == 32
    assert a1 != b
    assert derive_key(master, "x", length=16) == derive_key(master, "x", length=64)[:16]
    assert derive_key("a str master", "ctx") == derive_key(b"a str master", "ctx")
    assert derive_key(master, "ctx") != derive_key(master[::-1], "ctx")


@pytest.mark.parametrize("context, exc", [("", ValueError), (None, TypeError), (b"bytes", TypeError)])
def test_derive_key_rejects_bad_context(context, exc):
    with pytest.raises(exc, match="context"):
        derive_key(b"master", context)


def test_derive_key_rejects_empty_master():
    with pytest.raises(ValueError, match="master"):
        derive_key(b"", "ctx")


def test_generate_key_is_random_32_bytes():
    keys = {generate_key() for _ in range(16)}
    assert len(keys) == 16 and all(len(k) == 32 for k in keys)


def test_fingerprint_is_short_stable_and_not_the_key():
    key = bytes(range(32))
    fp = key_fingerprint(key)
    assert fp == key_fingerprint(key) and len(fp) == 16
    int(fp, 16)  # hexadecimal
    assert fp not in key.hex() and key.hex()[:16] != fp
    assert key_fingerprint(key) != key_fingerprint(key[:-1] + b"\x00")
    assert key_fingerprint("abc") == key_fingerprint(b"abc")


def test_write_key_file_mode_0600_and_no_overwrite(tmp_path):
    path = tmp_path / "sub" / "deploy.key"
    key = write_key_file(path)
    assert len(key) == 32 and path.read_bytes() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert key_file_is_private(path)
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        write_key_file(path)
    assert path.read_bytes() == key  # untouched
    other = write_key_file(path, b"a replacement key, 32 bytes long", overwrite=True)
    assert path.read_bytes() == other == b"a replacement key, 32 bytes long"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_write_key_file_rejects_bad_keys_and_folders(tmp_path):
    with pytest.raises(ValueError, match="non-empty"):
        write_key_file(tmp_path / "a.key", b"")
    with pytest.raises(TypeError, match="key"):
        write_key_file(tmp_path / "b.key", 12345)
    with pytest.raises(IsADirectoryError):
        write_key_file(tmp_path)


def test_key_file_is_private_detects_loose_permissions(tmp_path):
    path = tmp_path / "k.key"
    write_key_file(path)
    os.chmod(path, 0o644)
    assert not key_file_is_private(path)


def test_read_key_file_errors_name_the_path_not_the_content(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist") as err:
        read_key_file(tmp_path / "missing.key")
    assert "keygen" in str(err.value)
    empty = tmp_path / "empty.key"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        read_key_file(empty)
    with pytest.raises(IsADirectoryError, match="folder"):
        read_key_file(tmp_path)


def test_read_key_file_unreadable(tmp_path, monkeypatch):
    path = tmp_path / "locked.key"
    write_key_file(path)

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(PermissionError, match="not readable"):
        read_key_file(path)


def test_load_key_precedence(tmp_path, monkeypatch):
    file_key = write_key_file(tmp_path / "f.key")
    env_key = bytes(range(5, 37))
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.delenv(_KEY_ENV, raising=False)
    with pytest.raises(LookupError, match=_KEY_ENV):
        load_key()
    monkeypatch.setenv(_KEY_ENV, env_key.hex())
    assert load_key() == env_key
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "f.key"))
    assert load_key() == file_key
    explicit = write_key_file(tmp_path / "g.key")
    assert load_key(tmp_path / "g.key") == explicit


def test_load_key_bad_hex_does_not_echo_the_value(monkeypatch):
    secret = "zz" + "ab" * 15
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setenv(_KEY_ENV, secret)
    with pytest.raises(ValueError) as err:
        load_key()
    assert secret not in str(err.value) and "hexadecimal" in str(err.value)


def test_book_key_is_the_public_teaching_key_unless_the_reader_names_one(tmp_path, monkeypatch):
    from chainmark.auditor.keyfiles import _TEACHING_LABEL, book_key_source, teaching_key
    from chainmark.keys import hkdf

    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.delenv(_KEY_ENV, raising=False)
    monkeypatch.setenv("CHAINMARK_CACHE", str(tmp_path))
    key = book_key()
    # derived from the published label, so anyone can re-derive it; nothing written to disk
    assert key == teaching_key() == hkdf(_TEACHING_LABEL.encode(), b"chainmark/v1/teaching-key")
    assert len(key) == 32 and book_key_source() == "teaching" and not list(tmp_path.iterdir())
    assert key_fingerprint(key) == "7bed3cf33e6cb5cb"  # the fingerprint the book's banner shows
    own = bytes(range(40, 72))
    monkeypatch.setenv(_KEY_ENV, own.hex())
    assert book_key() == own and book_key_source() == "environment"
    path = tmp_path / "reader.key"
    write_key_file(path, bytes(range(1, 33)))
    monkeypatch.setenv(KEY_FILE_ENV, str(path))
    assert book_key() == bytes(range(1, 33)) and book_key_source() == "key file"


def test_deployment_paths_never_fall_back_to_the_teaching_key(monkeypatch):
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.delenv(_KEY_ENV, raising=False)
    with pytest.raises(LookupError):
        load_key()


def test_config_repr_and_description_hide_the_key():
    from chainmark.config import ChainMarkConfig

    key = bytes(range(100, 132))
    config = ChainMarkConfig(key, S=5, rho=0.5)
    text = repr(config) + str(config.describe())
    for form in _key_forms(key):
        assert form not in text
    assert config.describe()["key_fingerprint"] == key_fingerprint(key)


def _key_forms(key: bytes) -> list[str]:
    """Ways a key could leak into text: hex (both cases), base64, repr, raw."""
    forms = [key.hex(), key.hex().upper(), base64.b64encode(key).decode(), repr(key)[2:-1]]
    try:
        forms.append(key.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    return [f for f in forms if len(f) >= 8]


@pytest.mark.built
@pytest.mark.slow
def test_book_key_absent_from_built_site_and_records():
    """The rendered site, executed notebooks and run records never hold the book key."""
    site = ROOT / "_build" / "html"
    if not site.is_dir():
        pytest.skip("the site is not built (run `make book` first)")
    key = book_key()
    forms = [f.encode() for f in _key_forms(key)] + [key]
    folders = [site, ROOT / "_build" / "jupyter_execute", ROOT / "_build" / "runs", ROOT / "runs"]
    scanned = 0
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in folder.rglob("*"):
            if not path.is_file() or path.suffix not in {".html", ".ipynb", ".json", ".jsonl", ".txt", ".js", ".md"}:
                continue
            blob = path.read_bytes()
            scanned += 1
            for form in forms:
                assert form not in blob, f"the book key appears in {path.relative_to(ROOT)}"
    assert scanned > 0
