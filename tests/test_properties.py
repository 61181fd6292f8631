"""Property-based tests (hypothesis) of the detector on arbitrary input.

Token sequences of length 0 to 100 000, arbitrary byte keys, S from 2 to
64, both topologies, with and without distinct pairs: detection never
crashes, phi and p lie in [0, 1], z is finite, the counts are consistent,
the decision is p < alpha, a batch equals its rows one by one, and the
vectorised states equal the per-token hash. Text-level detection with the
real tokenizer survives arbitrary Unicode (slow: loads the tokenizer).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chainmark.detection import DetectionResult, detect, detect_batch, detect_text
from chainmark.config import ChainMarkConfig
from chainmark.partition import state_of, states_of
from paper_listing import reference_detect

VOCAB = 49152
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys = st.binary(min_size=0, max_size=64)
config_keys = st.binary(min_size=1, max_size=64)  # a ChainMarkConfig's key is never empty
num_states = st.integers(min_value=2, max_value=64)
lengths = st.one_of(st.integers(0, 3), st.integers(0, 300), st.integers(0, 100_000))
alphas = st.floats(min_value=1e-12, max_value=1 - 1e-12, exclude_min=True, exclude_max=True)


@st.composite
def token_arrays(draw, max_len: int | None = None):
    """Token ids from one of three regimes: a tiny vocabulary (many repeats), the
    model's vocabulary, or any 64-bit id (hashed id by id, no dense table)."""
    n = draw(lengths) if max_len is None else draw(st.integers(0, max_len))
    regime = draw(st.sampled_from(["tiny", "vocab", "huge"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if regime == "tiny":
        return rng.integers(0, draw(st.integers(1, 8)), size=n), regime
    if regime == "vocab":
        return rng.integers(0, VOCAB, size=n), regime
    n = min(n, 5_000)  # every distinct huge id costs one SHA-256 call
    return rng.integers(0, 2**64, size=n, dtype=np.uint64), regime


@st.composite
def topologies(draw, S):
    return draw(st.sampled_from(["clockwork", "soft_cycle"] if S >= 3 else ["clockwork"]))


def check_result(res: DetectionResult, n: int, S: int, alpha: float) -> None:
    assert isinstance(res, DetectionResult)
    assert 0.0 <= res.phi <= 1.0
    assert 0.0 <= res.p_value <= 1.0
    assert math.isfinite(res.z)
    assert res.n_tokens == n
    assert 0 <= res.n_hits <= res.n_scored <= max(n - 1, 0)
    assert res.S == S and 0 < res.p0 < 1
    if res.n_scored == 0:
        assert res.phi == 0.0 and res.z == 0.0 and res.p_value == 1.0 and not res.is_watermarked
    else:
        assert res.phi == pytest.approx(res.n_hits / res.n_scored)
        assert res.is_watermarked == (res.p_value < alpha)


@FAST
@given(data=st.data(), key=config_keys, S=num_states, alpha=alphas, distinct=st.booleans())
def test_detect_never_crashes_and_stays_in_range(data, key, S, alpha, distinct):
    ids, regime = data.draw(token_arrays())
    topology = data.draw(topologies(S))
    vocab = VOCAB if regime != "huge" else None
    config = ChainMarkConfig(key, S=S, topology=topology)
    res = detect(ids, config, alpha=alpha, test="distinct" if distinct else "z", vocab_size=vocab)
    check_result(res, len(ids), S, alpha)
    if not distinct:
        assert res.n_scored == max(len(ids) - 1, 0)
    else:
        n_pairs = len({(int(a), int(b)) for a, b in zip(ids[:-1], ids[1:])}) if len(ids) <= 5000 else None
        if n_pairs is not None:
            assert res.n_scored == n_pairs


@FAST
@given(data=st.data(), key=config_keys, S=num_states)
def test_list_input_equals_array_input(data, key, S):
    ids, regime = data.draw(token_arrays(max_len=2000))
    if regime == "huge":  # Python-int lists mixing ids above and below 2**63: see test_validation
        ids = ids >> np.uint64(1)
    config = ChainMarkConfig(key, S=S)
    a, b = detect(ids, config, test="z"), detect([int(t) for t in ids], config, test="z")
    assert (a.phi, a.z, a.n_hits, a.n_scored) == (b.phi, b.z, b.n_hits, b.n_scored)


@FAST
@given(data=st.data(), key=config_keys, S=num_states, rows=st.integers(1, 12), width=st.integers(0, 400),
       distinct=st.booleans())
def test_batched_equals_per_row(data, key, S, rows, width, distinct):
    topology = data.draw(topologies(S))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    high = data.draw(st.sampled_from([3, VOCAB]))
    matrix = rng.integers(0, high, size=(rows, width))
    config, test = ChainMarkConfig(key, S=S, topology=topology), "distinct" if distinct else "z"
    batch = detect_batch(matrix, config, test=test)
    assert isinstance(batch, list) and len(batch) == rows
    for row, res in zip(matrix, batch):
        one = detect(row, config, test=test)
        assert (res.phi, res.z, res.p_value, res.is_watermarked, res.n_hits, res.n_scored) == \
               (one.phi, one.z, one.p_value, one.is_watermarked, one.n_hits, one.n_scored)
        assert np.array_equal(res.valid_mask, one.valid_mask)
    # ragged lists of lists: every row scored alone
    ragged = [matrix[i, : rng.integers(0, width + 1)].tolist() for i in range(rows)]
    assume(len(ragged) > 0)
    for row, res in zip(ragged, detect_batch(ragged, config, test=test)):
        one = detect(row, config, test=test)
        assert (res.z, res.n_hits, res.n_scored) == (one.z, one.n_hits, one.n_scored)


@FAST
@given(key=keys, S=num_states,
       ids=st.lists(st.one_of(st.integers(0, 4095), st.integers(2**24, 2**64 - 1)), max_size=60))
def test_vectorised_states_equal_the_per_token_hash(key, S, ids):
    states = states_of(ids, key, S)
    assert [int(s) for s in states] == [state_of(t, key, S) for t in ids]


@FAST
@given(key=st.binary(min_size=1, max_size=64), S=num_states,
       ids=st.lists(st.integers(0, VOCAB - 1), max_size=400))
def test_clockwork_detect_equals_the_reference_listing(key, S, ids):
    ours = detect(ids, ChainMarkConfig(key, S=S), test="z")
    ref = reference_detect(ids, key, S)
    assert ours.phi == pytest.approx(ref["phi"])
    assert ours.z == pytest.approx(ref["z"], abs=1e-9)
    assert ours.is_watermarked == ref["is_watermarked"]


@FAST
@given(key=config_keys, S=num_states, n=st.integers(2, 3000))
def test_a_perfect_walk_has_phi_one(key, S, n):
    """Ids chosen so the states walk the cycle: phi = 1 and z = sqrt((S - 1)(n - 1))."""
    table = states_of(np.arange(64 * S), key, S)
    by_state = [np.flatnonzero(table == s) for s in range(S)]
    assume(all(len(b) for b in by_state))
    ids = [int(by_state[i % S][0]) for i in range(n)]
    res = detect(ids, ChainMarkConfig(key, S=S), test="z")
    assert res.phi == 1.0 and res.n_hits == n - 1
    assert res.z == pytest.approx(math.sqrt((S - 1) * (n - 1)))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=2000), key=st.binary(min_size=1, max_size=48), S=num_states)
def test_detect_text_survives_arbitrary_unicode(real_tokenizer, text, key, S):
    res = detect_text(text, real_tokenizer, ChainMarkConfig(key, S=S), test="z")
    n = len(real_tokenizer(text, add_special_tokens=False)["input_ids"])
    check_result(res, n, S, 0.01)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.sampled_from(["\u200b", "\ufeff", "e\u0301", "\U0001F600", "\x00", "\r\n",
                                         "\u202e", "\ud7ff", "\U0010FFFF", "   ", "日本語", "a"]),
                       min_size=0, max_size=3000))
def test_detect_text_on_odd_characters(real_tokenizer, pieces):
    text = "".join(pieces)
    res = detect_text(text, real_tokenizer, ChainMarkConfig(b"odd-text-key", S=5), test="z")
    n = len(real_tokenizer(text, add_special_tokens=False)["input_ids"])
    check_result(res, n, 5, 0.01)


@pytest.fixture(scope="module")
def real_tokenizer():
    from chainmark.auditor.tokenizer import load_tokenizer

    return load_tokenizer()
