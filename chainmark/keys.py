"""Key handling: keys are bytes, read from a file or the environment, never printed.

Per-deployment keys are derived from a master key with HKDF (RFC 5869,
HMAC-SHA-256, standard library ``hmac``). A key is identified in logs and
records only by its fingerprint, a truncated hash that cannot be reversed.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import tempfile
from pathlib import Path

from .limits import MAX_KEY_FILE_BYTES, MIN_KEY_BYTES
from .partition import Key, key_bytes

__all__ = ["HASH_LENGTH", "KEY_ENV", "KEY_FILE_ENV", "KEY_LENGTH", "TEACHING_LABEL", "book_key", "book_key_source", "derive_key", "generate_key", "hkdf", "hkdf_expand",
           "key_file_is_private", "key_fingerprint", "load_key", "read_key_file", "teaching_key", "weak_key_reason",
           "write_key_file"]

KEY_ENV = "CHAINMARK_KEY"            # hex-encoded key
KEY_FILE_ENV = "CHAINMARK_KEY_FILE"  # path of a file holding the raw key bytes
KEY_LENGTH = 32
HASH_LENGTH = 32  # SHA-256 output size in bytes


def key_fingerprint(key: Key) -> str:
    """A short, non-reversible identifier of a key (safe to print and store)."""
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
    return hmac.new(salt or b"\x00" * HASH_LENGTH, ikm, hashlib.sha256).digest()


def hkdf_expand(prk: bytes, info: bytes, length: int = KEY_LENGTH) -> bytes:
    """HKDF-Expand (RFC 5869, section 2.3): ``length`` bytes of T(1) | T(2) | ...

    T(i) = HMAC-SHA-256(PRK, T(i-1) | info | i); at most 255 blocks.
    """
    prk = _check_bytes(prk, "prk")
    if len(prk) < HASH_LENGTH:
        raise ValueError(f"prk must be at least {HASH_LENGTH} bytes (a SHA-256 output), got {len(prk)}")
    info = _check_bytes(info, "info")
    if isinstance(length, bool) or not isinstance(length, int):
        raise TypeError(f"length must be an integer in [1, {255 * HASH_LENGTH}], got {type(length).__name__}")
    if not 1 <= length <= 255 * HASH_LENGTH:
        raise ValueError(f"length must lie in [1, {255 * HASH_LENGTH}], got {length}")
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def hkdf(master: bytes, info: bytes, length: int = KEY_LENGTH, salt: bytes = b"") -> bytes:
    """HKDF-SHA-256 (RFC 5869): extract with ``salt``, expand with ``info``.

    Built on the standard library's ``hmac``; checked against the RFC's test
    vectors (cases 1-3) in ``tests/test_keys.py``.
    """
    master = _check_bytes(master, "master", allow_empty=False)
    return hkdf_expand(_hkdf_extract(salt, master), info, length)


def derive_key(master: Key, context: str, length: int = KEY_LENGTH) -> bytes:
    """Per-deployment key for ``context`` (e.g. 'acme-chat/2026-Q3') from a master key.

    Different contexts give independent-looking keys; a leaked deployment
    key reveals neither the master nor its sibling keys (HKDF is one-way).
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
    """A fresh random key from the operating system's CSPRNG."""
    return secrets.token_bytes(KEY_LENGTH)


_HEX_TEXT = re.compile(rb"\s*[0-9A-Fa-f]+\s*")


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


def _check_key_bytes(key: bytes, source: str) -> bytes:
    """Refuse a key shorter than MIN_KEY_BYTES or one that is hexadecimal text; messages name ``source``, never the key."""
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{source} is {len(key)} bytes long; keys need at least {MIN_KEY_BYTES} bytes "
                         "(create one with `chainmark keygen --out FILE`)")
    if _HEX_TEXT.fullmatch(key):
        raise ValueError(f"{source} is hexadecimal text, not raw key bytes, so it would act as another key: "
                         f"decode it (`xxd -r -p HEXFILE > KEYFILE`) or put the hex in ${KEY_ENV} instead")
    return key


def _make_folder(folder: Path) -> None:
    """Create a missing folder for key files, open to its owner only (whatever the umask)."""
    missing = []
    for part in (folder, *folder.parents):  # every folder this creates, not only the last, is private
        if part.exists() or part.is_symlink():
            break
        missing.append(part)
    try:
        for part in reversed(missing):
            part.mkdir(mode=0o700, exist_ok=True)
            os.chmod(part, 0o700)  # whatever the umask
        if not folder.is_dir():
            raise FileExistsError(folder)
    except FileExistsError:  # the name exists, but not as a folder
        raise NotADirectoryError(f"{folder} is not a folder") from None


def _temporary_key_file(folder: Path, key: bytes) -> Path:
    """Write ``key`` to a new private (0600) temporary file in ``folder`` and flush it to disk."""
    fd, name = tempfile.mkstemp(prefix=".key-", suffix=".tmp", dir=folder)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
        fh.flush()
        os.fsync(fh.fileno())
    return Path(name)


