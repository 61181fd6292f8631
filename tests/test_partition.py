"""The keyed partition: states against independently computed SHA-256 digests.

Every expected state here is computed inside the test with ``hashlib``
directly (key bytes, then the token id as 8 bytes big-endian; first 8 digest
bytes big-endian, mod S), so a change to the package's hashing cannot hide
behind a shared helper.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from chainmark import state_of, state_table, states_of
from chainmark.partition import as_token_array, key_bytes
from chainmark.checks import check_num_states

TEST_KEY = b"unit-test key, not a secret"
SMOLLM2_VOCAB = 49152


def expected_state(key: bytes, token_id: int, S: int) -> int:
    """The auditor's computation, written out independently of the package."""
    digest = hashlib.sha256(key + token_id.to_bytes(8, byteorder="big", signed=False)).digest()
    value = 0
    for byte in digest[:8]:  # big-endian by hand, not int.from_bytes
        value = value * 256 + byte
    return value % S


# ---- state_of ---------------------------------------------------------------

@pytest.mark.parametrize("S", [2, 3, 5, 7, 16, 255, 2**31 - 1, 2**64 + 13])
@pytest.mark.parametrize("token_id", [0, 1, 2, 255, 256, 49151, 2**32, 2**63, 2**64 - 1])
def test_state_of_matches_independent_digest(token_id, S):
    assert state_of(token_id, TEST_KEY, S) == expected_state(TEST_KEY, token_id, S)


def test_state_of_known_digest_layout():
    # Spell the hash input out byte by byte for one id: key || 00 00 00 00 00 00 01 02.
    key = b"k"
    digest = hashlib.sha256(b"k\x00\x00\x00\x00\x00\x00\x01\x02").hexdigest()
    assert state_of(258, key, 2**64 + 1) == int(digest[:16], 16)
    assert state_of(258, key, 5) == int(digest[:16], 16) % 5


@settings(max_examples=200, deadline=None)
@given(key=st.binary(min_size=0, max_size=64), token_id=st.integers(0, 2**64 - 1),
       S=st.integers(2, 10**6))
def test_state_of_property(key, token_id, S):
    assert state_of(token_id, key, S) == expected_state(key, token_id, S)


@settings(max_examples=100, deadline=None)
@given(key=st.text(min_size=1, max_size=20), token_id=st.integers(0, 10**6), S=st.integers(2, 50))
def test_str_key_is_utf8(key, token_id, S):
    assert state_of(token_id, key, S) == expected_state(key.encode("utf-8"), token_id, S)


def test_bytes_like_keys_agree():
    for key in (bytearray(TEST_KEY), memoryview(TEST_KEY)):
        assert state_of(12345, key, 5) == state_of(12345, TEST_KEY, 5)


def test_numpy_integer_token_id_and_S():
    assert state_of(np.int64(77), TEST_KEY, np.int32(5)) == expected_state(TEST_KEY, 77, 5)
    assert isinstance(state_of(np.uint64(77), TEST_KEY, 5), int)


@pytest.mark.parametrize("key", [123, None, 1.5, ["a"], ("b",), np.array([1, 2])])
def test_bad_key_type(key):
    with pytest.raises(TypeError, match="key must be bytes or str"):
        state_of(1, key, 5)
    with pytest.raises(TypeError, match="key must be bytes or str"):
        state_table(key, 100, 5)
    with pytest.raises(TypeError, match="key must be bytes or str"):
        states_of([1, 2], key, 5)
    with pytest.raises(TypeError, match="key must be bytes or str"):
        key_bytes(key)


@pytest.mark.parametrize("S", [1, 0, -3])
def test_S_too_small(S):
    with pytest.raises(ValueError, match="S must be an integer >= 2"):
        state_of(1, TEST_KEY, S)
    with pytest.raises(ValueError, match="S must be an integer >= 2"):
        state_table(TEST_KEY, 10, S)
    with pytest.raises(ValueError, match="S must be an integer >= 2"):
        states_of([1], TEST_KEY, S)


@pytest.mark.parametrize("S", [2.0, 5.5, True, "5", None])
def test_S_wrong_type(S):
    with pytest.raises(TypeError, match="S must be an integer"):
        state_of(1, TEST_KEY, S)
    with pytest.raises(TypeError, match="S must be an integer"):
        check_num_states(S)


@pytest.mark.parametrize("token_id", [-1, 2**64, -(2**70)])
def test_token_id_out_of_range(token_id):
    with pytest.raises(ValueError, match=r"token_id must lie in \[0, 2\*\*64 - 1\]"):
        state_of(token_id, TEST_KEY, 5)


@pytest.mark.parametrize("token_id", [1.0, True, "3", None])
def test_token_id_wrong_type(token_id):
    with pytest.raises(TypeError, match="token_id must be an integer"):
        state_of(token_id, TEST_KEY, 5)


# ---- state_table --------------------------------------------------------------

@pytest.mark.parametrize("S", [2, 5, 12])
def test_table_equals_state_of_on_every_id(S):
    table = state_table(TEST_KEY, SMOLLM2_VOCAB, S)
    assert table.shape == (SMOLLM2_VOCAB,) and table.dtype == np.int64
    one_by_one = np.array([state_of(t, TEST_KEY, S) for t in range(SMOLLM2_VOCAB)])
    assert np.array_equal(table, one_by_one)


