"""Tests for the context-keyed variant (cmlab.comparison.context_keyed): a token's state from the key and its
predecessor. Its states are ChainMark's partition of pair codes under a derived key; the exact test on pair codes
holds its size over random keys on any text; a substitution breaks three transitions, (1 - delta)^3; the processor
forces only legal tokens; the stealing adversary's attack on pairs learns a small vocabulary's pairs but its
generator forger forges only with the pairs it has seen. The committed measurement covers the reference run."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from chainmark.config import ChainMarkConfig
from chainmark.keys import hkdf
from chainmark.partition import state_of
from cmlab.comparison import context_keyed as CK
from cmlab.comparison.attacks import Substitution
from cmlab.harness.stealing import reference_config

S = 5
CONFIG = ChainMarkConfig(hkdf(b"context-keyed tests", b"chainmark/v1/keys"), S=S, rho=0.5)


def walk(config: ChainMarkConfig, n: int, vocab: int, rng: np.random.Generator, forced: float = 1.0) -> list[int]:
    """A text that walks the pairs' cycle at a share ``forced`` of its positions (a random legal token there, a
    random token elsewhere): what the processor writes, without a model."""
    pairs = CK.context_config(config)
    ids = [int(rng.integers(vocab)), int(rng.integers(vocab))]
    while len(ids) < n:
        x, a = ids[-2], ids[-1]
        if rng.random() < forced:
            want = (state_of((x << 32) | a, pairs.key, S) + 1) % S
            legal = [b for b in rng.permutation(vocab)[:64] if state_of((a << 32) | int(b), pairs.key, S) == want]
            ids.append(int(legal[0]) if legal else int(rng.integers(vocab)))  # none legal: sample freely
        else:
            ids.append(int(rng.integers(vocab)))
    return ids


def test_pair_codes_and_states_are_chainmarks_partition_of_pairs_under_a_derived_key():
    ids = [7, 3, 3, 49151]
    codes = CK.pair_codes(ids)
    assert codes.tolist() == [(7 << 32) | 3, (3 << 32) | 3, (3 << 32) | 49151]
    pairs = CK.context_config(CONFIG)
    assert pairs.key == hkdf(CONFIG.key, CK._CONTEXT_INFO) != CONFIG.key
    assert (pairs.S, pairs.rho, pairs.topology) == (CONFIG.S, CONFIG.rho, CONFIG.topology)
    assert CK._context_states(ids, CONFIG).tolist() == [state_of(int(c), pairs.key, S) for c in codes]
    assert CK.pair_codes([5]).size == 0 and CK.pair_codes([]).size == 0


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="below 2\\*\\*32"):
        CK.pair_codes([1, 2**32])
    with pytest.raises(TypeError, match="ChainMarkConfig"):
        CK.context_config(b"a bare key")
    with pytest.raises(ValueError, match="delta"):
        CK.survival(1.5)
    with pytest.raises(ValueError, match="two tokens"):
        CK.steal_pairs([[1]], [[2]], S, 0.5)


def test_the_variant_detects_its_own_walk_and_chainmark_does_not():
    rng = np.random.default_rng(0)
    text = walk(CONFIG, 120, 5000, rng, forced=0.5)
    assert CK.context_detect(text, CONFIG).p_value < 1e-6
    from chainmark.detection import detect

    assert detect(text, CONFIG, test="exact").p_value > 1e-3       # ChainMark's states see no walk there
    other = ChainMarkConfig(hkdf(b"another key", b"chainmark/v1/keys"), S=S)
    assert CK.context_detect(text, other).p_value > 1e-3           # nor does another key's variant


@pytest.mark.parametrize("text", [list(range(1, 150)), [1, 2, 3, 4] * 40, [9, 9, 9, 8] * 30 + list(range(50))],
                         ids=["distinct", "a loop", "repeats then distinct"])
def test_the_exact_test_on_pairs_holds_its_size_over_random_keys_on_any_text(text):
    """Over 3,000 random keys the exact test at alpha = 5% flags a fixed text at most 5% of the time (a one-sided
    binomial check at 1e-4): the exact test's argument needs only that distinct pairs get independent uniform
    states, which a random key gives."""
    alpha, keys = 0.05, 3000
    flags = sum(CK.context_detect(text, ChainMarkConfig(hkdf(f"null key {i}".encode(), b"t"), S=S), alpha)
                .is_watermarked for i in range(keys))
    assert binom.sf(flags - 1, keys, alpha) > 1e-4, flags


def test_a_substitution_breaks_three_transitions():
    """On long walks forced everywhere, random substitution at rate delta leaves a share of valid transitions
    within 0.01 of (1 - delta)^3 + (1 - (1 - delta)^3) / S; ChainMark's law (1 - delta)^2 is far off."""
    rng = np.random.default_rng(1)
    texts = [walk(CONFIG, 400, 20000, rng) for _ in range(10)]
    for delta in (0.1, 0.3):
        attack = Substitution(delta, 20000, seed=2)
        edited = [attack.edit(t, seed=np.random.SeedSequence([2, i])) for i, t in enumerate(texts)]
        phi = np.mean([CK.context_detect(t, CONFIG, test="z").phi for t in edited])
        s = CK.survival(delta)
        assert abs(phi - (s + (1 - s) / S)) < 0.01, (delta, phi)
        s2 = CK.survival(delta, context=False)
        assert abs(phi - (s2 + (1 - s2) / S)) > 0.03
    assert CK.survival(1 - 2 ** (-1 / 3)) == pytest.approx(0.5)


