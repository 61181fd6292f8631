"""Tests of the detectors (chainmark.detection).

The vectorised detector is checked against an independent per-token
implementation written here (hashlib in a loop, the validity matrix looked
up entry by entry) and against the paper's reference listing; statistical
tests use fixed seeds and tolerances from the binomial sampling distribution.
"""
from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from chainmark.detection import (DetectionResult, detect, detect_batch, detect_text, score_states,
                              valid_transitions)
from chainmark.checks import check_alpha
from chainmark.config import ChainMarkConfig
from chainmark.significance import first_occurrences, log_p_value, p_value, z_score
from cmlab.comparison.lrdetect import (SimulatedNull, gate_probabilities, _llr_weights, lr_detect, _simulate_llr_null,
                                       teacher_forced_signal)
from chainmark.gates import Gate
from chainmark.partition import state_table
from chainmark.auditor.regime import Regime
from chainmark.topology import Topology
from chainmark.verdict import Verdict, decide
from paper_listing import reference_detect

KEYS = [b"\x00" * 32, b"another key", "a str key, UTF-8 encoded"]
VOCAB = 49152
CONFIG = ChainMarkConfig(b"k")  # S = 5, the clockwork


# ---------------------------------------------------------------- helpers


def per_token_detect(ids, key, T, alpha=0.01):
    """Independent restatement of Algorithm 2 for any 0/1 matrix T, one token at a time."""
    kb = key.encode() if isinstance(key, str) else key
    S = len(T)

    def state(t):
        h = hashlib.sha256(kb + int(t).to_bytes(8, "big")).digest()
        return int.from_bytes(h[:8], "big") % S

    n = len(ids)
    if n < 2:
        return None
    valid = []
    for i in range(n - 1):
        valid.append(bool(T[state(ids[i])][state(ids[i + 1])]))
    p0 = sum(map(sum, T)) / (S * S)
    phi = sum(valid) / (n - 1)
    z = (phi - p0) / math.sqrt(p0 * (1 - p0) / (n - 1))
    return {"phi": phi, "z": z, "p": norm.sf(z), "valid": valid, "c": sum(valid)}


def clockwork_matrix(S):
    return [[1 if b == (a + 1) % S else 0 for b in range(S)] for a in range(S)]


def permuted_regular(S, k, seed):
    """A k-regular matrix that is not circulant: a circulant one with its columns shuffled."""
    rng = np.random.default_rng(seed)
    base = np.zeros((S, S), dtype=int)
    for o in range(1, k + 1):
        base[np.arange(S), (np.arange(S) + o) % S] = 1
    while True:
        m = base[:, rng.permutation(S)]
        if not m.diagonal().any():  # keep it free of self-loops, like the named topologies
            return m


def walk_ids(key, S, n, rng, offsets=(1,)):
    """Token ids whose states walk a circulant topology at every step (a perfect watermark)."""
    table = state_table(key, VOCAB, S)
    by_state = [np.flatnonzero(table == s) for s in range(S)]
    s = int(rng.integers(S))
    out = []
    for _ in range(n):
        out.append(int(rng.choice(by_state[s])))
        s = (s + int(rng.choice(offsets))) % S
    return out


# ------------------------------------------------- agreement with the listing


@pytest.mark.parametrize("S", [2, 3, 5, 8, 16, 50, 130])
@pytest.mark.parametrize("key", KEYS)
def test_matches_independent_per_token_implementation(S, key):
    rng = np.random.default_rng(S)
    T = clockwork_matrix(S)
    for n in (2, 3, 17, 300):
        ids = rng.integers(0, VOCAB, n)
        ref = per_token_detect(ids.tolist(), key, T)
        res = detect(ids, ChainMarkConfig(key, S=S), test="z")
        assert res.n_scored == n - 1 and res.n_tokens == n
        assert res.n_hits == ref["c"]
        assert res.valid_mask.tolist() == ref["valid"]
        assert res.phi == ref["phi"]
        assert res.z == pytest.approx(ref["z"], rel=1e-12, abs=1e-12)
        assert res.p_value == pytest.approx(ref["p"], rel=1e-12, abs=1e-300)
        assert res.is_watermarked == (ref["p"] < 0.01)


@pytest.mark.parametrize("S", [2, 5, 7, 32])
def test_agrees_with_the_reference_listing(S):
    rng = np.random.default_rng(100 + S)
    key = b"listing key"
    for n in (2, 5, 64, 1000):
        ids = rng.integers(0, VOCAB, n).tolist()
        ref = reference_detect(ids, key, S)
        res = detect(ids, ChainMarkConfig(key, S=S), test="z")
        # same formula, same order of operations: bit-for-bit equal
        assert res.phi == ref["phi"] and res.z == ref["z"]
        # the listing's 1 - cdf(z) has absolute error ~1e-16; ours is the exact tail
        assert res.p_value == pytest.approx(ref["p_value"], rel=1e-9, abs=5e-16)
        assert res.is_watermarked == ref["is_watermarked"]


def test_agrees_with_the_listing_on_watermarked_text():
    rng = np.random.default_rng(7)
    key = b"walk"
    ids = walk_ids(key, 5, 40, rng)
    ref = reference_detect(ids, key, 5)
    res = detect(ids, ChainMarkConfig(key, S=5), test="z")
    assert res.phi == ref["phi"] == 1.0
    assert res.z == ref["z"]
    assert res.is_watermarked and ref["is_watermarked"]
    # z = 12.5 here: the listing's p-value has cancelled to 0, ours has not
    assert ref["p_value"] == 0.0
    assert res.p_value == pytest.approx(norm.sf(res.z), rel=1e-14) and res.p_value > 0


