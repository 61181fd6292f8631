"""Tests for the stealing adversary (cmlab.comparison.stealing) and detection over a set of keys
(chainmark.auditor.keysets): on the committed reference run, a map stolen from 20,000 watermarked tokens recovers
the frequent tokens' states up to rotation and forges held-out unwatermarked replies under the stolen key only;
a key set's family-wise error is at most alpha on 20,000 null texts over random keys."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from chainmark.auditor.keysets import detect_over_keys
from chainmark.config import ChainMarkConfig
from chainmark.detection import detect
from chainmark.partition import state_table
from cmlab.comparison import stealing as ST
from cmlab.harness.stealing import first_tokens, _true_key_map

from cmlab.harness.grids import _simulate_watermarked_ids
from cmlab.harness.stealing import attacker_pool, reference_config

V, S, RHO = 49152, 5, 0.5
CONFIG = reference_config()        # the reference run's published key, S = 5, rho = 0.5: what the adversary attacks
KEY = CONFIG.key
OBSERVED = 20_000                  # watermarked tokens the adversary collected


@pytest.fixture(scope="module")
def world():
    pool = attacker_pool()
    return {"marked": first_tokens(pool.watermarked, OBSERVED), "baseline": pool.baseline,
            "held_out": pool.held_out_unwatermarked[::3], "marked_held_out": pool.held_out_watermarked[::3]}


@pytest.fixture(scope="module")
def stolen(world):
    return ST.steal(world["marked"], world["baseline"], S, RHO, V)


def forged_share(texts, path_of, config, budget, test="exact"):
    flags = []
    for ids in texts:
        forged = ST.apply_path(ids, path_of(ids), budget=budget)
        flags.append(detect(forged, config, test=test).is_watermarked)
    return float(np.mean(flags))


def test_the_evidence_favours_legal_pairs(world):
    ev = ST.bigram_evidence(world["marked"], world["baseline"], S, RHO, V)
    table = state_table(KEY, V, S)
    legal = (table[ev.second] - table[ev.first]) % S == 1
    assert ev.tokens_observed == OBSERVED
    assert not np.any(ev.first == ev.second)  # self-pairs carry no information on a state
    # pairs with positive evidence are legal far more often than p0 = 1/5; negative ones less often
    assert legal[ev.weight > 1].mean() > 0.6
    assert legal[ev.weight < -5].mean() < 0.3


def test_a_stolen_map_recovers_the_frequent_states_up_to_rotation(world, stolen):
    table = state_table(KEY, V, S)
    right, total = stolen.agreement(table, stolen.frequent_tokens(500))
    assert total == 500 and right / total > 0.8
    # rotating the key's states by one gives the same agreement: the map is only defined up to a rotation
    shifted = ST.StolenMap(S, np.where(stolen.states >= 0, (stolen.states + 1) % S, -1), stolen.confidence,
                           stolen.tokens_observed, stolen.token_counts)
    assert shifted.agreement(table, stolen.frequent_tokens(500)) == (right, total)
    # a map stolen from nothing knows nothing
    empty = ST.steal([], world["baseline"], S, RHO, V)
    assert empty.n_known() == 0


def test_the_editor_forges_under_the_stolen_key_and_only_that_key(world, stolen):
    held = world["held_out"]
    assert forged_share(held, lambda ids: [], CONFIG, 0.2) <= 0.1      # unedited: the null
    assert forged_share(held, lambda ids: ST.forge_path(ids, stolen), CONFIG, 0.2) >= 0.8
    other = ChainMarkConfig(b"another-account-key", S=S)
    assert forged_share(held, lambda ids: ST.forge_path(ids, stolen), other, 0.2) <= 0.1
    ceiling = _true_key_map(CONFIG, V)
    assert forged_share(held, lambda ids: ST.forge_path(ids, ceiling), CONFIG, 0.1) >= 0.9


def test_edits_to_flip_counts_the_edits_the_detector_needed(world, stolen):
    ids = world["held_out"][0]
    path = ST.forge_path(ids, stolen)
    m = ST.edits_to_flip(ids, path, CONFIG)
    assert m is not None and 0 < m <= len(path)
    assert detect(ST.apply_path(ids, path, edits=m), CONFIG, test="exact").is_watermarked
    assert not detect(ST.apply_path(ids, path, edits=m - 1), CONFIG, test="exact").is_watermarked
    # every edit puts a confident token, and positions are edited once
    known = stolen.known()
    assert all(known[tok] >= 0 for _, tok in path)
    assert len({j for j, _ in path}) == len(path)


def test_the_scrubber_lowers_z_and_the_key_holder_scrubs_with_fewer_edits(world, stolen):
    texts = world["marked_held_out"]
    before = np.mean([detect(t, CONFIG, test="z").z for t in texts])
    after = np.mean([detect(ST.apply_path(t, ST.scrub_path(t, stolen), budget=0.2), CONFIG, test="z").z for t in texts])
    assert after < before - 2
    ceiling = _true_key_map(CONFIG, V)
    stolen_edits = [ST.edits_to_flip(t, ST.scrub_path(t, stolen), CONFIG, want_flagged=False) for t in texts]
    key_edits = [ST.edits_to_flip(t, ST.scrub_path(t, ceiling), CONFIG, want_flagged=False) for t in texts]
    assert all(e is not None for e in key_edits)
    assert np.median(key_edits) <= np.median([e if e is not None else 10**6 for e in stolen_edits])


def test_apply_path_and_first_tokens():
    assert ST.apply_path([1, 2, 3, 4], [(1, 9), (3, 8)], budget=0.25) == [1, 9, 3, 4]
    assert ST.apply_path([1, 2, 3, 4], [(1, 9), (3, 8)]) == [1, 9, 3, 8]
    assert ST.apply_path([1, 2, 3, 4], [(1, 9), (3, 8)], edits=0) == [1, 2, 3, 4]
    assert first_tokens([[1, 2, 3], [4, 5, 6]], 4) == [[1, 2, 3], [4]]
    assert first_tokens([[1, 2, 3]], 0) == []


def test_bad_input_is_a_clear_error(world):
    with pytest.raises(ValueError, match="token ids must lie in"):
        ST.bigram_evidence([[0, V]], world["baseline"], S, RHO, V)
    with pytest.raises(ValueError, match="rho must be below 1"):
        ST.bigram_evidence(world["marked"], world["baseline"], S, 1.0, V)
    with pytest.raises(ValueError):
        ST.steal(world["marked"], world["baseline"], 1, RHO, V)


def test_the_generators_processor_forces_believed_successors_at_high_entropy_only(stolen):
    torch = pytest.importorskip("torch")
    known = stolen.known()
    last = [int(np.flatnonzero(known >= 0)[0]), int(np.flatnonzero(known < 0)[0])]
    proc = ST.StolenMapProcessor(stolen, tau=0.0, vocab_size=V)
    scores = torch.randn(3, V)
    ids = torch.tensor([[5, last[0]], [5, last[1]], [5, last[0]]])
    scores[2] = -1e4
    scores[2, 0] = 1e4                                  # a peaked row: entropy ~ 0 (below any tau > 0)
    proc.tau = 1e-3
    out = proc(ids, scores.clone())
    finite = torch.isfinite(out[0])
    assert int(finite.sum()) == 1                       # row 0: forced to one token ...
    pick = int(torch.nonzero(finite)[0])
    assert known[pick] == (known[last[0]] + 1) % S      # ... that the map believes follows the last token
    assert torch.equal(out[1], scores[1])               # row 1: the last token has no confident state
    assert torch.isfinite(out[2]).all()                 # row 2: below the gate's threshold, untouched
    assert proc.forced == 1 and proc.steps == 3


# --------------------------------------------------------------------------- detection over a set of keys


def test_detection_over_a_key_set_names_the_key_that_watermarked():
    configs = [ChainMarkConfig(f"account-{i}".encode(), S=S) for i in range(20)]
    texts = _simulate_watermarked_ids(10, 200, ChainMarkConfig(configs[7].key, S=S, rho=RHO), V, seed=6).tolist()
    verdicts = [detect_over_keys(t, configs) for t in texts]
    assert all(v.is_watermarked and v.best == 7 for v in verdicts)
    assert all(v.key_fingerprint == configs[7].fingerprint for v in verdicts)
    d = verdicts[0].to_dict()
    assert d["n_keys"] == 20 and d["per_key_alpha"] == pytest.approx(0.01 / 20)
    assert set(d["p_values"]) == {c.fingerprint for c in configs}
    assert all(c.key.hex() not in str(d) for c in configs)   # fingerprints, never keys


def test_a_key_sets_family_wise_error_is_at_most_alpha_on_20000_null_texts():
    """20,000 unwatermarked texts, each under K = 4 fresh random keys: the share flagged by any key is at most
    alpha (within the binomial's 99.9% upper quantile). Testing each key at alpha instead, the same loop
    exceeds it: the check can fail."""
    rng = np.random.default_rng(20_000)
    alpha, K, n_texts = 0.05, 4, 20_000
    any_flag = naive = 0
    for i in range(n_texts):
        configs = [ChainMarkConfig(rng.bytes(16), S=S) for _ in range(K)]
        # short texts over a small vocabulary: many repeated tokens, the case a naive test gets wrong
        ids = rng.integers(0, 300 if i % 2 else V, size=int(rng.integers(20, 80))).tolist()
        v = detect_over_keys(ids, configs, alpha)
        any_flag += v.is_watermarked
        naive += any(p < alpha for p in v.p_values)
    limit = binom.ppf(0.999, n_texts, alpha)
    assert any_flag <= limit, f"family-wise error {any_flag / n_texts:.4f} above alpha = {alpha}"
    assert naive > limit   # each key at alpha: the family-wise error is near K alpha


def test_a_key_set_refuses_what_it_cannot_test():
    with pytest.raises(ValueError, match="configs is empty"):
        detect_over_keys([1, 2, 3], [])
    with pytest.raises(ValueError, match="same key twice"):
        detect_over_keys([1, 2, 3], [CONFIG, ChainMarkConfig(KEY, S=3)])
    with pytest.raises(TypeError, match=r"configs\[1\] must be a ChainMarkConfig"):
        detect_over_keys([1, 2, 3], [CONFIG, KEY])
    with pytest.raises(ValueError):
        detect_over_keys([1, 2, 3], [CONFIG], alpha=1.5)


# --------------------------------------------------------------------------- the model-checked verification


@pytest.mark.slow
def test_the_model_check_verifies_real_replies_and_refuses_forgeries(model_and_tokenizer, world, stolen):
    """Real watermarked replies of the reference run carry the model's likeliest legal token at every gated step;
    unwatermarked replies, and the editor's forgeries that the model-free detector flags, do not."""
    from cmlab.comparison.model_check import ModelCheck, model_check
    from cmlab.harness.reference.read import load_texts
    from cmlab.harness.stealing import HELD_OUT_PROMPTS, reference_gate

    model, _ = model_and_tokenizer
    gate = reference_gate()
    h2h = load_texts("head_to_head")
    real = [r for r in h2h if r["method"] == "chainmark"][:6]
    plain = [r for r in h2h if r["method"] == "none" and r["prompt_index"] >= HELD_OUT_PROMPTS][:6]
    assert all(model_check(model, r["prompt_ids"], r["token_ids"], CONFIG, gate).verified for r in real)
    assert not any(model_check(model, r["prompt_ids"], r["token_ids"], CONFIG, gate).verified for r in plain)
    forged = []
    for r in plain:
        ids = ST.apply_path(r["token_ids"], ST.forge_path(r["token_ids"], stolen), budget=0.2)
        if detect(ids, CONFIG, test="exact").is_watermarked:
            forged.append(model_check(model, r["prompt_ids"], ids, CONFIG, gate))
    assert forged and not any(c.verified for c in forged)
    # under another key the real replies' forced tokens are not the likeliest legal ones
    other = ChainMarkConfig(b"not-the-deployment-key", S=S)
    assert not model_check(model, real[0]["prompt_ids"], real[0]["token_ids"], other, gate).verified
    assert ModelCheck(0, 0).share == 0.0 and not ModelCheck(0, 0).verified
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        model_check(model, [], [1, 2], CONFIG, gate)


# --------------------------------------------------------------------------- the committed measurement


def test_the_committed_measurement_covers_the_pool_the_code_builds():
    """book/cmlab/data/stealing was measured (tools/measure_stealing.py) on the pool attacker_pool() builds now:
    the same size, every point up to at least 200,000 tokens and the true key, the generator's 400 replies."""
    from cmlab.harness.stealing import GENERATOR_TOKENS, TOKENS_OBSERVED, load_curve, load_generated, load_keyset
    from cmlab.harness.stealing import load_modelcheck

    pool = attacker_pool()
    curve = load_curve()
    assert curve["pool_tokens"] == pool.pool_tokens >= 200_000
    assert curve["held_out"] == {"unwatermarked": len(pool.held_out_unwatermarked),
                                 "watermarked": len(pool.held_out_watermarked)}
    assert set(curve["points"]) == {str(t) for t in TOKENS_OBSERVED if t <= pool.pool_tokens} | {"true_key"}
    assert max(p["tokens"] or 0 for p in curve["points"].values()) >= 200_000
    for point in curve["points"].values():
        for test in ("exact", "z"):
            for budget in ("0.05", "0.1", "0.2"):
                r = point["forge"][test][budget]
                assert r["trials"] == len(pool.held_out_unwatermarked) and r["low"] <= r["rate"] <= r["high"]
    generated = load_generated()
    for tokens, texts in GENERATOR_TOKENS:
        assert sum(g["tokens_observed"] == tokens for g in generated) == texts
    assert load_keyset()["forged"] == len(pool.held_out_unwatermarked)
    assert load_modelcheck()["groups"]["real watermark"]["texts"] == 400
