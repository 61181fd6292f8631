"""Key files and the book's teaching key: where a key is kept, and the one the chapters use by default.

A key file holds the raw key bytes, is written atomically with permissions
0600 (:func:`write_key_file`) and read with clear errors
(:func:`read_key_file`); :func:`load_key` takes a key from a file,
``$CHAINMARK_KEY_FILE`` or ``$CHAINMARK_KEY`` (hex). The book's chapters use
:func:`book_key`: the reader's key when one is set, otherwise the public
:func:`teaching_key`, which protects nothing and is never a deployment path's
fallback. Generating and deriving keys is :mod:`chainmark.keys`.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from ..keys import generate_key, hkdf
from ..limits import MAX_KEY_FILE_BYTES, MIN_KEY_BYTES
from ..partition import key_bytes

__all__ = ["KEY_FILE_ENV", "book_key", "book_key_source", "key_file_is_private", "load_key", "read_key_file",
           "teaching_key", "write_key_file"]

_KEY_ENV = "CHAINMARK_KEY"           # hex-encoded key
KEY_FILE_ENV = "CHAINMARK_KEY_FILE"  # path of a file holding the raw key bytes

_HEX_TEXT = re.compile(rb"\s*[0-9A-Fa-f]+\s*")


def _check_key_bytes(key: bytes, source: str) -> bytes:
    """Refuse a key shorter than MIN_KEY_BYTES or one that is hexadecimal text (the messages name ``source``)."""
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{source} is {len(key)} bytes long; keys need at least {MIN_KEY_BYTES} bytes "
                         "(create one with `chainmark keygen --out FILE`)")
    if _HEX_TEXT.fullmatch(key):
        raise ValueError(f"{source} is hexadecimal text, not raw key bytes, so it would act as another key: "
                         f"decode it (`xxd -r -p HEXFILE > KEYFILE`) or put the hex in ${_KEY_ENV} instead")
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

    >>> import os, stat, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), 'deployment.key')
    >>> key = cm.write_key_file(path)  # a fresh key, readable by its owner only
    >>> len(key), oct(stat.S_IMODE(os.stat(path).st_mode))
    (32, '0o600')
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
    """Read the raw key bytes of a key file (at most MAX_KEY_FILE_BYTES); a clear error, naming the path and never
    the content, if it is missing, unreadable, empty, too large or not a key."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            key = fh.read(MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise FileNotFoundError(f"key file {path} does not exist (create one with "
                                f"`chainmark keygen --out {path}`)") from None
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
    """The key from ``path``, else ``$CHAINMARK_KEY_FILE``, else ``$CHAINMARK_KEY`` (hex).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), 'deployment.key')
    >>> key = cm.write_key_file(path)
    >>> cm.load_key(path) == key
    True
    """
    if path is not None:
        return read_key_file(path)
    if os.environ.get(KEY_FILE_ENV):
        return read_key_file(os.environ[KEY_FILE_ENV])
    if os.environ.get(_KEY_ENV, "").strip():
        try:
            key = bytes.fromhex(os.environ[_KEY_ENV].strip())
        except ValueError:
            raise ValueError(f"{_KEY_ENV} must hold the key as hexadecimal") from None
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"{_KEY_ENV} holds a {len(key)}-byte key; keys need at least {MIN_KEY_BYTES} bytes "
                             f"({2 * MIN_KEY_BYTES} hex digits)")
        return key
    raise LookupError(f"no key: pass a key file, or set {KEY_FILE_ENV} or {_KEY_ENV}")


#: The published label the book's teaching key is derived from (HKDF-SHA-256). It is public by
#: design: every reader who runs a chapter with the defaults uses the same key, so a CPU run shows
#: the numbers the site shows. It protects nothing and must never be deployed.
_TEACHING_LABEL = "chainmark-book/teaching-key/v1"


def teaching_key() -> bytes:
    """The book's public teaching key: HKDF of :data:`_TEACHING_LABEL` (anyone can derive it)."""
    return hkdf(_TEACHING_LABEL.encode("utf-8"), b"chainmark/v1/teaching-key")


def book_key_source() -> str:
    """Where :func:`book_key` takes its key from: ``"key file"``, ``"environment"`` or ``"teaching"``."""
    if os.environ.get(KEY_FILE_ENV):
        return "key file"
    if os.environ.get(_KEY_ENV, "").strip():
        return "environment"
    return "teaching"


def book_key() -> bytes:
    """The key the book's chapters use: the reader's own (``$CHAINMARK_KEY_FILE`` or ``$CHAINMARK_KEY``) when set,
    otherwise the public :func:`teaching_key`, so that a run with the defaults reproduces the page. Deployment
    paths use :func:`load_key` and never fall back to the teaching key.

    >>> key = cm.book_key()  # the public teaching key, unless CHAINMARK_KEY_FILE names yours
    >>> cm.key_fingerprint(key) == cm.key_fingerprint(cm.book_key())
    True
    """
    if book_key_source() == "teaching":
        return teaching_key()
    return load_key()