@pytest.mark.parametrize("topology,S", [
    ("soft_cycle", 5), ("soft_cycle", 9), (Topology.from_offsets(7, [2, 5]), 7),
    (Topology.from_offsets(12, [1, 4, 7]), 12),
    (Topology.from_matrix(permuted_regular(6, 2, 0)), 6),
    (Topology.from_matrix(permuted_regular(11, 3, 1)), 11),
    (Topology.from_matrix(permuted_regular(150, 4, 2)), 150),
])
def test_k_regular_topologies(topology, S):
    topo = topology if isinstance(topology, Topology) else Topology.soft_cycle(S)
    T = topo.matrix.astype(int).tolist()
    rng = np.random.default_rng(S)
    for key in KEYS[:2]:
        for n in (2, 9, 400):
            ids = rng.integers(0, VOCAB, n)
            ref = per_token_detect(ids.tolist(), key, T)
            res = detect(ids, ChainMarkConfig(key, S=S, topology=topology), test="z")
            assert res.k == topo.k and res.p0 == pytest.approx(topo.k / S, rel=1e-15)
            assert res.valid_mask.tolist() == ref["valid"]
            assert res.phi == ref["phi"]
            assert res.z == pytest.approx(ref["z"], rel=1e-12, abs=1e-12)
            listing = reference_detect(ids.tolist(), key if isinstance(key, bytes) else key.encode(), S, T=T)
            assert res.phi == listing["phi"] and res.z == pytest.approx(listing["z"], rel=1e-12, abs=1e-12)


def test_soft_cycle_walk_is_fully_valid():
    rng = np.random.default_rng(3)
    ids = walk_ids(b"k", 7, 60, rng, offsets=(1, 2))
    res = detect(ids, ChainMarkConfig(b"k", S=7, topology="soft_cycle"), test="z")
    assert res.phi == 1.0 and res.is_watermarked
    assert not detect(ids, ChainMarkConfig(b"k", S=7, topology="clockwork"), test="z").phi == 1.0


