"""A text's own null over a random key (chainmark.auditor.repetition): exact moments, the predicted FPR, the warning."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from chainmark.auditor import repetition
from chainmark.auditor.repetition import null_fpr, pair_counts, repetition_warning, text_null
from chainmark.topology import Topology, cycle_topology

Z_ALPHA = float(norm.isf(0.01))
B = 20_000


def simulate(ids: np.ndarray, topo: Topology, test: str = "z", seed: int = 0) -> tuple[float, float, float]:
    """Flag rate of the z rule at z_0.01, mean and variance of the legal count over B uniformly random keys:
    every distinct token of the text gets an independent uniform state."""
    rng = np.random.default_rng(seed)
    tokens, inverse = np.unique(ids, return_inverse=True)
    states = rng.integers(0, topo.S, size=(B, tokens.size))[:, inverse]
    legal = topo.matrix[states[:, :-1], states[:, 1:]]
    if test == "distinct":
        codes = ids[:-1].astype(np.int64) * (int(ids.max()) + 1) + ids[1:]
        legal = legal[:, np.sort(np.unique(codes, return_index=True)[1])]
    n, p0 = legal.shape[1], topo.p0
    count = legal.sum(axis=1)
    z = (count / n - p0) / math.sqrt(p0 * (1 - p0) / n)
    return float((z > Z_ALPHA).mean()), float(count.mean()), float(count.var())


def repetitive_texts() -> dict[str, np.ndarray]:
    """Texts that repeat: 'a b + 3 random tokens' x 60, phrases looped, code-like lines."""
    rng = np.random.default_rng(7)
    phrases = [rng.integers(100, 5000, int(rng.integers(3, 7))) for _ in range(4)]
    return {
        "a b + 3 random x 60": np.concatenate([np.r_[1, 2, rng.integers(100, 50_000, 3)] for _ in range(60)]),
        "four phrases looped": np.concatenate([phrases[int(i)] for i in rng.integers(0, 4, 40)]),
        "one phrase in half the lines": np.concatenate([phrases[0] if rng.random() < 0.5 else
                                                        rng.integers(100, 50_000, 5) for _ in range(40)]),
        "a b alternating": np.tile([1, 2], 100),
        "code-like lines": np.concatenate([np.r_[7, 8, 9, rng.integers(100, 300, 2)] for _ in range(80)]),
    }


def test_pair_counts_are_the_texts_distinct_transitions_with_multiplicities():
    a, b, m = pair_counts([5, 6, 5, 6, 6])
    assert list(zip(a.tolist(), b.tolist(), m.tolist())) == [(5, 6, 2), (6, 5, 1), (6, 6, 1)]
    assert pair_counts([3])[2].size == 0


@pytest.mark.parametrize("topo", [Topology.clockwork(5), Topology.soft_cycle(5), Topology.clockwork(3),
                                  Topology.clockwork(2)], ids=lambda t: f"{t.name}-{t.S}")
def test_the_moments_are_exact_and_the_fpr_matches_simulation_on_repetitive_texts(topo):
    for name, ids in repetitive_texts().items():
        for test in ("z", "distinct"):
            null = text_null(ids, topo, test)
            rate, mean, var = simulate(ids, topo, test)
            # the moments are exact: within a few standard errors of the simulated ones
            assert abs(null.mean - mean) <= 4 * math.sqrt(null.variance / B) + 1e-9, (name, test)
            assert abs(null.variance - var) <= 0.06 * null.variance + 1e-9, (name, test)
            if topo.S == 2:  # with two states every cycle of the token graph ties its pairs (see the module)
                continue
            # the predicted false-positive rate lies within simulation error of the measured one
            predicted = null_fpr(null, topo.p0, Z_ALPHA)
            se = math.sqrt(max(predicted * (1 - predicted), 1e-4) / B)
            assert abs(predicted - rate) <= 4 * se, (name, test, predicted, rate)


def test_a_repeated_pair_inflates_the_z_tests_rate_twenty_fold_and_the_warning_says_so():
    ids = repetitive_texts()["a b + 3 random x 60"]
    topo = Topology.clockwork(5)
    null = text_null(ids, topo)
    share = 1 - len(set(zip(ids[:-1].tolist(), ids[1:].tolist()))) / (ids.size - 1)
    assert 0.19 < share < 0.2 and null.variance_ratio > 10
    note, rate = repetition_warning(null, share, ids.size - 1, ids.size - 1, "z", Z_ALPHA, 0.01, topo.p0)
    assert note is not None and "20.0% of the time" in note and rate == pytest.approx(0.2, abs=0.01)
    # the old bound, (n - 1) / d, would have said 3.0% here and stayed silent
    assert norm.sf(Z_ALPHA * math.sqrt(1 - share)) < 0.02
    # the distinct test counts the pair once: its rate stays near alpha and nothing is said
    distinct = text_null(ids, topo, "distinct")
    assert repetition_warning(distinct, share, ids.size - 1, 240, "distinct", Z_ALPHA, 0.01, topo.p0)[0] is None


def test_without_repeats_the_null_is_the_nominal_one_and_nothing_is_said():
    ids = np.arange(300)
    null = text_null(ids, Topology.clockwork(5))
    assert null.mean == pytest.approx(0.2 * 299) and null.variance_ratio == pytest.approx(1.0)
    note, rate = repetition_warning(null, 0.0, 299, 299, "z", Z_ALPHA, 0.01, 0.2)
    assert note is None and rate == pytest.approx(0.01, rel=0.35)  # the binomial tail at z_0.01 itself
    assert null.z_standardised(int(round(null.mean))) == pytest.approx(0.0, abs=0.05)


def test_the_exact_test_needs_no_null_and_the_distinct_test_names_its_scored_share():
    note, rate = repetition_warning(None, 0.8, 199, 1, "exact", Z_ALPHA, 0.01, 0.2)
    assert rate is None and "scores only the transitions that reach a new token, 1 here" in note
    with pytest.raises(ValueError, match="exact test's null"):
        text_null([1, 2, 3], Topology.clockwork(5), "exact")


def test_self_pairs_and_reversed_pairs_follow_the_topology():
    # "a a a ..." under a cycle: a state never follows itself, so the count is 0 under every key
    null = text_null(np.zeros(50, dtype=int), Topology.clockwork(5))
    assert null.mean == 0 and null.variance == 0 and null_fpr(null, 0.2, Z_ALPHA) == 0
    # a pair and its reverse can both be legal only when S = 2 (the clockwork is then symmetric)
    two = text_null(np.tile([1, 2], 50), Topology.clockwork(2))
    assert two.variance == pytest.approx(0.25 * 99**2)  # both legal or both not: all or nothing
    irregular = Topology.from_matrix(np.array([[0, 1, 1], [0, 0, 1], [1, 0, 0]]), allow_irregular=True)
    with pytest.raises(ValueError, match="k-regular"):
        text_null([1, 2, 3], irregular)
    assert text_null([1, 2, 3], cycle_topology(7, 3)).mean == pytest.approx(2 * 3 / 7)


def test_a_long_texts_null_keeps_its_largest_groups_exact_and_the_rest_normal(monkeypatch):
    # forced onto the long-text path, the repetitive texts' rates stay within simulation error
    topo = Topology.clockwork(5)

    def long_path_null(ids: np.ndarray):
        with monkeypatch.context() as patch:
            patch.setattr(repetition, "_EXACT_UP_TO", 10)
            return text_null(ids, topo)

    for name, ids in repetitive_texts().items():
        exact = text_null(ids, topo)
        long_path = long_path_null(ids)
        assert long_path.pmf is None and long_path.variance == exact.variance and long_path.mean == exact.mean
        rate, _, _ = simulate(ids, topo)
        predicted = null_fpr(long_path, topo.p0, Z_ALPHA)
        se = math.sqrt(max(predicted * (1 - predicted), 1e-4) / B)
        assert abs(predicted - rate) <= 4 * se, (name, predicted, rate, null_fpr(exact, topo.p0, Z_ALPHA))
    # no repeats: the normal rest alone, close to the binomial tail
    plain = long_path_null(np.arange(5000))
    assert null_fpr(plain, 0.2, Z_ALPHA) == pytest.approx(null_fpr(text_null(np.arange(5000), topo), 0.2, Z_ALPHA),
                                                           abs=0.003)


def test_the_predicted_rate_matches_simulation_on_the_most_repetitive_reference_replies():
    from cmlab.harness import reference
    from chainmark.auditor.tokenizer import load_tokenizer

    tokenizer = load_tokenizer()
    texts = [np.array(tokenizer(r["output"], add_special_tokens=False)["input_ids"])
             for r in reference.load_texts("null")]
    texts = [t for t in texts if t.size > 20]

    def share(ids: np.ndarray) -> float:
        return 1 - len(set(zip(ids[:-1].tolist(), ids[1:].tolist()))) / (ids.size - 1)

    topo = Topology.clockwork(5)
    for ids in sorted(texts, key=share, reverse=True)[:4]:
        null = text_null(ids, topo)
        rate, mean, var = simulate(ids, topo)
        predicted = null_fpr(null, topo.p0, Z_ALPHA)
        se = math.sqrt(max(predicted * (1 - predicted), 1e-4) / B)
        assert null.variance_ratio > 5 and predicted > 0.1  # replies that loop: far above alpha
        assert abs(predicted - rate) <= 4 * se, (share(ids), predicted, rate)
        assert abs(null.variance - var) <= 0.06 * null.variance
