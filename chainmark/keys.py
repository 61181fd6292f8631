"""Key handling: keys are bytes, read from a file or the environment, never printed.

Per-deployment keys are derived from a master key with HKDF (RFC 5869,
HMAC-SHA-256, standard library ``hmac``). A key is identified in logs and
records only by its fingerprint, a truncated hash that cannot be reversed.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from .partition import Key, key_bytes

KEY_ENV = "CHAINMARK_KEY"            # hex-encoded key
KEY_FILE_ENV = "CHAINMARK_KEY_FILE"  # path of a file holding the raw key bytes
KEY_LENGTH = 32


def key_fingerprint(key: Key) -> str:
    """A short, non-reversible identifier of a key (safe to print and store)."""
    return hashlib.sha256(b"chainmark-fingerprint-v1\x00" + key_bytes(key)).hexdigest()[:16]


def hkdf(master: bytes, info: bytes, length: int = KEY_LENGTH, salt: bytes = b"") -> bytes:
    """HKDF-SHA-256 (RFC 5869): extract with ``salt``, expand with ``info``."""
    if not isinstance(master, (bytes, bytearray)) or not master:
        raise TypeError("master must be non-empty bytes")
    if not 1 <= length <= 255 * 32:
        raise ValueError(f"length must lie in [1, {255 * 32}], got {length}")
    prk = hmac.new(salt or b"\x00" * 32, bytes(master), hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + bytes(info) + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def derive_key(master: Key, context: str, length: int = KEY_LENGTH) -> bytes:
    """Per-deployment key for ``context`` (e.g. 'acme-chat/2026-Q3') from a master key."""
    if not isinstance(context, str) or not context:
        raise ValueError("context must be a non-empty string")
    return hkdf(key_bytes(master), b"chainmark/v1/" + context.encode("utf-8"), length)


def generate_key() -> bytes:
    """A fresh random key from the operating system's CSPRNG."""
    return secrets.token_bytes(KEY_LENGTH)


def write_key_file(path: str | os.PathLike, key: bytes | None = None, overwrite: bool = False) -> bytes:
    """Write a key (fresh if not given) to ``path`` with permissions 0600."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; refusing to overwrite a key file")
    key = generate_key() if key is None else key_bytes(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    os.chmod(path, 0o600)
    return key


def read_key_file(path: str | os.PathLike) -> bytes:
    """Read the raw key bytes of a key file; a clear error if missing or empty."""
    path = Path(path)
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"key file {path} does not exist (create one with `chainmark keygen --out {path}`)") from None
    except PermissionError:
        raise PermissionError(f"key file {path} is not readable by this user") from None
    if not key:
        raise ValueError(f"key file {path} is empty")
    return key


def load_key(path: str | os.PathLike | None = None) -> bytes:
    """The key from ``path``, else ``$CHAINMARK_KEY_FILE``, else ``$CHAINMARK_KEY`` (hex)."""
    if path is not None:
        return read_key_file(path)
    if os.environ.get(KEY_FILE_ENV):
        return read_key_file(os.environ[KEY_FILE_ENV])
    if os.environ.get(KEY_ENV):
        try:
            return bytes.fromhex(os.environ[KEY_ENV].strip())
        except ValueError:
            raise ValueError(f"{KEY_ENV} must hold the key as hexadecimal") from None
    raise LookupError(f"no key: pass a key file, or set {KEY_FILE_ENV} or {KEY_ENV}")


def book_key() -> bytes:
    """The key the book's chapters use, never written in a notebook.

    ``$CHAINMARK_KEY_FILE`` or ``$CHAINMARK_KEY`` if set; otherwise a random
    key created once per machine in the cache folder (permissions 0600) and
    reused, so results are stable across builds on one machine while the key
    itself never appears in a page.
    """
    try:
        return load_key()
    except LookupError:
        pass
    from .models import cache_dir

    path = cache_dir() / "book.key"
    if not path.exists():
        try:
            write_key_file(path)
        except FileExistsError:  # created concurrently by another process
            pass
    return read_key_file(path)
