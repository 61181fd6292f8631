"""Tests for cmlab.comparison.quality: teacher-forced self-perplexity and the KL cost."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from chainmark.config import ChainMarkConfig
from chainmark.partition import state_table
from cmlab.comparison.quality import KLCost, TokenScores, kl_bound, kl_cost, repeated_ngram_share, score_tokens

KEY = b"test-key-for-quality-0123456789"
V = 96


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


def sequences(seed: int = 0):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(3, V, size=n).tolist() for n in (4, 9, 1, 6)]
    tokens = [rng.integers(3, V, size=n).tolist() for n in (7, 3, 10, 0)]
    return prompts, tokens


def manual_logprobs(model, prompt, tokens):
    """One unpadded sequence: log p(next token) at every position."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)


def test_kl_bound():
    assert kl_bound(0.5, 5) == pytest.approx(0.5 * math.log(5))
    assert kl_bound(1.0, 6, k=2) == pytest.approx(math.log(3))
    assert kl_bound(0.0, 5) == 0.0
    for bad in [dict(rho=1.5, S=5), dict(rho=0.5, S=1), dict(rho=0.5, S=5, k=5), dict(rho=0.5, S=5, k=0)]:
        with pytest.raises(ValueError):
            kl_bound(**bad)


def test_nll_and_entropy_match_an_unpadded_forward_pass(tiny):
    prompts, tokens = sequences()
    scores = score_tokens(tiny, prompts, tokens, batch_size=3)  # ragged, left-padded batches
    assert [s.n_tokens for s in scores] == [len(t) for t in tokens]
    for prompt, toks, s in zip(prompts, tokens, scores):
        if not toks:
            assert math.isnan(s.perplexity)
            continue
        logp = manual_logprobs(tiny, prompt, toks)[len(prompt) - 1:-1]
        nll = -logp.gather(1, torch.tensor(toks)[:, None]).squeeze(1).numpy()
        ent = -(logp.exp() * logp).sum(-1).numpy()
        np.testing.assert_allclose(s.nll, nll, atol=1e-4)
        np.testing.assert_allclose(s.entropy, ent, atol=1e-4)
        assert s.perplexity == pytest.approx(float(np.exp(nll.mean())), rel=1e-4)


def test_batch_size_does_not_change_the_scores(tiny):
    prompts, tokens = sequences(1)
    one = score_tokens(tiny, prompts, tokens, batch_size=1)
    many = score_tokens(tiny, prompts, tokens, batch_size=4)
    for a, b in zip(one, many):
        np.testing.assert_allclose(a.nll, b.nll, atol=1e-4)


@pytest.mark.parametrize("S, topology", [(5, "clockwork"), (6, "soft_cycle")])
def test_allowed_mass_is_the_probability_of_the_allowed_states(tiny, S, topology):
    cfg = ChainMarkConfig(KEY, S=S, rho=1.0, topology=topology)
    prompts, tokens = sequences(2)
    scores = score_tokens(tiny, prompts, tokens, config=cfg, batch_size=2)
    table = state_table(KEY, V, S)
    for prompt, toks, s in zip(prompts, tokens, scores):
        seq = prompt + toks
        p = manual_logprobs(tiny, prompt, toks).exp()
        for i in range(len(toks)):
            prev = table[seq[len(prompt) - 1 + i]]
            allowed = torch.from_numpy(cfg.topo.matrix[prev, table])
            z = float(p[len(prompt) - 1 + i][allowed].sum())
            assert s.allowed_mass[i] == pytest.approx(z, abs=1e-5)
            assert s.kl[i] == pytest.approx(-math.log(z), rel=1e-4)


def test_kl_cost_pools_gated_positions():
    cfg = ChainMarkConfig(KEY, S=5, rho=1.0)
    a = TokenScores(nll=np.zeros(4), entropy=np.zeros(4), allowed_mass=np.array([0.5, 0.25, 0.2, 1.0]),
                    gated=np.array([True, False, True, False]))
    b = TokenScores(nll=np.zeros(2), entropy=np.zeros(2), allowed_mass=np.array([0.1, 0.3]),
                    gated=np.array([False, True]))
    cost = kl_cost([a, b], cfg)
    assert isinstance(cost, KLCost)
    np.testing.assert_allclose(cost.kl_gated, -np.log([0.5, 0.2, 0.3]))
    assert cost.n_positions == 6 and cost.rho_realised == pytest.approx(0.5)
    assert cost.per_token == pytest.approx(-np.log([0.5, 0.2, 0.3]).sum() / 6)
    assert cost.bound_gated == pytest.approx(math.log(5))
    assert cost.bound_per_token == pytest.approx(0.5 * math.log(5))
    assert kl_cost([a, b], cfg, all_positions=True).n_gated == 6
    with pytest.raises(ValueError, match="gate flags"):
        kl_cost([TokenScores(np.zeros(1), np.zeros(1), np.ones(1))], cfg)
    with pytest.raises(ValueError, match="allowed_mass"):
        TokenScores(np.zeros(1), np.zeros(1)).kl