def test_valid_transitions_circulant_and_matrix_paths_agree():
    rng = np.random.default_rng(0)
    for S in (3, 5, 10, 127, 128, 300):
        topo = Topology.from_offsets(S, [1, S // 2 + 1] if S > 3 else [1])
        for dtype in (np.int8, np.int16, np.int64, np.uint8, np.uint16):
            if np.iinfo(dtype).max < S - 1:
                continue
            states = rng.integers(0, S, 1000).astype(dtype)
            fast = valid_transitions(states, topo)
            slow = topo.matrix[states[:-1].astype(int), states[1:].astype(int)]
            assert np.array_equal(fast, slow)


# ---------------------------------------------------------------- p-values


@pytest.mark.parametrize("z", [5.0, 6.0, 8.0, 10.0, 15.0, 20.0, 25.0, 30.0])
def test_p_value_is_accurate_deep_in_the_tail(z):
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    exact = mpmath.erfc(mpmath.mpf(z) / mpmath.sqrt(2)) / 2
    assert p_value(z) == pytest.approx(float(exact), rel=1e-12)
    assert log_p_value(z) == pytest.approx(float(mpmath.log(exact)), rel=1e-12)


def test_log_p_value_survives_underflow():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    for z in (40.0, 100.0):
        assert p_value(z) == 0.0  # below the smallest double
        exact = mpmath.log(mpmath.erfc(mpmath.mpf(z) / mpmath.sqrt(2)) / 2)
        assert log_p_value(z) == pytest.approx(float(exact), rel=1e-10)


def test_z_score_matches_the_formula():
    assert z_score(0.2, 0.2, 10) == 0.0
    assert z_score(11 / 13, 0.2, 13) == pytest.approx((11 / 13 - 0.2) / math.sqrt(0.16 / 13))
    assert z_score(0.5, 0.2, 0) == 0.0
    for bad in (0.0, 1.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="p0"):
            z_score(0.5, bad, 10)


# ---------------------------------------------------------------- edge cases


@pytest.mark.parametrize("ids", [[], [17], np.array([], dtype=np.int64), np.array([5])])
def test_fewer_than_two_tokens(ids):
    res = detect(ids, CONFIG, test="z")
    assert isinstance(res, DetectionResult)
    assert res.n_scored == 0 and res.n_hits == 0
    assert res.p_value == 1.0 and res.z == 0.0 and res.phi == 0.0 and not res.is_watermarked
    assert res.n_tokens == len(ids) and res.log_p_value == 0.0
    json.dumps(res.to_dict(include_masks=True))


def test_torch_inputs():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    ids = rng.integers(0, VOCAB, 50)
    a = detect(torch.tensor(ids), CONFIG, test="z")
    b = detect(ids.tolist(), CONFIG, test="z")
    assert a.to_dict() == b.to_dict()
    assert detect(torch.tensor([3]), CONFIG, test="z").n_scored == 0
    matrix = rng.integers(0, VOCAB, (3, 20))
    rows = detect_batch(torch.tensor(matrix), CONFIG, test="z")
    assert [r.to_dict() for r in rows] == [detect(r, CONFIG, test="z").to_dict() for r in matrix]


def test_vocab_size_checks_range_and_agrees():
    ids = np.random.default_rng(2).integers(0, 1000, 100)
    assert detect(ids, CONFIG, vocab_size=1000, test="z").to_dict() == detect(ids, CONFIG, test="z").to_dict()
    with pytest.raises(ValueError, match="token_ids"):
        detect([1, 2, 1000], CONFIG, vocab_size=1000, test="z")


@pytest.mark.parametrize("kwargs,exc", [
    ({"alpha": 0.0}, ValueError), ({"alpha": 1.0}, ValueError), ({"alpha": True}, TypeError),
    ({"alpha": "0.01"}, TypeError),
    ({"test": "yes"}, ValueError), ({"distinct_pairs": True}, TypeError),  # one spelling: test="distinct"
    # the loose form: a key in the configuration's place, or S, the topology or the key beside it
    ({"config": b"k"}, TypeError), ({"config": 12345}, TypeError), ({"S": 5}, TypeError),
    ({"topology": "clockwork"}, TypeError), ({"key": b"k"}, TypeError),
])
def test_bad_arguments_raise_clear_errors(kwargs, exc):
    args = {"token_ids": [1, 2, 3], "config": CONFIG}
    args.update(kwargs)
    with pytest.raises(exc):
        detect(**args)


@pytest.mark.parametrize("ids,exc", [
    ([1, -2, 3], ValueError), ([1.5, 2.0], TypeError), ("some text", TypeError),
    (np.zeros((2, 2, 2), dtype=int), ValueError),
])
def test_bad_token_ids_raise(ids, exc):
    with pytest.raises(exc):
        detect(ids, CONFIG, test="z")


def test_irregular_topology_is_refused():
    m = np.array([[0, 1, 1], [1, 0, 0], [1, 0, 0]])
    topo = Topology.from_matrix(m, allow_irregular=True)
    with pytest.raises(ValueError, match="k-regular"):
        detect([1, 2, 3], ChainMarkConfig(b"k", S=3, topology=topo), test="z")
    with pytest.raises(ValueError, match="k-regular"):
        score_states(np.array([0, 1, 2]), topo)


def test_check_alpha():
    assert check_alpha(0.05) == 0.05 and check_alpha(np.float32(0.5)) == 0.5
    with pytest.raises(ValueError, match="alpha"):
        check_alpha(-0.1)


def test_score_states_validates_states_and_mask():
    topo = Topology.clockwork(5)
    with pytest.raises(ValueError, match="states"):
        score_states(np.array([0, 1, 5]), topo)
    with pytest.raises(ValueError, match="scored"):
        score_states(np.array([0, 1, 2]), topo, scored=np.array([True]))
    res = score_states(np.array([0, 1, 2, 4]), topo)
    assert res.n_hits == 2 and res.n_scored == 3
    none = score_states(np.array([0, 1, 2]), topo, scored=np.array([False, False]))
    assert none.n_scored == 0 and none.p_value == 1.0


def test_long_input_and_big_token_ids():
    ids = np.random.default_rng(5).integers(0, 2**40, 500, dtype=np.int64)
    res = detect(ids, CONFIG, test="z")
    ref = per_token_detect(ids.tolist(), b"k", clockwork_matrix(5))
    assert res.phi == ref["phi"]
    big = np.array([2**64 - 1, 2**63, 5, 2**64 - 1], dtype=np.uint64)
    res = detect(big, CONFIG, test="z")
    assert res.valid_mask.tolist() == per_token_detect(big.tolist(), b"k", clockwork_matrix(5))["valid"]


# ---------------------------------------------------------------- batches


def _same(a: DetectionResult, b: DetectionResult):
    assert a.to_dict(include_masks=True) == b.to_dict(include_masks=True)


def test_batches_equal_per_row_results():
    rng = np.random.default_rng(11)
    matrix = rng.integers(0, VOCAB, (6, 40))
    matrix[2] = walk_ids(b"k", 5, 40, rng)
    rows = detect_batch(matrix, CONFIG, test="z")
    assert isinstance(rows, list) and len(rows) == 6
    for r, res in zip(matrix, rows):
        _same(res, detect(r, CONFIG, test="z"))
    assert rows[2].is_watermarked and rows[2].phi == 1.0
    # the same rows as a list of lists, and with the distinct test (the per-row path)
    for res, r in zip(detect_batch(matrix.tolist(), CONFIG, test="z"), matrix):
        _same(res, detect(r.tolist(), CONFIG, test="z"))
    for res, r in zip(detect_batch(matrix, CONFIG, test="distinct"), matrix):
        _same(res, detect(r, CONFIG, test="distinct"))


def test_ragged_batches():
    rng = np.random.default_rng(12)
    rows = [rng.integers(0, VOCAB, n).tolist() for n in (0, 1, 2, 30, 7)]
    out = detect_batch(rows, ChainMarkConfig(b"k", S=5, topology="soft_cycle"), test="z")
    assert len(out) == 5
    for res, r in zip(out, rows):
        _same(res, detect(r, ChainMarkConfig(b"k", S=5, topology="soft_cycle"), test="z"))
    assert out[0].n_scored == 0 and out[1].n_scored == 0 and out[2].n_scored == 1
    mixed = detect_batch((np.array(rows[3]), rows[4]), CONFIG, test="z")  # a tuple of an array and a list
    _same(mixed[0], detect(rows[3], CONFIG, test="z"))
    _same(mixed[1], detect(rows[4], CONFIG, test="z"))


def test_degenerate_matrix_batches():
    assert detect_batch(np.zeros((0, 5), dtype=int), CONFIG, test="z") == [] == detect_batch([], CONFIG, test="z")
    res = detect_batch(np.array([[3], [4]]), CONFIG, test="z")
    assert [r.n_scored for r in res] == [0, 0]


@pytest.mark.parametrize("batch", [
    np.arange(40).reshape(2, 20), [[1, 2, 3], [4, 5, 6]], ([1, 2, 3], np.arange(5)), [[]], [np.arange(9)],
], ids=["2-D array", "list of lists", "tuple of a list and an array", "one empty row", "list of one array"])
def test_detect_refuses_a_batch_and_names_detect_batch(batch):
    with pytest.raises(ValueError, match="detect_batch"):
        detect(batch, CONFIG, test="z")


def test_detect_refuses_a_tensor_batch():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="detect_batch"):
        detect(torch.zeros((3, 4), dtype=torch.long), CONFIG, test="z")
    with pytest.raises(ValueError, match="detect_batch"):
        detect([torch.arange(4), torch.arange(4)], CONFIG, test="z")


@pytest.mark.parametrize("one_text,exc", [
    (np.arange(20), ValueError), ([1, 2, 3], TypeError), ((1, 2, 3), TypeError), ("some text", TypeError),
    (7, TypeError), (np.zeros((2, 2, 2), dtype=int), ValueError),
])
def test_detect_batch_refuses_one_text(one_text, exc):
    with pytest.raises(exc, match="batch"):
        detect_batch(one_text, CONFIG, test="z")


def test_detect_batch_is_exported_beside_detect():
    import chainmark

    assert {"detect", "detect_batch"} <= set(chainmark.__all__)
    assert chainmark.detect_batch is detect_batch


def test_detect_batch_checks_its_arguments_before_the_rows():
    with pytest.raises(ValueError, match="alpha"):
        detect_batch([], CONFIG, alpha=1.5, test="z")
    with pytest.raises(TypeError, match="ChainMarkConfig"):
        detect_batch([], 12345, test="z")
    with pytest.raises(ValueError, match="token_ids"):
        detect_batch([[1, 2], [3, -4]], CONFIG, test="z")
    with pytest.raises(ValueError, match="token_ids"):
        detect_batch(np.array([[1, 2], [3, 1000]]), CONFIG, vocab_size=1000, test="z")


def test_the_return_type_does_not_depend_on_the_shape():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    matrix = rng.integers(0, VOCAB, (4, 25))
    ragged = [matrix[0, :3].tolist(), matrix[1].tolist(), matrix[2, :1], torch.tensor(matrix[3])]
    singles = [np.array([], dtype=int), [5], matrix[0], matrix[0].tolist(), torch.tensor(matrix[0]),
               list(matrix[0]), tuple(torch.tensor(matrix[0]))]
    for one in singles:  # one text: always one result
        assert isinstance(detect(one, CONFIG, test="z"), DetectionResult)
    batches = [matrix, matrix.tolist(), ragged, torch.tensor(matrix), matrix[:1], matrix[:0], [], [[]]]
    for batch in batches:  # a batch: always a list, equal to per-row detect
        for test in ("z", "distinct"):
            out = detect_batch(batch, CONFIG, test=test)
            assert isinstance(out, list) and len(out) == len(batch)
            for res, row in zip(out, batch):
                assert isinstance(res, DetectionResult)
                _same(res, detect(row, CONFIG, test=test))
    from_generator = detect_batch((row for row in matrix), CONFIG, test="z")  # any iterable of rows
    for res, row in zip(from_generator, matrix, strict=True):
        _same(res, detect(row, CONFIG, test="z"))


# ---------------------------------------------------------------- distinct pairs


def test_first_occurrences_marks_each_pair_once():
    ids = np.array([4, 9, 4, 9, 4, 9, 1])
    assert first_occurrences(ids).tolist() == [True, True, False, False, False, True]
    rng = np.random.default_rng(0)
    for _ in range(20):
        ids = rng.integers(0, 6, 50)
        seen, expect = set(), []
        for pair in zip(ids[:-1].tolist(), ids[1:].tolist()):
            expect.append(pair not in seen)
            seen.add(pair)
        assert first_occurrences(ids).tolist() == expect
    huge = np.array([2**62, 5, 2**62, 5], dtype=np.int64)
    assert first_occurrences(huge).tolist() == [True, True, False]
    unsigned = np.array([4, 9, 4, 9, 1], dtype=np.uint64)
    assert first_occurrences(unsigned).tolist() == [True, True, False, True]


def test_the_distinct_test_scores_repeats_once():
    ids = [10, 20, 10, 20, 10, 20, 30]
    res = detect(ids, CONFIG, test="distinct")
    assert res.n_scored == 3 and res.n_tokens == 7
    assert res.scored_mask.tolist() == [True, True, False, False, False, True]
    assert res.n_hits == int(res.valid_mask[res.scored_mask].sum())
    plain = detect(ids, CONFIG, test="z")
    assert plain.n_scored == 6
    # with no repeated pair the distinct test is the z-test
    fresh = np.random.default_rng(1).permutation(VOCAB)[:100]
    _same(detect(fresh, CONFIG, test="distinct"), detect(fresh, CONFIG, test="z"))


def _z_test_fpr(m, p0, alpha):
    """Exact false-positive rate of the one-sided z-test on m iid Bernoulli(p0) indicators."""
    c = np.arange(m + 1)
    z = (c / m - p0) / math.sqrt(p0 * (1 - p0) / m)
    return float(binom.pmf(c, m, p0)[norm.sf(z) < alpha].sum())


def test_null_false_positive_rate_on_random_tokens():
    # iid random tokens are the null of the paper's lemma: the FPR must be the z-test's own
    rng = np.random.default_rng(2024)
    trials, n, alpha = 4000, 200, 0.01
    rows = detect_batch(rng.integers(0, VOCAB, (trials, n)), ChainMarkConfig(b"null key", S=5), alpha=alpha, test="z")
    hits = sum(r.is_watermarked for r in rows)
    expected = _z_test_fpr(n - 1, 0.2, alpha)
    lo, hi = binom.interval(0.999, trials, expected)
    assert lo <= hits <= hi, (hits, expected * trials)


def test_the_distinct_test_restores_the_null_on_repetitive_text():
    # a 20-token phrase repeated 10 times: its 20 distinct pairs are counted 10 times each,
    # so plain phi has ~10x the null variance; scoring each pair once restores the test
    rng = np.random.default_rng(77)
    trials, alpha = 2000, 0.01
    texts = []
    for _ in range(trials):
        block = rng.choice(VOCAB, 20, replace=False)
        texts.append(np.tile(block, 10))
    plain = sum(r.is_watermarked for r in detect_batch(np.array(texts), CONFIG, alpha=alpha, test="z"))
    distinct = sum(r.is_watermarked for r in detect_batch(np.array(texts), CONFIG, alpha=alpha,
                                                          test="distinct"))
    exp_distinct = _z_test_fpr(20, 0.2, alpha)  # 19 in-phrase pairs + the wrap-around pair
    lo, hi = binom.interval(0.999, trials, exp_distinct)
    assert lo <= distinct <= hi, (distinct, exp_distinct * trials)
    # plain counting: phi equals the 20-pair share up to one pair, so its FPR is that of a
    # test on 20 indicators judged as if there were 199: P(z_20 > 2.326 / sqrt(199/20)) ~ 0.2
    assert plain > 10 * hi


# ---------------------------------------------------------------- detect_text


class CharTokenizer:
    """A tiny tokenizer (one id per character) to test the text path without a model."""

    def __len__(self):
        return 0x20000  # covers the characters the test uses

    def __call__(self, text, add_special_tokens=True):
        ids = [ord(c) for c in text]
        return {"input_ids": ([1] if add_special_tokens else []) + ids}


def test_detect_text_tokenizes_without_special_tokens():
    tok = CharTokenizer()
    text = "Ünïcödé text, with emoji 🙂 and more."
    res = detect_text(text, tok, CONFIG, test="z")
    _same(res, detect([ord(c) for c in text], CONFIG, test="z"))
    assert detect_text("", tok, CONFIG, test="z").n_scored == 0
    assert detect_text("x", tok, CONFIG, test="z").p_value == 1.0
    with pytest.raises(TypeError, match="text"):
        detect_text(b"bytes", tok, CONFIG, test="z")


# ---------------------------------------------------------------- LM-aware detector


def test_llr_weights_and_null_moments():
    q = np.array([0.0, 0.5, 0.95])
    pi, w1, w0 = _llr_weights(q, 0.2)
    assert pi.tolist() == pytest.approx([0.2, 0.6, 0.96])
    assert w1[0] == 0.0 and w0[0] == 0.0  # an ungated step carries no evidence
    assert w1[2] == pytest.approx(math.log(0.96 / 0.2)) and w0[2] == pytest.approx(math.log(0.04 / 0.8))
    with pytest.raises(ValueError):
        _llr_weights(np.array([1.0]), 0.2)
    q = np.random.default_rng(0).uniform(0, 0.95, 64)
    draws = _simulate_llr_null(q, 0.2, n_null=20000, seed=1)
    _, w1, w0 = _llr_weights(q, 0.2)
    mean = (0.2 * w1 + 0.8 * w0).sum()
    sd = math.sqrt((0.16 * (w1 - w0) ** 2).sum())
    assert abs(draws.mean() - mean) < 5 * sd / math.sqrt(draws.size)
    assert draws.std() == pytest.approx(sd, rel=0.03)  # SE of an SD from 20000 draws ~0.5%


def test_gate_probabilities():
    gate = Gate("high_entropy", 2.0)
    signal = np.array([1.0, 1.9, 2.1, 5.0, np.nan])
    hard = gate_probabilities(signal, gate, eps=0.05)
    assert hard.tolist() == [0.0, 0.0, 0.95, 0.95, 0.0]
    soft = gate_probabilities(signal, gate, width=0.5, eps=0.01)
    assert np.all(np.diff(soft[:4]) > 0) and soft[4] == 0.0 and soft.max() <= 0.99
    assert soft[1] < 0.5 < soft[2]
    low = gate_probabilities(np.array([0.1, 0.9]), Gate("top2_gap", 0.5), width=0.1)
    assert low[0] > 0.5 > low[1]
    assert gate_probabilities(np.array([3.0]), Gate("all", 0.0), eps=0.1).tolist() == [0.9]
    with pytest.raises(ValueError, match="width"):
        gate_probabilities(signal, gate, width=-1)
    with pytest.raises(ValueError, match="eps"):
        gate_probabilities(signal, gate, eps=0)
    with pytest.raises(TypeError, match="gate"):
        gate_probabilities(signal, "high_entropy")


def _synthetic_watermark(key, n, q_true, rng):
    """Ids whose gated steps (q_true) walk the clockwork cycle and the others are free."""
    table = state_table(key, VOCAB, 5)
    by_state = [np.flatnonzero(table == s) for s in range(5)]
    ids = [int(rng.integers(VOCAB))]
    for i in range(n - 1):
        if rng.random() < q_true[i]:
            ids.append(int(rng.choice(by_state[(table[ids[-1]] + 1) % 5])))
        else:
            ids.append(int(rng.integers(VOCAB)))
    return ids


def test_lr_detector_power_and_size():
    rng = np.random.default_rng(8)
    key, n, alpha = b"lr", 32, 0.05
    config = ChainMarkConfig(key)
    g = (rng.random(n - 1) < 0.5).astype(float)  # which steps the gate opened
    q = np.minimum(g, 0.95)
    # watermarked: gated steps walk the cycle -> detected every time at this length
    for _ in range(20):
        ids = _synthetic_watermark(key, n, g, rng)
        assert lr_detect(ids, config, q, null=SimulatedNull(alpha=alpha, n_null=2000)).is_watermarked
    # null: random ids, p-value is super-uniform (the +1 correction and ties only make it larger)
    trials = 400
    hits = sum(lr_detect(rng.integers(0, VOCAB, n), config, q,
                         null=SimulatedNull(alpha=alpha, n_null=2000, seed=i)).is_watermarked
               for i in range(trials))
    assert hits <= binom.ppf(0.999, trials, alpha)


def test_lr_detector_survives_an_illegal_gated_step():
    rng = np.random.default_rng(9)
    key = b"lr"
    g = np.ones(40)
    ids = _synthetic_watermark(key, 41, g, rng)
    config = ChainMarkConfig(key)
    ids[20] = next(t for t in range(VOCAB) if not detect([ids[19], t], config, test="z").valid_mask[0]
                   and not detect([t, ids[21]], config, test="z").valid_mask[0])
    res = lr_detect(ids, config, np.full(40, 0.95), null=SimulatedNull(n_null=2000))
    assert math.isfinite(res.llr) and res.n_hits == 38 and res.is_watermarked


def test_lr_detect_edge_cases_and_errors():
    q = np.zeros(0)
    config = ChainMarkConfig(b"k")
    res = lr_detect([5], config, q)
    assert res.p_value == 1.0 and not res.is_watermarked and res.n_scored == 0
    json.dumps(res.to_dict())
    with pytest.raises(ValueError, match="gate_probs"):
        lr_detect([1, 2, 3], config, [0.5])
    with pytest.raises(ValueError, match="n_null"):
        lr_detect([1, 2, 3], config, [0.5, 0.5], null=SimulatedNull(n_null=10))
    with pytest.raises(TypeError, match=r"lr_detect takes one ChainMarkConfig .*pass ChainMarkConfig\(key, S="):
        lr_detect([1, 2, 3], b"k", [0.5, 0.5])  # the key alone, as before the configuration carried it
    with pytest.raises(TypeError, match="ChainMarkConfig and S"):
        lr_detect([1, 2, 3], config, [0.5, 0.5], S=5)


class FakeLM:
    """A 'model' whose next-token entropy after position p is log(p + 2) (uniform over p + 2 tokens)."""

    def __init__(self, vocab=64):
        import torch

        self.vocab = vocab
        self._p = torch.nn.Parameter(torch.zeros(1))

    def parameters(self):
        return iter([self._p])

    def __call__(self, input_ids):
        import torch

        L = input_ids.shape[1]
        logits = torch.full((1, L, self.vocab), -1e9)
        for p in range(L):
            logits[0, p, : p + 2] = 0.0

        class Out:
            pass

        out = Out()
        out.logits = logits
        return out


def test_teacher_forced_signal_alignment():
    lm = FakeLM()
    ids = [7, 8, 9, 10]
    # with a 3-token prefix, token j is predicted from position 2 + j
    sig = teacher_forced_signal(lm, ids, "high_entropy", prefix_ids=[1, 2, 3])
    assert sig == pytest.approx([math.log(2 + 2 + j) for j in range(4)], rel=1e-5)
    bare = teacher_forced_signal(lm, ids, "high_entropy")
    assert math.isnan(bare[0])
    assert bare[1:] == pytest.approx([math.log(j + 1) for j in range(1, 4)], rel=1e-5)
    assert teacher_forced_signal(lm, [], "high_entropy").size == 0


# ---------------------------------------------------------------- on the real model


@pytest.fixture(scope="module")
def generations(model_and_tokenizer):
    from chainmark.embed import Sampling, generate

    model, tok = model_and_tokenizer
    prompts = [f"Explain {t} in a comprehensive way." for t in
               ("photosynthesis", "the water cycle", "volcanoes", "the immune system")]
    # no min_new_tokens: it masks EOS before the gate sees the logits, which teacher forcing would not
    plain = generate(model, tok, prompts, None, sampling=Sampling(max_new_tokens=48, batch_size=4))
    gate = Gate.calibrate("high_entropy", 0.5, np.concatenate([g.entropy for g in plain]))
    key = b"test key for the detector"
    cfg = ChainMarkConfig(key=key, S=5, rho=0.5)
    marked = generate(model, tok, prompts, cfg, gate, sampling=Sampling(max_new_tokens=48, batch_size=4))
    return key, gate, plain, marked, prompts


@pytest.mark.slow
def test_watermarked_generations_are_detected(generations, model_and_tokenizer):
    key, _, plain, marked, _ = generations
    _, tok = model_and_tokenizer
    config = ChainMarkConfig(key, S=5)
    for g in marked:
        res = detect(g.token_ids, config, alpha=0.01, test="z")
        assert res.is_watermarked, res
        assert detect_text(g.text, tok, config, test="z").z > 2.326
    flagged = sum(detect(g.token_ids, config, test="z").is_watermarked for g in plain)
    assert flagged <= 1


@pytest.mark.slow
def test_teacher_forcing_reproduces_the_generation_gate(generations, model_and_tokenizer):
    from chainmark.embed import chat_prompt

    key, gate, _, marked, prompts = generations
    model, tok = model_and_tokenizer
    for g, prompt in zip(marked, prompts):
        prefix = tok(chat_prompt(tok, prompt), add_special_tokens=False)["input_ids"]
        sig = teacher_forced_signal(model, g.token_ids, "high_entropy", prefix_ids=prefix)
        assert np.allclose(sig, g.entropy, atol=2e-3)
        res = lr_detect(g.token_ids, ChainMarkConfig(key), gate_probabilities(sig[1:], gate),
                        null=SimulatedNull(n_null=5000))
        assert res.is_watermarked


@pytest.mark.slow
def test_a_generation_carries_its_config_to_detect(generations):
    key, _, plain, marked, _ = generations
    cfg = marked[0].config
    assert cfg.key == key and all(g.config is cfg for g in marked) and all(g.config is None for g in plain)
    for g in marked:
        _same(detect(g, test="z"), detect(g.token_ids, cfg, test="z"))
    for res, g in zip(detect_batch(marked, test="z"), marked, strict=True):
        _same(res, detect(g.token_ids, cfg, test="z"))
    with pytest.raises(ValueError, match="carries no configuration"):
        detect(plain[0], test="z")
    _same(detect(plain[0], cfg, test="z"), detect(plain[0].token_ids, cfg, test="z"))  # an unwatermarked text, tested under cfg


def _generation(ids, config=None):
    from chainmark.embed import Generation

    n = len(ids)
    return Generation("p", list(ids), "t", [1.0] * n, [0.5] * n, [True] * n, [True] * n, None, None, config=config)


def test_detect_takes_a_generation_in_place_of_ids_and_config():

    cfg = ChainMarkConfig(b"k" * 16, S=7, topology="soft_cycle")
    ids = walk_ids(b"k" * 16, 7, 60, np.random.default_rng(5), offsets=(1, 2))  # a soft-cycle walk
    g = _generation(ids, cfg)
    _same(detect(g, test="z"), detect(ids, cfg, test="z"))
    _same(detect(g, test="exact"), detect(ids, cfg, test="exact"))
    other = ChainMarkConfig(b"other")
    _same(detect(g, other, test="z"), detect(ids, other, test="z"))  # a config given wins over the generation's
    with pytest.raises(TypeError, match=r"pass ChainMarkConfig\(key, S=.*\(got NoneType and S\)"):
        detect(g, S=5, test="z")
    with pytest.raises(ValueError, match="carries no configuration.*pass the ChainMarkConfig"):
        detect(_generation(ids), test="z")
    with pytest.raises(TypeError, match="pass the ChainMarkConfig"):
        detect(ids, test="z")  # only a Generation carries its own configuration
    rows = [g, _generation(ids[:30], cfg)]
    for res, row in zip(detect_batch(rows, test="z"), rows, strict=True):
        _same(res, detect(row.token_ids, cfg, test="z"))
    with pytest.raises(ValueError, match="different configurations"):
        detect_batch([g, _generation(ids, ChainMarkConfig(b"j" * 16, S=7))], test="z")
    with pytest.raises(TypeError, match="every row is a Generation"):
        detect_batch([g, ids], test="z")
    assert "config" not in repr(g) and g == _generation(ids)  # not shown, not compared


# ---------------------------------------------------------------- one verdict type, one decision rule

RESULT_KEYS = ["phi", "z", "p_value", "log_p_value", "is_watermarked", "n_tokens", "n_transitions", "n_valid",
               "S", "k", "p0", "alpha"]
AUDIT_KEYS = ["n_tokens", "n_transitions", "n_valid", "phi", "z", "p_value", "threshold", "is_watermarked",
              "decision", "S", "k", "topology", "alpha", "distinct_pairs", "test", "tokenizer", "key_fingerprint"]


def test_a_detection_result_is_a_verdict_under_one_set_of_names():
    """Every detector's verdict has the verdict's names only (n_scored, n_hits, is_watermarked, p0): the older
    attribute names are gone; the dictionaries keep theirs (RESULT_KEYS, AUDIT_KEYS), which are formats."""
    res = detect(walk_ids(b"k", 5, 40, np.random.default_rng(3)), CONFIG, test="z")
    assert isinstance(res, Verdict)
    assert (res.n_scored, res.n_hits, res.is_watermarked, res.p0) == (39, 39, True, 0.2)
    for name in ("n_transitions", "n_valid", "decision"):
        assert not hasattr(res, name), name
    d = res.to_dict()
    assert (d["n_transitions"], d["n_valid"]) == (res.n_scored, res.n_hits)
    lr = lr_detect(np.arange(30), ChainMarkConfig(b"k"), np.full(29, 0.3), null=SimulatedNull(n_null=200))
    assert isinstance(lr, Verdict) and not hasattr(lr, "n_transitions") and not hasattr(lr, "decision")
    assert lr.n_scored == 29 and lr.phi == lr.n_hits / 29


def test_to_dict_writes_the_published_forms():
    res = detect(walk_ids(b"k", 5, 40, np.random.default_rng(4)), CONFIG, test="z")
    assert list(res.to_dict()) == RESULT_KEYS
    assert list(res.to_dict(include_masks=True)) == RESULT_KEYS + ["valid_mask", "scored_mask"]
    assert json.loads(json.dumps(res.to_dict(include_masks=True))) == res.to_dict(include_masks=True)
    record = res.to_dict("record")  # what a stored record keeps, field for field
    assert record == {"phi": res.phi, "z": res.z, "p_value": res.p_value, "decision": res.is_watermarked,
                      "n_scored": res.n_scored}
    assert list(record) == ["phi", "z", "p_value", "decision", "n_scored"]
    assert type(record["decision"]) is bool and type(record["n_scored"]) is int
    regime = Regime(threshold=2.0, n_min=50, key_fingerprint="fp")
    audit = res.to_dict("audit", regime=regime)  # a row of `chainmark detect --json`, after "file"
    assert list(audit) == AUDIT_KEYS
    assert (audit["threshold"], audit["is_watermarked"], audit["decision"]) == (2.0, False, "too short")
    assert audit["key_fingerprint"] == "fp" and audit["topology"] == "clockwork"
    with pytest.raises(ValueError, match="form"):
        res.to_dict("nonsense")
    with pytest.raises(ValueError, match="regime"):
        res.to_dict("audit")
    lr = lr_detect(np.arange(30), ChainMarkConfig(b"k"), np.full(29, 0.3), null=SimulatedNull(n_null=200))
    assert list(lr.to_dict()) == ["llr", "critical_value", "p_value", "z", "is_watermarked", "n_tokens",
                                  "n_transitions", "n_valid", "expected_gated", "p0", "alpha", "n_null"]


def test_the_decision_rule_at_its_boundaries():
    assert not decide(z=9.0, p_value=0.01, alpha=0.01)  # p = alpha is not below alpha
    assert decide(z=0.0, p_value=np.nextafter(0.01, 0.0), alpha=0.01)
    assert not decide(z=2.5, p_value=0.0, alpha=0.01, threshold=2.5)  # a threshold replaces p < alpha
    assert decide(z=np.nextafter(2.5, 3.0), p_value=1.0, alpha=0.01, threshold=2.5)
    assert decide(z=np.array([1.0, 2.0, 3.0, np.nan]), threshold=2.0).tolist() == [False, False, True, False]
    with pytest.raises(ValueError, match="p_value and alpha"):
        decide(z=1.0)
    rows = np.random.default_rng(5).integers(0, VOCAB, (20, 30))
    for res in detect_batch(rows, ChainMarkConfig(b"k", S=3), alpha=0.2, test="z"):
        assert res.is_watermarked == decide(z=res.z, p_value=res.p_value, alpha=0.2)


def test_detect_takes_the_configuration_it_was_generated_with():
    """detect(ids, config) reads key, S and topology from the configuration and takes nothing in its place: a bare
    key, or S or the topology beside it, is a TypeError that says what to pass. The regime published from the
    configuration carries everything but the key."""
    from chainmark.auditor.regime import Regime

    key = b"k" * 32
    config = ChainMarkConfig(key, S=7, rho=0.5, topology="soft_cycle")
    ids = np.random.default_rng(3).integers(0, 5000, 300)
    assert [r.z for r in detect_batch([ids, ids[:50]], config, test="z")] == [detect(ids, config, test="z").z, detect(ids[:50], config, test="z").z]
    assert detect(ids, config, test="z").z != detect(ids, ChainMarkConfig(key), test="z").z  # S = 5 and the clockwork by default
    for loose in (lambda: detect(ids, key, test="z"), lambda: detect(ids, key, 7, "soft_cycle", test="z"), lambda: detect(ids, config, S=7, test="z"),
                  lambda: detect(ids, topology="soft_cycle", test="z"), lambda: detect_batch([ids], key, S=7, test="z"),
                  lambda: detect_batch([ids], config, topology="soft_cycle", test="z"),
                  lambda: detect_text("x", CharTokenizer(), key, 7, test="z")):
        with pytest.raises(TypeError, match=r"takes one ChainMarkConfig .*pass ChainMarkConfig\(key, S="):
            loose()
    regime = Regime.from_config(config, alpha=0.001)
    assert (regime.S, regime.topology, regime.rho, regime.alpha) == (7, "soft_cycle", 0.5, 0.001)
    assert regime.key_fingerprint == config.fingerprint and "k" * 32 not in repr(regime)


def test_transition_statistics_is_one_function_for_scalars_and_arrays():
    """The detector, the stream and the corpus audit share one switch over the tests; its array form gives
    the scalar form's numbers bit for bit (and m = 0 is no evidence)."""
    from chainmark.significance import transition_statistics

    rng = np.random.default_rng(5)
    m = rng.integers(0, 400, 200)
    c = np.minimum(m, rng.binomial(m, 0.4))
    for test in ("z", "distinct", "exact"):
        phi, z, p = transition_statistics(c, m, 0.2, test)
        for i in range(m.size):
            assert (phi[i], z[i], p[i]) == transition_statistics(int(c[i]), int(m[i]), 0.2, test)
    assert transition_statistics(0, 0, 0.2, "exact") == (0.0, 0.0, 1.0)
    assert transition_statistics(3, 10, 0.2, "z")[2] != transition_statistics(3, 10, 0.2, "exact")[2]


def test_text_given_to_detect_points_to_detect_text():
    """``detect`` scores ids (or a Generation); text is a TypeError that names the call for text."""
    config = ChainMarkConfig(b"k" * 32, S=5)
    with pytest.raises(TypeError, match=r"detect_text\(text, tokenizer, config\)"):
        detect("some published text", config, test="z")


def test_the_api_and_the_command_line_default_to_the_same_test(tmp_path, capsys):
    """One default test: ``chainmark.detect`` and its siblings, the streaming detector, the key-set detector, the
    key audit and ``chainmark detect`` all run :data:`DEFAULT_TEST` (the exact test) when no test is named."""
    import inspect

    from chainmark import cli
    from chainmark.auditor.keyaudit import CertificationTarget
    from chainmark.auditor.keysets import detect_over_keys
    from chainmark.auditor.stream import StreamingDetector
    from chainmark.auditor.tokenizer import load_tokenizer
    from chainmark.significance import DEFAULT_TEST

    assert DEFAULT_TEST == "exact"
    tokenizer = load_tokenizer()
    text = "The cat sat on the mat, and the cat sat on the mat again, as cats do. " * 4
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    config = ChainMarkConfig(b"one-default-test", S=5)
    named = detect(ids, config, test=DEFAULT_TEST)
    assert named.n_scored < len(ids) - 1  # the exact test scores new tokens only: a text with repeats tells them apart
    for result in (detect(ids, config), detect_batch([ids], config)[0], detect_text(text, tokenizer, config)):
        assert (result.n_scored, result.n_hits, result.p_value) == (named.n_scored, named.n_hits, named.p_value)
    streaming = StreamingDetector(config, vocab_size=len(tokenizer))
    streaming.update(ids)
    assert streaming.test == DEFAULT_TEST and streaming.result().p_value == named.p_value
    assert inspect.signature(detect_over_keys).parameters["test"].default == DEFAULT_TEST
    assert CertificationTarget().test == DEFAULT_TEST
    key, doc = tmp_path / "k.key", tmp_path / "t.txt"
    from chainmark.auditor.keyfiles import write_key_file

    write_key_file(key, config.key)
    doc.write_text(text, "utf-8")
    assert cli.main(["detect", "--key-file", str(key), "--S", "5", "--json", str(doc)]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["test"] == DEFAULT_TEST and row["n_transitions"] == named.n_scored
    assert math.isclose(row["p_value"], named.p_value, rel_tol=1e-12)