def test_table_against_independent_digests_sample():
    rng = np.random.default_rng(0)
    table = state_table(TEST_KEY, SMOLLM2_VOCAB, 5)
    for t in rng.integers(0, SMOLLM2_VOCAB, size=300).tolist():
        assert table[t] == expected_state(TEST_KEY, t, 5)


def test_table_is_cached_and_read_only():
    a = state_table(TEST_KEY, 1000, 5)
    assert state_table(TEST_KEY, 1000, 5) is a
    assert state_table(TEST_KEY.decode(), 1000, 5) is a  # str and bytes keys share the cache
    with pytest.raises(ValueError):
        a[0] = 1
    # a smaller table is a prefix of a larger one; other S are independent tables
    assert np.array_equal(state_table(TEST_KEY, 500, 5), a[:500])
    assert not np.array_equal(state_table(TEST_KEY, 1000, 7), a)


@pytest.mark.parametrize("vocab_size", [0, -5, 2**24 + 1])
def test_table_bad_vocab_size(vocab_size):
    with pytest.raises(ValueError, match="vocab_size must lie in"):
        state_table(TEST_KEY, vocab_size, 5)


@pytest.mark.parametrize("vocab_size", [100.0, True, "100", None])
def test_table_vocab_size_wrong_type(vocab_size):
    with pytest.raises(TypeError, match="vocab_size must be a positive integer"):
        state_table(TEST_KEY, vocab_size, 5)


def test_class_sizes_fit_uniform():
    """Random-oracle check: class sizes ~ Multinomial(V, 1/S) for fixed test keys.

    The keys are fixed, so this is deterministic; at the 0.1% level a correct
    hash fails one of these five keys with probability about 0.5%.
    """
    for i in range(5):
        for S in (2, 5, 16):
            counts = np.bincount(state_table(b"class-size key %d" % i, SMOLLM2_VOCAB, S), minlength=S)
            assert counts.sum() == SMOLLM2_VOCAB
            assert stats.chisquare(counts).pvalue > 1e-3


def test_two_keys_agree_at_chance():
    S, V = 5, SMOLLM2_VOCAB
    a = state_table(b"key A", V, S)
    b = state_table(b"key B", V, S)
    agree = float(np.mean(a == b))
    sd = np.sqrt((1 / S) * (1 - 1 / S) / V)
    assert abs(agree - 1 / S) < 5 * sd


def test_divisible_S_nests():
    """S | S' makes the S-partition a coarsening of the S'-partition (same digest, mod)."""
    assert np.array_equal(state_table(TEST_KEY, 5000, 12) % 4, state_table(TEST_KEY, 5000, 4))


# ---- states_of and token arrays ----------------------------------------------

def test_states_of_matches_table_and_state_of():
    ids = [0, 5, 49151, 5, 17, 30000]
    table = state_table(TEST_KEY, SMOLLM2_VOCAB, 5)
    expected = [expected_state(TEST_KEY, t, 5) for t in ids]
    assert states_of(ids, TEST_KEY, 5).tolist() == expected
    assert states_of(np.array(ids), TEST_KEY, 5, vocab_size=SMOLLM2_VOCAB).tolist() == table[ids].tolist()


def test_states_of_large_ids_hash_directly():
    ids = [3, 2**30, 2**40 + 7, 2**64 - 1, 2**30]
    assert states_of(ids, TEST_KEY, 7).tolist() == [expected_state(TEST_KEY, t, 7) for t in ids]


def test_states_of_empty():
    assert states_of([], TEST_KEY, 5).size == 0
    assert states_of([], TEST_KEY, 5, vocab_size=10).size == 0
    with pytest.raises(TypeError, match="key must be bytes or str"):
        states_of([], 42, 5)


def test_states_of_bad_vocab_size():
    with pytest.raises(ValueError, match="vocab_size must lie in"):
        states_of([1], TEST_KEY, 5, vocab_size=0)
    with pytest.raises(TypeError, match="vocab_size must be a positive integer"):
        states_of([1], TEST_KEY, 5, vocab_size=10.0)


def test_states_of_bad_ids():
    with pytest.raises(ValueError, match="non-negative"):
        states_of([1, -2], TEST_KEY, 5)
    with pytest.raises(ValueError, match=r"token_ids must lie in \[0, 99\]"):
        states_of([1, 100], TEST_KEY, 5, vocab_size=100)
    with pytest.raises(ValueError, match="one-dimensional"):
        states_of([[1, 2]], TEST_KEY, 5)
    with pytest.raises(TypeError, match="tokenize it first"):
        states_of("hello", TEST_KEY, 5)
    with pytest.raises(TypeError, match="must be integers"):
        states_of([1.0, 2.0], TEST_KEY, 5)
    with pytest.raises(ValueError, match="token_ids"):
        as_token_array([1, 2**64])
    with pytest.raises(TypeError, match="token_ids"):
        as_token_array([1, True, 2**64 - 1])
