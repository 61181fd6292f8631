"""Secret keys: generate one, derive per-deployment keys from a master (HKDF), name a key by its fingerprint.

Keys are bytes and are never printed. Per-deployment keys are derived from a master key with HKDF (RFC 5869,
HMAC-SHA-256, standard library ``hmac``). A key is identified in logs and records only by its fingerprint, a
truncated hash that cannot be reversed. Key files, the environment and the book's published teaching key are
:mod:`chainmark.auditor.keyfiles`.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

from .partition import Key, key_bytes

__all__ = ["derive_key", "generate_key", "hkdf", "hkdf_expand", "key_fingerprint", "weak_key_reason"]

_KEY_LENGTH = 32
_HASH_LENGTH = 32  # SHA-256 output size in bytes


def key_fingerprint(key: Key) -> str:
    """A short, non-reversible identifier of a key (safe to print and store).

    >>> cm.key_fingerprint(bytes(32))
    'f8bde42f7ce29760'
    """
    return hashlib.sha256(b"chainmark-fingerprint-v1\x00" + key_bytes(key)).hexdigest()[:16]


def _check_bytes(value: object, name: str, allow_empty: bool = True) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    value = bytes(value)
    if not allow_empty and not value:
        raise ValueError(f"{name} must be non-empty bytes")
    return value


def _hkdf_extract(salt: bytes, ikm: bytes) -> bytes:
    """HKDF-Extract (RFC 5869, section 2.2): PRK = HMAC-SHA-256(salt, IKM).

    An empty salt stands for 32 zero bytes, as the RFC specifies.
    """
    salt = _check_bytes(salt, "salt")
    ikm = _check_bytes(ikm, "master", allow_empty=False)
    return hmac.new(salt or b"\x00" * _HASH_LENGTH, ikm, hashlib.sha256).digest()


def hkdf_expand(prk: bytes, info: bytes, length: int = _KEY_LENGTH) -> bytes:
    """HKDF-Expand (RFC 5869, section 2.3): ``length`` bytes of T(1) | T(2) | ...

    T(i) = HMAC-SHA-256(PRK, T(i-1) | info | i); at most 255 blocks.
    """
    prk = _check_bytes(prk, "prk")
    if len(prk) < _HASH_LENGTH:
        raise ValueError(f"prk must be at least {_HASH_LENGTH} bytes (a SHA-256 output), got {len(prk)}")
    info = _check_bytes(info, "info")
    if isinstance(length, bool) or not isinstance(length, int):
        raise TypeError(f"length must be an integer in [1, {255 * _HASH_LENGTH}], got {type(length).__name__}")
    if not 1 <= length <= 255 * _HASH_LENGTH:
        raise ValueError(f"length must lie in [1, {255 * _HASH_LENGTH}], got {length}")
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def hkdf(master: bytes, info: bytes, length: int = _KEY_LENGTH, salt: bytes = b"") -> bytes:
    """HKDF-SHA-256 (RFC 5869): extract with ``salt``, expand with ``info``.

    Built on the standard library's ``hmac``; checked against the RFC's test
    vectors (cases 1-3) in ``tests/test_keys.py``.
    """
    master = _check_bytes(master, "master", allow_empty=False)
    return hkdf_expand(_hkdf_extract(salt, master), info, length)


def derive_key(master: Key, context: str, length: int = _KEY_LENGTH) -> bytes:
    """Per-deployment key for ``context`` (e.g. 'acme-chat/2026-Q3') from a master key.

    Different contexts give independent-looking keys; a leaked deployment
    key reveals neither the master nor its sibling keys (HKDF is one-way).

    >>> master = bytes(32)  # a deployment's master key (never a constant in real use)
    >>> a = cm.derive_key(master, 'acme-chat/2026-Q3')
    >>> b = cm.derive_key(master, 'acme-chat/2026-Q4')
    >>> len(a), a == cm.derive_key(master, 'acme-chat/2026-Q3'), a == b
    (32, True, False)
    """
    if not isinstance(context, str):
        raise TypeError(f"context must be a non-empty string, got {type(context).__name__}")
    if not context:
        raise ValueError("context must be a non-empty string")
    master_bytes = key_bytes(master)
    if not master_bytes:
        raise ValueError("master must be a non-empty key")
    return hkdf(master_bytes, b"chainmark/v1/" + context.encode("utf-8"), length)


def generate_key() -> bytes:
    """A fresh random key from the operating system's CSPRNG.

    >>> key = cm.generate_key()
    >>> len(key), key != cm.generate_key()
    (32, True)
    """
    return secrets.token_bytes(_KEY_LENGTH)


def weak_key_reason(key: bytes) -> str | None:
    """Why a key is weak, or None: too few distinct byte values, or printable text (a password).

    A key from ``keygen`` is 32 random bytes: about 30 distinct values, and the chance that all 32 are
    printable ASCII is about 1e-14. A key made of a repeated byte or of typed text has a fraction of
    the entropy its length suggests, and anyone who guesses it can forge or scrub the watermark.
    """
    key = bytes(key)
    distinct = len(set(key))
    if distinct < 8:
        return f"it uses only {distinct} distinct byte value{'s' if distinct != 1 else ''}"
    if all(32 <= b < 127 for b in key):
        return "it is printable text (a password or a phrase), not random bytes"
    return None
