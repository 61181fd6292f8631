"""The keyed partition: every token id is hashed with the secret key into a state.

sigma_kappa(t) = SHA-256(key || t as 8 bytes big-endian), first 8 digest bytes
read big-endian, mod S. This is exactly what the paper's reference detector
computes, so an auditor running that listing gets the same states as we do.
"""
from __future__ import annotations

import functools
import hashlib
import threading
from typing import Iterable, Union

import numpy as np

Key = Union[bytes, str]

#: Token ids must fit the 8-byte big-endian encoding of the hash input.
MAX_TOKEN_ID = 2**64 - 1
#: Largest vocabulary for which :func:`state_table` builds a dense table.
_DENSE_LIMIT = 1 << 24
#: Without a vocabulary size, :func:`states_of` grows a dense table only up to
#: this size (about a second of hashing); ids above it are hashed one by one.
_AUTO_DENSE_LIMIT = 1 << 20


def key_bytes(key: Key) -> bytes:
    """Return the key as bytes; ``str`` keys are UTF-8 encoded.

    Anything else (an int, None, a list) is a ``TypeError``: silently turning
    it into bytes would give a different partition from the auditor's.
    """
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError(f"key must be bytes or str, got {type(key).__name__}")


def check_int(value: object, name: str, low: int) -> int:
    """An integer (Python or numpy, not bool) of at least ``low``, as an ``int``.

    The one integer check of the package: a non-integer is a ``TypeError``, a
    value below ``low`` a ``ValueError``, both naming the parameter.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {low}, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value}")
    return int(value)


def check_num_states(S: object) -> int:
    """Validate a state count: an integer of at least 2."""
    return check_int(S, "S", 2)


def _check_token_id(token_id: object) -> int:
    if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
        raise TypeError(f"token_id must be an integer, got {type(token_id).__name__}")
    if not 0 <= int(token_id) <= MAX_TOKEN_ID:
        raise ValueError(f"token_id must lie in [0, 2**64 - 1], got {token_id}")
    return int(token_id)


def _digest_value(kb: bytes, token_id: int) -> int:
    digest = hashlib.sha256(kb + token_id.to_bytes(8, "big")).digest()
    return int.from_bytes(digest[:8], "big")


def state_of(token_id: int, key: Key, S: int) -> int:
    """State of one token id under ``key`` with ``S`` states (the paper's sigma).

    SHA-256 over the key bytes followed by the id as 8 bytes big-endian; the
    first 8 digest bytes, read big-endian, reduced mod ``S``. This is the
    paper's reference computation, one token at a time.
    """
    S = check_num_states(S)
    return _digest_value(key_bytes(key), _check_token_id(token_id)) % S


def _digest_values(kb: bytes, ids: Iterable[int]) -> np.ndarray:
    """First 8 digest bytes of SHA-256(key || id) for each id, as uint64."""
    sha = hashlib.sha256
    return np.fromiter(
        (int.from_bytes(sha(kb + int(t).to_bytes(8, "big")).digest()[:8], "big") for t in ids),
        dtype=np.uint64,
    )


class _DigestCache:
    """Growable dense table of digest values for ids 0..size-1, per key.

    States for any S are ``digests % S``; the expensive hashing happens once
    per key and id, whatever S or vocabulary size is asked for later.
    """

    def __init__(self, kb: bytes):
        self._kb = kb
        self._values = np.zeros(0, dtype=np.uint64)
        self._lock = threading.Lock()

    def prefix(self, size: int) -> np.ndarray:
        with self._lock:
            have = self._values.size
            if size > have:
                extra = _digest_values(self._kb, range(have, size))
                self._values = np.concatenate([self._values, extra])
            return self._values[:size]


@functools.lru_cache(maxsize=16)
def _digest_cache(kb: bytes) -> _DigestCache:
    return _DigestCache(kb)


@functools.lru_cache(maxsize=64)
def _state_table(kb: bytes, vocab_size: int, S: int) -> np.ndarray:
    table = (_digest_cache(kb).prefix(vocab_size) % np.uint64(S)).astype(np.int64)
    table.flags.writeable = False
    return table


def _compact_dtype(S: int) -> type:
    return np.int8 if S <= 127 else np.int16 if S <= 32767 else np.int32 if S < 2**31 else np.int64


@functools.lru_cache(maxsize=64)
def _compact_table(kb: bytes, vocab_size: int, S: int) -> np.ndarray:
    """The same table in the smallest integer type: gathers are several times faster."""
    table = _state_table(kb, vocab_size, S).astype(_compact_dtype(S))
    table.flags.writeable = False
    return table


def state_table(key: Key, vocab_size: int, S: int) -> np.ndarray:
    """States of every token id ``0..vocab_size-1``, as a read-only int64 array.

    Built once per (key, vocab size, S) and cached; entry ``t`` equals
    ``state_of(t, key, S)``.
    """
    S = check_num_states(S)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"vocab_size must be a positive integer, got {type(vocab_size).__name__}")
    if not 1 <= vocab_size <= _DENSE_LIMIT:
        raise ValueError(f"vocab_size must lie in [1, {_DENSE_LIMIT}], got {vocab_size}")
    return _state_table(key_bytes(key), int(vocab_size), S)


def as_token_array(token_ids: object, vocab_size: int | None = None) -> np.ndarray:
    """Validate a 1-D sequence of token ids; return an int64 (or, above 2**63, uint64) array.

    Negative ids, ids above 2**64 - 1 and (when ``vocab_size`` is given) ids
    outside the vocabulary raise a ``ValueError`` that names ``token_ids``.
    """
    if isinstance(token_ids, (str, bytes)):
        raise TypeError("token_ids must be a sequence of integers, not text; tokenize it first")
    arr = np.asarray(token_ids)
    if arr.dtype.kind == "f" and not isinstance(token_ids, np.ndarray):
        # numpy turns a list mixing small ints and ints above 2**63 into
        # float64, which silently rounds ids: validate the Python ints instead
        exact = np.asarray(token_ids, dtype=object)
        if all(isinstance(t, (int, np.integer)) for t in exact.ravel().tolist()):
            arr = exact
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint64)
    if arr.ndim != 1:
        raise ValueError(f"token_ids must be one-dimensional, got shape {arr.shape}")
    if arr.dtype == object:
        try:
            values = [_check_token_id(t) for t in arr.tolist()]
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"token_ids: {exc}") from None
        big = max(values) > np.iinfo(np.int64).max
        arr = np.array(values, dtype=np.uint64 if big else np.int64)
    elif arr.dtype.kind == "i":
        if int(arr.min()) < 0:
            raise ValueError(f"token_ids must be non-negative, got {int(arr.min())}")
        arr = arr.astype(np.int64, copy=False)
    elif arr.dtype.kind == "u":
        arr = arr.astype(np.uint64, copy=False)
    else:
        raise TypeError(f"token_ids must be integers, got dtype {arr.dtype}")
    if vocab_size is not None and arr.size and int(arr.max()) >= vocab_size:
        raise ValueError(
            f"token_ids must lie in [0, {vocab_size - 1}] for a vocabulary of "
            f"{vocab_size} tokens, got {int(arr.max())}"
        )
    return arr


def states_of(token_ids: object, key: Key, S: int, vocab_size: int | None = None) -> np.ndarray:
    """States of a 1-D sequence of token ids (small-integer array), via the cached table.

    With ``vocab_size`` every id must lie in the vocabulary (a ``ValueError``
    otherwise); without it, any id in [0, 2**64 - 1] is hashed.
    """
    S = check_num_states(S)
    kb = key_bytes(key)
    if vocab_size is not None:
        state_table(kb, vocab_size, S)  # validates vocab_size before the ids are checked against it
    ids = as_token_array(token_ids, vocab_size)
    if ids.size == 0:
        return np.zeros(0, dtype=_compact_dtype(S))
    if vocab_size is not None:
        return np.take(_compact_table(kb, int(vocab_size), S), ids)
    top = int(ids.max())
    if top < _AUTO_DENSE_LIMIT:
        # grow the table in powers of two so that nearby sizes share it
        size = min(1 << max(10, top.bit_length()), _AUTO_DENSE_LIMIT)
        return np.take(_compact_table(kb, size, S), ids)
    uniq, inverse = np.unique(ids, return_inverse=True)
    states = _digest_values(kb, uniq.tolist()) % np.uint64(S)
    return states.astype(_compact_dtype(S))[inverse.ravel()]
