"""The keyed partition: every token id is hashed with the secret key into a state.

sigma_kappa(t) = SHA-256(key || t as 8 bytes big-endian), first 8 digest bytes read big-endian, mod S. This is
exactly what the paper's reference detector computes, so an auditor running that listing gets the same states as we
do.
"""
from __future__ import annotations

import functools
import hashlib
import threading
from typing import Iterable, Union

import numpy as np

from .checks import check_int, check_num_states  # noqa: F401  (callers import them from here too)

__all__ = ["as_token_array", "key_bytes", "state_of", "state_table", "states_of"]

Key = Union[bytes, str]

#: Token ids must fit the 8-byte big-endian encoding of the hash input.
_MAX_TOKEN_ID = 2**64 - 1
#: Largest vocabulary for which :func:`state_table` builds a dense table.
_DENSE_LIMIT = 1 << 24
#: Without a vocabulary size, :func:`states_of` grows a dense table only up to
#: this size (about a second of hashing); ids above it are hashed one by one.
_AUTO_DENSE_LIMIT = 1 << 20
#: ... and only for a text at least 1/_SPARSE_RATIO of the table's size (or a key whose table exists):
#: a short text under a fresh key hashes its own ids, which costs less than a table it would use once.
_SPARSE_RATIO = 16


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


def _check_token_id(token_id: object) -> int:
    if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
        raise TypeError(f"token_id must be an integer, got {type(token_id).__name__}")
    if not 0 <= int(token_id) <= _MAX_TOKEN_ID:
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

    >>> cm.state_of(1234, b'example key', S=5)
    4
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

    @property
    def size(self) -> int:
        """How many ids are hashed already."""
        return int(self._values.size)

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

    >>> table = cm.state_table(b'example key', vocab_size=49152, S=5)
    >>> table.shape, bool(table[1234] == cm.state_of(1234, b'example key', S=5))
    ((49152,), True)
    """
    S = check_num_states(S)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"vocab_size must be a positive integer, got {type(vocab_size).__name__}")
    if not 1 <= vocab_size <= _DENSE_LIMIT:
        raise ValueError(f"vocab_size must lie in [1, {_DENSE_LIMIT}], got {vocab_size}")
    return _state_table(key_bytes(key), int(vocab_size), S)


def _host_array(token_ids: object) -> object:
    """A torch tensor (on any device) as a numpy array; anything else unchanged.

    Duck-typed so that this module does not import torch.
    """
    if hasattr(token_ids, "detach") and hasattr(token_ids, "cpu") and not isinstance(token_ids, np.ndarray):
        return token_ids.detach().cpu().numpy()  # type: ignore[attr-defined]
    return token_ids


def _exact_ids(token_ids: object, arr: np.ndarray) -> np.ndarray:
    """The ids as an object array when numpy rounded a Python int list to float64.

    numpy turns a list mixing small ints and ints above 2**63 into float64,
    which silently rounds ids: keep the Python ints so they are checked exactly.
    """
    if arr.dtype.kind == "f" and not isinstance(token_ids, np.ndarray):
        exact = np.asarray(token_ids, dtype=object)
        if all(isinstance(t, (int, np.integer)) for t in exact.ravel().tolist()):
            return exact
    return arr


def as_token_array(token_ids: object, vocab_size: int | None = None, *, ndim: int = 1) -> np.ndarray:
    """Validate token ids; return an int64 array (uint64 for uint64 input or ids above 2**63 - 1).

    The package's one normaliser of token ids: lists, tuples, numpy arrays,
    numpy or torch scalars and torch tensors on any device are accepted.
    ``ndim=1`` (the default) asks for one text, ``ndim=2`` for a rectangular
    batch of them. Negative ids, ids above 2**64 - 1, (when ``vocab_size`` is
    given) ids outside the vocabulary and a wrong number of dimensions raise
    a ``ValueError``; text and non-integer ids a ``TypeError``. Every message
    names ``token_ids``.
    """
    if ndim not in (1, 2):
        raise ValueError(f"ndim must be 1 (one text) or 2 (a batch), got {ndim!r}")
    if isinstance(token_ids, (str, bytes)):
        raise TypeError("token_ids must be a sequence of integers, not text; tokenize it first")
    token_ids = _host_array(token_ids)
    try:
        arr = np.asarray(token_ids)
    except ValueError as exc:  # rows of different lengths, or scalars mixed with sequences
        raise ValueError(f"token_ids must be a {'flat' if ndim == 1 else 'rectangular'} "
                         f"sequence of integers: {exc}") from None
    arr = _exact_ids(token_ids, arr)
    if arr.size == 0 and ndim == 1:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != ndim:
        raise ValueError(f"token_ids must be {'one' if ndim == 1 else 'two'}-dimensional, got shape {arr.shape}")
    flat = _checked_ids(arr.ravel())
    if vocab_size is not None and flat.size and int(flat.max()) >= vocab_size:
        raise ValueError(
            f"token_ids must lie in [0, {vocab_size - 1}] for a vocabulary of "
            f"{vocab_size} tokens, got {int(flat.max())} (outside the vocabulary)"
        )
    return flat.reshape(arr.shape)


def _checked_ids(arr: np.ndarray) -> np.ndarray:
    """A flat array of ids checked for type and sign, as int64 (uint64 where int64 cannot hold them)."""
    if arr.dtype == object:
        try:
            values = [_check_token_id(t) for t in arr.tolist()]
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"token_ids: {exc}") from None
        big = bool(values) and max(values) > np.iinfo(np.int64).max
        return np.array(values, dtype=np.uint64 if big else np.int64)
    if arr.dtype.kind == "i":
        if arr.size and int(arr.min()) < 0:
            raise ValueError(f"token_ids must be non-negative, got {int(arr.min())}")
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "u":  # only uint64 can hold ids above 2**63 - 1
        return arr if arr.dtype == np.uint64 else arr.astype(np.int64)
    raise TypeError(f"token_ids must be integers, got dtype {arr.dtype}")


def states_of(token_ids: object, key: Key, S: int, vocab_size: int | None = None) -> np.ndarray:
    """States of a 1-D sequence of token ids (small-integer array), via the cached table.

    With ``vocab_size`` every id must lie in the vocabulary (a ``ValueError``
    otherwise); without it, any id in [0, 2**64 - 1] is hashed.

    >>> cm.states_of([1234, 99, 7], b'example key', S=5)
    array([4, 0, 0], dtype=int8)
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
        if ids.size * _SPARSE_RATIO >= size or _digest_cache(kb).size >= size:
            return np.take(_compact_table(kb, size, S), ids)
    # a short text under a key without a table (one of many keys, say): hash just its distinct ids
    uniq, inverse = np.unique(ids, return_inverse=True)
    states = _digest_values(kb, uniq.tolist()) % np.uint64(S)
    return states.astype(_compact_dtype(S))[inverse.ravel()]