def test_the_processor_forces_the_likeliest_legal_token_at_open_gates_only():
    torch = pytest.importorskip("torch")
    from chainmark.gates import Gate

    V = 3000
    pairs = CK.context_config(CONFIG)
    proc = CK.ContextKeyedLogitsProcessor(CONFIG, Gate("high_entropy", 1.0))
    torch.manual_seed(0)
    scores = torch.randn(3, V)
    scores[2] = -1e4
    scores[2, 5] = 1e4                                   # a peaked row: entropy ~ 0, the gate stays shut
    ids = torch.tensor([[11, 12], [13, 14], [15, 16]])
    out = proc(ids, scores.clone())
    for r, (x, a) in enumerate([(11, 12), (13, 14)]):
        want = (state_of((x << 32) | a, pairs.key, S) + 1) % S
        legal = [b for b in range(V) if state_of((a << 32) | b, pairs.key, S) == want]
        assert int(torch.isfinite(out[r]).sum()) == 1
        assert int(out[r].argmax()) == max(legal, key=lambda b: float(scores[r, b]))
    assert torch.equal(out[2], scores[2])
    assert proc.acted_matrix().tolist() == [[True], [True], [False]]
    assert CK.legal_share([[int(out[0].argmax())]], CONFIG, [[True]], [[11, 12]]) == 1.0
    with pytest.raises(ValueError, match="gate kind"):
        CK.ContextKeyedLogitsProcessor(CONFIG, Gate("low_entropy", 1.0))