def _publish_new(tmp: Path, path: Path, key: bytes) -> None:
    """Give the finished ``tmp`` the name ``path`` unless that name exists (a hard link is atomic)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise FileExistsError(f"{path} exists; refusing to overwrite a key file") from None
    except OSError:  # a file system without hard links: exclusive create, then write
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise FileExistsError(f"{path} exists; refusing to overwrite a key file") from None
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)


def write_key_file(path: str | os.PathLike, key: bytes | None = None, overwrite: bool = False) -> bytes:
    """Write a key (fresh if not given) to ``path`` with permissions 0600.

    The key is written to a temporary file first and then appears under its
    name whole (a hard link, or a rename with ``overwrite``), so a concurrent
    reader never sees a half-written key; without ``overwrite`` an existing
    file, even one created concurrently, is never replaced.
    """
    path = Path(path)
    key = generate_key() if key is None else key_bytes(key)
    if not key:
        raise ValueError("key must be non-empty")
    _check_key_bytes(key, "key")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder; give the path of the key file to create")
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise FileExistsError(f"{path} exists; refusing to overwrite a key file")
    _make_folder(path.parent)
    tmp = _temporary_key_file(path.parent, key)
    try:
        if overwrite:
            os.replace(tmp, path)
        else:
            _publish_new(tmp, path, key)
    finally:
        tmp.unlink(missing_ok=True)
    os.chmod(path, 0o600)
    return key


def read_key_file(path: str | os.PathLike) -> bytes:
    """Read the raw key bytes of a key file; a clear error if missing, unreadable, empty, too large or not a key.

    At most MAX_KEY_FILE_BYTES are read. The messages name the path, never the content.
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            key = fh.read(MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise FileNotFoundError(f"key file {path} does not exist (create one with `chainmark keygen --out {path}`)") from None
    except PermissionError:
        raise PermissionError(f"key file {path} is not readable by this user") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"key file {path} is a folder, not a file") from None
    except OSError as exc:
        raise OSError(f"key file {path} could not be read ({exc.strerror or type(exc).__name__})") from None
    if not key:
        raise ValueError(f"key file {path} is empty")
    if len(key) > MAX_KEY_FILE_BYTES:
        raise ValueError(f"key file {path} is larger than {MAX_KEY_FILE_BYTES} bytes, so it is not a key file "
                         "(keys are 32 bytes; create one with `chainmark keygen --out FILE`)")
    return _check_key_bytes(key, f"key file {path}")


def key_file_is_private(path: str | os.PathLike) -> bool:
    """True when no one but the owner may read or write the key file (mode 0600 or stricter)."""
    return (Path(path).stat().st_mode & 0o077) == 0


def load_key(path: str | os.PathLike | None = None) -> bytes:
    """The key from ``path``, else ``$CHAINMARK_KEY_FILE``, else ``$CHAINMARK_KEY`` (hex)."""
    if path is not None:
        return read_key_file(path)
    if os.environ.get(KEY_FILE_ENV):
        return read_key_file(os.environ[KEY_FILE_ENV])
    if os.environ.get(KEY_ENV, "").strip():
        try:
            key = bytes.fromhex(os.environ[KEY_ENV].strip())
        except ValueError:
            raise ValueError(f"{KEY_ENV} must hold the key as hexadecimal") from None
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"{KEY_ENV} holds a {len(key)}-byte key; keys need at least {MIN_KEY_BYTES} bytes "
                             f"({2 * MIN_KEY_BYTES} hex digits)")
        return key
    raise LookupError(f"no key: pass a key file, or set {KEY_FILE_ENV} or {KEY_ENV}")


#: The published label the book's teaching key is derived from (HKDF-SHA-256). It is public by
#: design: every reader who runs a chapter with the defaults uses the same key, so a CPU run shows
#: the numbers the site shows. It protects nothing and must never be deployed.
TEACHING_LABEL = "chainmark-book/teaching-key/v1"


def teaching_key() -> bytes:
    """The book's public teaching key: HKDF of :data:`TEACHING_LABEL` (anyone can derive it)."""
    return hkdf(TEACHING_LABEL.encode("utf-8"), b"chainmark/v1/teaching-key")


def book_key_source() -> str:
    """Where :func:`book_key` takes its key from: ``"key file"``, ``"environment"`` or ``"teaching"``."""
    if os.environ.get(KEY_FILE_ENV):
        return "key file"
    if os.environ.get(KEY_ENV, "").strip():
        return "environment"
    return "teaching"


def book_key() -> bytes:
    """The key the book's chapters use, never written in a notebook.

    ``$CHAINMARK_KEY_FILE`` or ``$CHAINMARK_KEY`` when set (the reader's own
    key); otherwise the public :func:`teaching_key`, so that a run with the
    defaults reproduces the page. Only the chapters use this: the command
    line, the regime and every deployment path require a key of their own
    (:func:`load_key`) and never fall back to the teaching key.
    """
    if book_key_source() == "teaching":
        return teaching_key()
    return load_key()