def test_bad_input_is_rejected(tiny):
    with pytest.raises(ValueError, match="same length"):
        score_tokens(tiny, [[1, 2]], [[3], [4]])
    with pytest.raises(ValueError, match="empty"):
        score_tokens(tiny, [[]], [[3]])
    with pytest.raises(ValueError, match="batch_size"):
        score_tokens(tiny, [[1]], [[3]], batch_size=0)
    with pytest.raises(TypeError):
        score_tokens(tiny, [[1]], [[3]], config={"S": 5})


@pytest.mark.slow
def test_kl_on_unwatermarked_text_respects_the_jensen_bound():
    """On text written without the key the contexts do not depend on the key, so
    E[log 1/Z] >= log S holds exactly (the paper's quality theorem). The pooled
    mean over ~200 positions may sit below it only by sampling noise: allow
    three standard errors."""
    from chainmark.embed import Sampling, generate
    from cmlab.harness.models import load_model
    from cmlab.comparison.quality import score_generations

    model, tok = load_model(device="cpu")
    prompts = ["Explain photosynthesis in a comprehensive way.", "Why is the sky blue?",
               "Write a short poem about autumn.", "What is a prime number?"]
    gens = generate(model, tok, prompts, None, sampling=Sampling(max_new_tokens=48, batch_size=4))
    cfg = ChainMarkConfig(KEY, S=5, rho=1.0)
    cost = kl_cost(score_generations(model, gens, cfg), cfg, all_positions=True)
    assert cost.n_gated >= 100
    assert cost.mean_gated >= cost.bound_gated - 3 * cost.se_gated


def test_repeated_ngram_share_counts_later_copies_only():
    assert repeated_ngram_share([1, 2, 3, 4, 5, 6]) == 0.0
    # 1 2 1 2 1 2: bigrams (1,2) (2,1) (1,2) (2,1) (1,2) -> 3 of 5 repeat an earlier one
    assert repeated_ngram_share([1, 2, 1, 2, 1, 2], n=2) == pytest.approx(3 / 5)
    assert repeated_ngram_share([7, 7, 7]) == 0.0  # shorter than n: no 4-grams at all
    assert repeated_ngram_share(np.array([5] * 10), n=1) == pytest.approx(9 / 10)
    with pytest.raises(ValueError, match="positive integer"):
        repeated_ngram_share([1, 2, 3], n=0)


def test_surprise_by_gate_splits_the_tokens_at_the_gate_and_pools_them():
    """Opened and closed positions are averaged over tokens (not texts), each with an interval from resampling
    whole texts that holds the estimate; log(1/Z) comes with the allowed mass; mismatched flags are refused."""
    from cmlab.comparison.quality import surprise_by_gate

    a = TokenScores(nll=np.array([1.0, 3.0, 5.0]), entropy=np.zeros(3), allowed_mass=np.array([0.5, 0.25, 1.0]))
    b = TokenScores(nll=np.array([2.0, 4.0]), entropy=np.zeros(2), allowed_mass=np.array([0.5, 0.5]))
    out = surprise_by_gate([a, b], [[True, True, False], [False, True]], np.random.default_rng(0), n_boot=200)
    assert out["texts"] == 2 and out["opened"]["tokens"] == 3 and out["closed"]["tokens"] == 2
    assert out["opened"]["mean"] == pytest.approx((1 + 3 + 4) / 3) and out["closed"]["mean"] == pytest.approx(3.5)
    assert out["opened_kl"]["mean"] == pytest.approx((math.log(2) + math.log(4) + math.log(2)) / 3)
    assert out["share_opened"]["mean"] == pytest.approx(3 / 5) and out["share_opened"]["tokens"] == 5
    for part in ("opened", "closed", "opened_kl", "share_opened"):
        assert out[part]["low"] <= out[part]["mean"] <= out[part]["high"]
    with pytest.raises(ValueError, match="one flag per generated token"):
        surprise_by_gate([a], [[True]], np.random.default_rng(0))
    with pytest.raises(ValueError, match="one flag list per text"):
        surprise_by_gate([a, b], [[True, True, False]], np.random.default_rng(0))
    with pytest.raises(ValueError, match="no tokens"):
        surprise_by_gate([b], [[False, False]], np.random.default_rng(0))


def test_the_committed_forced_token_record_covers_the_reference_replies():
    """``tools/measure_quality.py``'s record: both kinds of reply, every clean reply of the head-to-head, intervals
    around their estimates, the reference run's gate."""
    import json

    from cmlab.comparison.quality import load_forced_tokens
    from cmlab.harness.reference import PROTOCOL, read_dir

    record = load_forced_tokens()
    tau = json.loads((read_dir() / "gates.json").read_text("utf-8"))["tau"][f"{PROTOCOL.rho:g}"]
    assert record["tau"] == tau and set(record["methods"]) == {"chainmark", "none"}
    for method in record["methods"].values():
        assert method["texts"] == PROTOCOL.n_per_domain * len(PROTOCOL.domains)
        for part in ("opened", "closed", "opened_kl", "share_opened"):
            assert method[part]["low"] <= method[part]["mean"] <= method[part]["high"]
        assert method["opened"]["tokens"] == round(method["share_opened"]["mean"] * method["share_opened"]["tokens"])