def test_stealing_pairs_learns_a_small_vocabulary_and_its_forger_forces_believed_pairs():
    """With 12 token ids (144 pairs) and 60,000 watermarked tokens the attack on pairs learns most seen pairs'
    states (up to rotation); its generator forces, after a pair it knows, a token whose pair it believes legal."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    vocab = 12
    marked = [walk(CONFIG, 200, vocab, rng, forced=0.5) for _ in range(300)]
    baseline = [[int(t) for t in rng.integers(vocab, size=200)] for _ in range(300)]
    stolen = CK.steal_pairs(marked, baseline, S, 0.5)
    right, total = stolen.agreement(CONFIG, stolen.frequent(100))
    assert total == 100 and right >= 80, right
    proc = CK.StolenPairProcessor(stolen, tau=0.0)
    known = stolen.known()
    code = int(stolen.codes[np.flatnonzero(known >= 0)[0]])
    x, a = code >> 32, code & 0xFFFFFFFF
    out = proc(torch.tensor([[x, a]]), torch.randn(1, vocab))
    pick = int(out[0].argmax())
    at = int(np.searchsorted(stolen.codes, (a << 32) | pick))
    assert int(torch.isfinite(out[0]).sum()) == 1 and known[at] == (known[np.flatnonzero(known >= 0)[0]] + 1) % S
    assert proc.forced == 1


def test_the_editor_forges_with_a_map_of_pairs_and_not_with_random_states():
    """With the true states of every pair of a 40-id vocabulary, the editor walks random text into a forgery at a
    third of its tokens; with the same pairs' states drawn at random it does not; a budget of 0 edits nothing."""
    import dataclasses

    rng = np.random.default_rng(4)
    vocab = 40
    codes = np.array(sorted((a << 32) | b for a in range(vocab) for b in range(vocab)), dtype=np.int64)
    pairs = CK.context_config(CONFIG)
    truth = np.array([state_of(int(c), pairs.key, S) for c in codes])
    perfect = CK.StolenPairMap(S, codes, truth, np.ones(codes.size), np.ones(codes.size, dtype=np.int64), 0)
    shuffled = dataclasses.replace(perfect, states=rng.integers(0, S, size=codes.size))
    texts = [[int(t) for t in rng.integers(vocab, size=150)] for _ in range(20)]
    assert CK.forge_pairs(texts[0], perfect, 0.0) == texts[0]
    forged = [CK.forge_pairs(t, perfect, 1 / 3) for t in texts]
    assert all(sum(x != y for x, y in zip(f, t)) <= 50 for f, t in zip(forged, texts))
    assert np.mean([CK.context_detect(f, CONFIG).is_watermarked for f in forged]) >= 0.9
    assert np.mean([CK.context_detect(CK.forge_pairs(t, shuffled, 1 / 3), CONFIG).is_watermarked
                    for t in texts]) <= 0.2
    with pytest.raises(ValueError, match="budget"):
        CK.forge_pairs(texts[0], perfect, 1.5)


def test_replaying_watermarked_triples_forges_and_replaying_plain_ones_does_not():
    """The replaying adversary needs no states: triples over-represented in watermarked text are mostly legal, so
    editing text toward them forges the variant; a table built from unwatermarked text does not."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    vocab = 30
    marked = [walk(CONFIG, 200, vocab, rng, forced=0.5) for _ in range(200)]
    plain = [[int(t) for t in rng.integers(vocab, size=200)] for _ in range(400)]
    texts = [[int(t) for t in rng.integers(vocab, size=150)] for _ in range(20)]
    table = CK.replay_table(marked, plain[:200], S, 0.5)
    decoy = CK.replay_table(plain[200:], plain[:200], S, 0.5)
    assert all(len(set(v.tolist())) == v.size for v in table.values())   # each successor once, best first
    forged = np.mean([CK.context_detect(CK.replay_edit(t, table, 1 / 3), CONFIG).is_watermarked for t in texts])
    fooled = np.mean([CK.context_detect(CK.replay_edit(t, decoy, 1 / 3), CONFIG).is_watermarked for t in texts])
    assert forged >= 0.8 and fooled <= 0.2, (forged, fooled)
    assert CK.replay_edit(texts[0], table, 0.0) == texts[0]
    with pytest.raises(ValueError, match="budget"):
        CK.replay_edit(texts[0], table, -0.1)
    code = next(iter(table))
    proc = CK.ReplayProcessor(table, tau=0.0)
    out = proc(torch.tensor([[code >> 32, code & 0xFFFFFFFF]]), torch.randn(1, vocab))
    assert int(torch.isfinite(out[0]).sum()) == 1 and int(out[0].argmax()) in table[code].tolist()


def test_the_committed_measurement_covers_the_reference_runs_variant():
    """book/cmlab/data/stealing/context_keyed.json was measured (tools/measure_stealing.py context) on the
    replies the reference run holds now; the generator forger's replies are on disk for each map."""
    from cmlab.harness.context_keyed import (CONTEXT_GENERATORS, context_pool, load_context,
                                             load_context_generated, paired_replies)

    data = load_context()
    variant, chain = paired_replies()
    assert data["replies"] == len(variant) == len(chain) >= 400
    pool = context_pool()
    assert data["pool_tokens"] == pool.pool_tokens
    for name in ("context", "chainmark"):
        assert data["power"][name]["exact"]["trials"] == len(variant)
    generated = load_context_generated()
    assert len(generated) == sum(n for _, _, n in CONTEXT_GENERATORS)
    reference = reference_config()
    assert [bool(CK.context_detect(g["token_ids"], reference).is_watermarked) for g in generated[:20]] == \
        [g["exact_flagged"] for g in generated[:20]]
