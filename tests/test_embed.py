"""Tests for chainmark.embed: configuration, the logits processor, generation."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from chainmark.config import ChainMarkConfig
from chainmark.embed import ChainMarkLogitsProcessor, Sampling, _SignalRecorder, _candidate_table, generate
from chainmark.gates import Gate
from chainmark.gate_signals import entropy, entropy_signals, gate_flags, row_maxima, row_signals, top2_gap
from chainmark.partition import state_table
from chainmark.topology import Topology

KEY = b"test-key-for-embedding-0123456789"


def reference_process(config: ChainMarkConfig, gate: Gate, input_ids: torch.Tensor,
                      scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Naive per-row Algorithm 1: mask the whole row, take the argmax, loop in Python."""
    V = scores.shape[1]
    table = state_table(config.key, V, config.S)
    out = scores.clone()
    forced = torch.zeros(scores.shape[0], dtype=torch.bool)
    for r in range(scores.shape[0]):
        if not bool(gate_flags(gate, scores[r:r + 1])[0]):
            continue
        prev = table[int(input_ids[r, -1])]
        allowed = torch.tensor([config.topo.matrix[prev, table[t]] for t in range(V)])
        masked = scores[r].masked_fill(~allowed, float("-inf"))
        if not torch.isfinite(masked).any():
            continue  # no allowed mass: free sampling
        choice = int(masked.argmax())
        out[r] = float("-inf")
        out[r, choice] = scores[r, choice]
        forced[r] = True
    return out, forced


def random_case(seed: int, batch: int = 6, V: int = 97, length: int = 7):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, V, generator=g) * 3
    ids = torch.randint(0, V, (batch, length), generator=g)
    return ids, scores


# ---- configuration ----------------------------------------------------
def test_sampling_carries_generates_arguments_and_refuses_bad_ones():
    """One Sampling carries how generate samples (its fields are not keywords of generate), and a bad one is
    refused (before the model is touched) with an error that names it."""
    assert Sampling() == Sampling(max_new_tokens=128, min_new_tokens=None, temperature=0.7, seed=42, batch_size=8)
    numpy_ints = Sampling(max_new_tokens=np.int64(40), min_new_tokens=np.int32(8), seed=np.int64(7))
    assert numpy_ints == Sampling(max_new_tokens=40, min_new_tokens=8, seed=7)
    assert all(type(getattr(numpy_ints, f)) is int for f in ("max_new_tokens", "min_new_tokens", "seed", "batch_size"))
    for bad, error in [({"max_new_tokens": 0}, ValueError), ({"batch_size": True}, TypeError),
                       ({"min_new_tokens": -1}, ValueError), ({"temperature": 0.0}, ValueError),
                       ({"seed": "42"}, TypeError), ({"max_new_tokens": "64"}, TypeError)]:
        with pytest.raises(error, match=next(iter(bad))):
            Sampling(**bad)
    for mirrored in ("max_tokens", "max_new_tokens"):
        with pytest.raises(TypeError, match=mirrored):
            generate(object(), object(), ["hello"], **{mirrored: 5})
    with pytest.raises(TypeError, match="sampling must be"):
        generate(object(), object(), ["hello"], sampling={"max_new_tokens": 5})
    with pytest.raises(TypeError):  # the sampling arguments are keywords: none is taken by position
        generate(object(), object(), ["hello"], None, None, 64)


def test_config_validates_and_hides_key():
    cfg = ChainMarkConfig(KEY, S=7, rho=0.3, gate="top2_gap", topology="soft_cycle")
    assert cfg.topo.k == 2 and cfg.S == 7
    assert KEY.decode() not in repr(cfg)
    described = cfg.describe()
    assert described["key_fingerprint"] == cfg.fingerprint
    assert KEY.decode() not in str(described)


@pytest.mark.parametrize("kwargs, error", [
    (dict(S=1), ValueError), (dict(S=2.5), TypeError), (dict(rho=1.5), ValueError),
    (dict(rho=-0.1), ValueError), (dict(gate="sometimes"), ValueError),
    (dict(topology="spiral"), ValueError), (dict(gate="all", rho=0.5), ValueError),
    (dict(S=2, topology="soft_cycle"), ValueError),
])
def test_config_rejects_bad_input(kwargs, error):
    with pytest.raises(error):
        ChainMarkConfig(KEY, **kwargs)


@pytest.mark.parametrize("key, error", [(12345, TypeError), (b"", ValueError), ("", ValueError)])
def test_config_rejects_bad_keys(key, error):
    with pytest.raises(error):
        ChainMarkConfig(key)


def test_a_config_with_its_gates_threshold_is_whole():
    """``tau`` makes the configuration whole: generation needs no gate beside it, a gate passed beside it must be
    the same, and its description (what a run records) states it."""
    gate = Gate.calibrate("low_entropy", 0.25, np.linspace(0.0, 4.0, 101))
    config = ChainMarkConfig(KEY, rho=0.25, gate="low_entropy").with_gate(gate)
    assert config.tau == gate.tau and config.default_gate() == gate and config.default_gate().rho == 0.25
    assert ChainMarkLogitsProcessor(config).gate == gate and config.describe()["tau"] == gate.tau
    with pytest.raises(ValueError, match="does not match"):
        ChainMarkLogitsProcessor(config, Gate("low_entropy", gate.tau + 0.5, rho=0.25))
    with pytest.raises(ValueError, match="calibrated to open a share rho = 0.25"):
        ChainMarkConfig(KEY, rho=0.5, gate="low_entropy").with_gate(gate)
    with pytest.raises(ValueError, match="states no share"):
        ChainMarkConfig(KEY, rho=0.25, gate="low_entropy").with_gate(Gate("low_entropy", 1.0))
    assert ChainMarkConfig(KEY, gate="all", rho=1.0).with_gate(Gate("all")).tau is None
    assert "tau" not in ChainMarkConfig(KEY, rho=1.0).describe()
    for bad, error in ((dict(gate="all", rho=1.0, tau=0.0), ValueError), (dict(tau=float("nan")), ValueError),
                       (dict(tau="1.0"), TypeError)):
        with pytest.raises(error):
            ChainMarkConfig(KEY, **bad)


def test_default_gate_needs_calibration_between_0_and_1():
    assert ChainMarkConfig(KEY, rho=1.0).default_gate().tau == -math.inf
    assert ChainMarkConfig(KEY, gate="all", rho=1.0).default_gate().kind == "all"
    with pytest.raises(ValueError, match="calibrate"):
        ChainMarkConfig(KEY, rho=0.5).default_gate()


# ---- step signals ------------------------------------------------------
@pytest.mark.parametrize("row_path", [True, False])
def test_recorded_signals_are_the_gates_fused_signals(row_path):
    """Both processor paths and the recorder take their signals from chainmark.gates, bit for bit."""
    ids, scores = random_case(13, batch=4, V=300)
    scores[0, ::2] = float("-inf")
    cfg = ChainMarkConfig(KEY, S=5, rho=0.5, gate="top2_gap")
    proc = ChainMarkLogitsProcessor(cfg, Gate("top2_gap", 0.2, rho=0.5), record_signals=True)
    proc.row_path = row_path
    proc(ids, scores)
    if row_path:  # one row at a time: Python floats (the gate compares those), stored as float32
        tops, where = row_maxima(scores, with_index=True)
        shifted, e = torch.empty(300), torch.empty(300)
        rows = [row_signals(scores[r], tops[r], shifted, e, where[r]) for r in range(4)]
        h, gap = torch.tensor([h for h, _ in rows]), torch.tensor([g for _, g in rows])
        opened = torch.tensor([g < 0.2 for _, g in rows])
    else:
        h, gap = entropy_signals(scores, gap=True, fused=True)[:2]
        opened = gap < 0.2
    assert torch.equal(proc.entropy[0], h) and torch.equal(proc.gap[0], gap)
    assert torch.equal(proc.gated[0], opened) and 0 < int(opened.sum()) < 4
    recorder = _SignalRecorder()
    recorder(ids, scores)
    assert torch.equal(recorder.entropy[0], entropy_signals(scores, fused=True).entropy)


# ---- candidate table ---------------------------------------------------
@pytest.mark.parametrize("S, topology", [(2, "clockwork"), (5, "clockwork"), (6, "soft_cycle")])
def test_candidate_table_lists_exactly_the_allowed_tokens(S, topology):
    cfg = ChainMarkConfig(KEY, S=S, rho=1.0, topology=topology)
    table = state_table(KEY, 500, S)
    cand = _candidate_table(table, cfg.topo)
    for s in range(S):
        expected = {t for t in range(500) if cfg.topo.matrix[s, table[t]]}
        assert set(cand[s].tolist()) == expected
        assert np.all(np.diff(cand[s][:len(expected)]) > 0)


# ---- the processor -----------------------------------------------------
@pytest.mark.parametrize("S, topology, kind", [
    (5, "clockwork", "high_entropy"), (2, "clockwork", "low_entropy"),
    (7, "soft_cycle", "top2_gap"), (5, "clockwork", "all"),
])
def test_processor_matches_naive_reference(S, topology, kind):
    ids, scores = random_case(3)
    rho = 1.0 if kind == "all" else 0.5
    cfg = ChainMarkConfig(KEY, S=S, rho=rho, gate=kind, topology=topology)
    signal = top2_gap(scores) if kind == "top2_gap" else entropy(scores)
    gate = Gate.calibrate(kind, rho, signal.numpy())
    proc = ChainMarkLogitsProcessor(cfg, gate)
    out = proc(ids, scores.clone())
    ref, forced = reference_process(cfg, gate, ids, scores)
    assert torch.equal(out, ref)
    assert torch.equal(proc.forced[0], forced)
    assert torch.equal(proc.gated[0], gate_flags(gate, scores))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), S=st.integers(2, 9), rho=st.sampled_from([0.25, 0.5, 1.0]))
def test_gated_rows_one_finite_logit_in_allowed_set_ungated_unchanged(seed, S, rho):
    ids, scores = random_case(seed, batch=5, V=64)
    cfg = ChainMarkConfig(KEY, S=S, rho=rho)
    gate = Gate.calibrate("high_entropy", rho, entropy(scores).numpy())
    proc = ChainMarkLogitsProcessor(cfg, gate, vocab_size=64)
    out = proc(ids, scores)
    table = state_table(KEY, 64, S)
    gated = proc.gated[0]
    for r in range(scores.shape[0]):
        finite = torch.isfinite(out[r]).nonzero().view(-1).tolist()
        if gated[r]:
            assert len(finite) == 1
            t = finite[0]
            assert table[t] == (table[int(ids[r, -1])] + 1) % S  # the clockwork successor
            assert out[r, t] == scores[r, t]
        else:
            assert torch.equal(out[r], scores[r])


def test_processor_does_not_modify_its_input():
    ids, scores = random_case(4)
    before = scores.clone()
    ChainMarkLogitsProcessor(ChainMarkConfig(KEY, gate="all", rho=1.0))(ids, scores)
    assert torch.equal(scores, before)


def test_fallback_when_the_allowed_set_has_no_mass():
    ids, scores = random_case(5, batch=3, V=50)
    cfg = ChainMarkConfig(KEY, S=5, gate="all", rho=1.0)
    table = state_table(KEY, 50, 5)
    nxt = (table[int(ids[1, -1])] + 1) % 5
    scores[1, torch.from_numpy(table == nxt)] = float("-inf")  # row 1: every allowed logit removed
    proc = ChainMarkLogitsProcessor(cfg)
    out = proc(ids, scores)
    assert proc.gated[0].tolist() == [True, True, True]
    assert proc.forced[0].tolist() == [True, False, True]
    assert torch.equal(out[1], scores[1])  # sampled freely from the model's distribution
    assert int(torch.isfinite(out[0]).sum()) == 1


def test_left_padding_and_batch_equivalence():
    ids, scores = random_case(6, batch=4, V=80)
    cfg = ChainMarkConfig(KEY, S=5, rho=0.5)
    gate = Gate("high_entropy", float(entropy(scores).median()), rho=0.5)  # the median opens half the rows
    batched = ChainMarkLogitsProcessor(cfg, gate)(ids, scores)
    padded_ids = torch.cat([torch.zeros(4, 5, dtype=torch.long), ids], dim=1)  # left padding
    padded = ChainMarkLogitsProcessor(cfg, gate)(padded_ids, scores)
    assert torch.equal(batched, padded)
    proc = ChainMarkLogitsProcessor(cfg, gate)
    rows = [proc(ids[r:r + 1, 2 * r:], scores[r:r + 1]) for r in range(4)]  # ragged prefixes
    assert torch.equal(torch.cat(rows), batched)


def test_candidate_path_equals_full_mask_path(monkeypatch):
    import chainmark.embed as embed

    ids, scores = random_case(7, batch=6, V=120)
    cfg = ChainMarkConfig(KEY, S=6, rho=1.0, topology="soft_cycle")
    fast = ChainMarkLogitsProcessor(cfg)(ids, scores)
    monkeypatch.setattr(embed, "_MAX_CANDIDATE_ENTRIES", 1)
    slow_proc = ChainMarkLogitsProcessor(cfg)
    slow = slow_proc(ids, scores)
    assert slow_proc._candidates is None
    assert torch.equal(fast, slow)


@pytest.mark.parametrize("V", [50, 70_000])  # several rows per cache chunk; one row per chunk
@pytest.mark.parametrize("kind, record", [("high_entropy", False), ("top2_gap", True), ("all", True)])
def test_cpu_row_path_equals_batched_path(V, kind, record):
    ids, scores = random_case(11, batch=5, V=V)
    scores[2, ::3] = float("-inf")
    rho = 1.0 if kind == "all" else 0.5
    cfg = ChainMarkConfig(KEY, S=5, rho=rho, gate=kind)
    signal = np.sort((top2_gap(scores) if kind == "top2_gap" else entropy(scores)).numpy())
    # a threshold between two rows' signals: the two paths sum the entropy in
    # different orders, so a row sitting exactly on tau could go either way
    gate = Gate(kind, float(signal[1:3].mean()), rho=rho) if kind != "all" else Gate("all", 0.0)
    rows = ChainMarkLogitsProcessor(cfg, gate, record_signals=record)
    batched = ChainMarkLogitsProcessor(cfg, gate, record_signals=record)
    batched.row_path = False
    for _ in range(2):  # the second call reuses the scratch buffers
        a, b = rows(ids, scores), batched(ids, scores)
        assert torch.equal(a, b)
    assert torch.equal(torch.stack(rows.forced), torch.stack(batched.forced))
    if record:
        torch.testing.assert_close(torch.stack(rows.entropy), torch.stack(batched.entropy))
        torch.testing.assert_close(torch.stack(rows.gap), torch.stack(batched.gap))


def test_bfloat16_logits_are_processed():
    ids, scores = random_case(12, batch=3, V=64)
    half = scores.to(torch.bfloat16)
    out = ChainMarkLogitsProcessor(ChainMarkConfig(KEY, gate="all", rho=1.0))(ids, half)
    assert out.dtype == torch.bfloat16
    assert (torch.isfinite(out).sum(dim=1) == 1).all()


def test_vocabulary_mismatch_is_a_clear_error():
    ids, scores = random_case(8, V=100)
    proc = ChainMarkLogitsProcessor(ChainMarkConfig(KEY, gate="all", rho=1.0), vocab_size=90)
    with pytest.raises(ValueError, match="state table covers 90 token ids but the logits have 100"):
        proc(ids, scores)


def test_processor_rejects_bad_arguments():
    cfg = ChainMarkConfig(KEY, rho=0.5)
    with pytest.raises(TypeError):
        ChainMarkLogitsProcessor({"key": KEY})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not match"):
        ChainMarkLogitsProcessor(cfg, Gate("top2_gap", 0.1))
    with pytest.raises(ValueError, match="calibrate"):
        ChainMarkLogitsProcessor(cfg)
    with pytest.raises(ValueError, match="vocab_size"):
        ChainMarkLogitsProcessor(cfg, Gate("high_entropy", 1.0, rho=0.5), vocab_size=0)


def test_a_config_whose_rho_its_gate_was_not_calibrated_for_is_refused_before_generation():
    """A gate calibrated at one rho opens that share of positions; a config at another rho would make the detector
    expect what generation does not do (the anytime bets, the closed forms), so the processor, and with it
    ``generate`` (which builds it before the first batch), refuses the pair; a gate built from a threshold alone
    states no rho, so nothing shows it opens config.rho: it is refused too, unless it states the share (measured
    on a pilot) or opens all positions or none, which it does exactly."""
    gate = Gate.calibrate("high_entropy", 0.25, np.linspace(0.0, 4.0, 101))
    assert gate.rho == 0.25 and gate == Gate("high_entropy", gate.tau)  # rho is not the gate's identity
    with pytest.raises(ValueError, match=r"calibrated to open a share rho = 0.25 .* config.rho is 0.5"):
        ChainMarkLogitsProcessor(ChainMarkConfig(KEY, rho=0.5), gate)
    ChainMarkLogitsProcessor(ChainMarkConfig(KEY, rho=0.25), gate)
    with pytest.raises(ValueError, match=r"states no share of positions .* config.rho = 0.5"):
        ChainMarkLogitsProcessor(ChainMarkConfig(KEY, rho=0.5), Gate("high_entropy", gate.tau))
    ChainMarkLogitsProcessor(ChainMarkConfig(KEY, rho=0.5), Gate("high_entropy", gate.tau, rho=0.5))
    assert Gate("high_entropy", math.inf).rho == 0.0 and Gate("low_entropy", math.inf).rho == 1.0
    ChainMarkLogitsProcessor(ChainMarkConfig(KEY, rho=1.0), Gate("high_entropy", -math.inf))  # opens every position
    with pytest.raises(ValueError, match=r"rho = 0 of positions"):
        ChainMarkLogitsProcessor(ChainMarkConfig(KEY, rho=0.5, gate="top2_gap"), Gate("top2_gap", -math.inf))  # none
    assert Gate.calibrate("all", 1.0, []).rho == 1.0 and Gate.calibrate("high_entropy", 0.0, []).rho == 0.0
    with pytest.raises(ValueError, match="rho"):
        Gate("high_entropy", 1.0, 1.5)

    class NoModel:  # generate must refuse before it touches the model
        config = type("C", (), {"vocab_size": 64, "eos_token_id": 0})()
        generation_config = config

        def parameters(self):
            yield torch.zeros(1)

        def get_output_embeddings(self):
            return torch.nn.Linear(4, 64, bias=False)

        def __call__(self, *args, **kwargs):
            raise AssertionError("the model was called")

    with pytest.raises(ValueError, match="calibrated to open"):
        generate(NoModel(), type("T", (), {"padding_side": "left", "eos_token_id": 0})(), ["hi"],
                    ChainMarkConfig(KEY, rho=0.5), gate)


def test_record_signals_and_reset():
    ids, scores = random_case(9)
    proc = ChainMarkLogitsProcessor(ChainMarkConfig(KEY, gate="all", rho=1.0), record_signals=True)
    proc(ids, scores)
    proc(ids, scores)
    assert len(proc.entropy) == len(proc.gap) == len(proc.gated) == 2
    torch.testing.assert_close(proc.entropy[0], entropy(scores))
    proc.reset()
    assert not proc.entropy and not proc.forced


def test_state_table_lives_on_the_requested_device():
    proc = ChainMarkLogitsProcessor(ChainMarkConfig(KEY, gate="all", rho=1.0), vocab_size=64, device="cpu")
    assert proc._table is not None and proc._table.device.type == "cpu"
    assert proc._candidates is not None and proc._candidates.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_processor_on_cuda_matches_cpu():
    ids, scores = random_case(10, V=500)
    cfg = ChainMarkConfig(KEY, S=5, rho=0.5)
    gate = Gate("high_entropy", float(entropy(scores).median()), rho=0.5)  # the median opens half the rows
    cpu = ChainMarkLogitsProcessor(cfg, gate)(ids, scores)
    proc = ChainMarkLogitsProcessor(cfg, gate, vocab_size=500, device="cuda")
    gpu = proc(ids.cuda(), scores.cuda())
    assert proc._table.device.type == "cuda"
    assert torch.equal(gpu.cpu(), cpu)


# ---- inside transformers' generate, on a tiny random model --------------
def tiny_model(vocab: int = 96):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


def test_every_forced_token_follows_its_predecessor_in_model_generate():
    from transformers import LogitsProcessorList

    model = tiny_model()
    cfg = ChainMarkConfig(KEY, S=5, gate="all", rho=1.0)
    proc = ChainMarkLogitsProcessor(cfg, vocab_size=96)
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = (ids != 0).long()
    torch.manual_seed(1)
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=20,
                         min_new_tokens=20, logits_processor=LogitsProcessorList([proc]), pad_token_id=0)
    table = state_table(KEY, 96, 5)
    for row in out.tolist():
        states = table[row[4:]]  # last prompt token, then the generated ones
        assert np.all((states[:-1] + 1) % 5 == states[1:])


@pytest.mark.parametrize("row_path", [True, False])
def test_prompt_alone_and_left_padded_in_a_batch_generate_the_same(row_path):
    """Model-level padding check: greedy decoding with every step gated. The same
    prompt, alone and left-padded next to a longer prompt, must give the same
    generated ids, forced flags, states and entropies (the model sees the padding
    only through the attention mask and the position ids)."""
    from transformers import LogitsProcessorList

    model = tiny_model()
    cfg = ChainMarkConfig(KEY, S=5, gate="all", rho=1.0)
    table = state_table(KEY, 96, 5)
    short, long = [5, 6, 7], [8, 9, 10, 11, 12, 13, 14]

    def run(rows):
        width = max(map(len, rows))
        ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])  # left padding, pad id 0
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        proc = ChainMarkLogitsProcessor(cfg, vocab_size=96, record_signals=True)
        proc.row_path = row_path
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=16,
                                 min_new_tokens=16, logits_processor=LogitsProcessorList([proc]),
                                 pad_token_id=0, eos_token_id=None)
        new = out[:, width:]
        return (new, torch.stack(proc.forced, 1), torch.stack(proc.entropy, 1))

    alone_ids, alone_forced, alone_h = run([short])
    batch_ids, batch_forced, batch_h = run([short, long])
    assert alone_ids.shape == (1, 16)
    assert torch.equal(batch_ids[0], alone_ids[0])
    assert torch.equal(batch_forced[0], alone_forced[0]) and bool(alone_forced.all())
    assert torch.allclose(batch_h[0], alone_h[0], atol=1e-4)
    walk = table[[short[-1]] + alone_ids[0].tolist()]  # states, from the prompt's last token on
    assert np.all((walk[:-1] + 1) % 5 == walk[1:])
    walk_long = table[[long[-1]] + batch_ids[1].tolist()]  # the longer prompt walks its own cycle
    assert np.all((walk_long[:-1] + 1) % 5 == walk_long[1:])


# ---- the real model (slow) ----------------------------------------------
PROMPTS = [
    "Explain photosynthesis in a comprehensive way.",
    "Write a short story about a lighthouse keeper.",
    "Why is the sky blue?",
    "Describe the water cycle for a ten-year-old.",
    "What are the benefits of regular exercise?",
    "Explain how a bicycle stays upright.",
    "Give three tips for learning a new language.",
    "What is a black hole?",
]


@pytest.fixture(scope="module")
def model_and_tokenizer():
    from cmlab.harness.models import load_model

    return load_model(device="cpu")


@pytest.mark.slow
def test_generate_with_every_position_gated_walks_the_cycle(model_and_tokenizer):
    from chainmark.embed import generate

    model, tok = model_and_tokenizer
    cfg = ChainMarkConfig(KEY, S=5, gate="all", rho=1.0)
    gens = generate(model, tok, PROMPTS[:4], cfg, sampling=Sampling(max_new_tokens=24, batch_size=4))
    for g in gens:  # prompts of different lengths: left padding is exercised
        assert g.n_tokens > 0 and g.rho_realised == 1.0
        walk = [g.prev_state] + g.states
        assert all((a + 1) % 5 == b for a, b in zip(walk, walk[1:]))
        assert g.prompt_ids and g.prompt_ids[-1] in tok(tok.decode(g.prompt_ids)).input_ids


@pytest.mark.slow
def test_watermarked_generations_are_detected_unwatermarked_mostly_not(model_and_tokenizer):
    """At n ~ 48 and rho = 0.5 the expected z is rho sqrt((S-1)(n-1)) ~ 7, far above
    z_0.01 = 2.33, so every watermarked text must be flagged. Unwatermarked texts are
    flagged with probability alpha (about 2% on real text, the paper reports); among 8,
    three or more false alarms has probability < 0.1% even at 2%."""
    from chainmark.detection import detect
    from chainmark.embed import calibrate_gate, generate

    model, tok = model_and_tokenizer
    gate = calibrate_gate(model, tok, PROMPTS[:4], "high_entropy", 0.5,
                          sampling=Sampling(max_new_tokens=24, batch_size=4))
    cfg = ChainMarkConfig(KEY, S=5, rho=0.5)
    marked = generate(model, tok, PROMPTS, cfg, gate, sampling=Sampling(max_new_tokens=48, min_new_tokens=40,
                                                                        batch_size=8))
    plain = generate(model, tok, PROMPTS, None, sampling=Sampling(max_new_tokens=48, min_new_tokens=40,
                                                                  batch_size=8))
    hits = [detect(g.token_ids, cfg, alpha=0.01, test="z").is_watermarked for g in marked]
    false_alarms = [detect(g.token_ids, cfg, alpha=0.01, test="z").is_watermarked for g in plain]
    assert all(hits)
    assert sum(false_alarms) <= 2
    assert all(g.states is None and not any(g.forced) for g in plain)


class _NaiveChainMark:
    """The watermark step written plainly (full softmax entropy, full-width mask), as a
    reference for the optimised processor: same gate decisions, same forced tokens."""

    def __init__(self, config: ChainMarkConfig, gate, vocab_size: int):
        from chainmark.gate_signals import entropy

        self.entropy_of = entropy
        self.gate, self.S = gate, config.S
        self.table = torch.as_tensor(state_table(config.key, vocab_size, config.S))
        self.successor = torch.as_tensor(np.array(config.topo.matrix), dtype=torch.bool)
        self.gated: list[list[bool]] = []

    def __call__(self, input_ids, scores):
        flags = self.gate.flags_from_signal(self.entropy_of(scores))
        allowed = self.successor[self.table[input_ids[:, -1]]][:, self.table]
        masked = scores.masked_fill(~allowed, float("-inf"))
        forced = masked.max(dim=-1)
        out = scores.clone()
        for r in torch.nonzero(flags).flatten().tolist():
            out[r].fill_(float("-inf"))
            out[r, forced.indices[r]] = scores[r, forced.indices[r]]
        self.gated.append(flags.tolist())
        return out


class _Lockstep:
    """The plain step and both paths of the optimised processor, called on the same ids and scores at every step
    of one generation: each step's processed scores must be identical (bitwise), and the plain step's go on to
    sampling. Generating three times, once per processor, would draw the same tokens only if the three agreed at
    every step: comparing them at every step checks that on every row, and costs one generation instead of three."""

    def __init__(self, naive: "_NaiveChainMark", procs: dict[str, ChainMarkLogitsProcessor]):
        self.naive, self.procs, self.steps = naive, procs, 0

    def __call__(self, input_ids, scores):
        expected = self.naive(input_ids, scores.clone())
        for name, proc in self.procs.items():
            got = proc(input_ids, scores.clone())
            assert torch.equal(got, expected), f"{name}: the processed scores differ at step {self.steps}"
        self.steps += 1
        return expected


@pytest.fixture(scope="module")
def operating_point(model_and_tokenizer):
    """The paper's operating point (S = 5, rho = 0.5, high-entropy gate) with its gate calibrated once on a pilot."""
    from chainmark.embed import calibrate_gate

    model, tok = model_and_tokenizer
    cfg = ChainMarkConfig(b"operating-point-test-key", S=5, rho=0.5, gate="high_entropy")
    prompts = ["Explain photosynthesis in a comprehensive way.", "Write a short story about a lighthouse keeper.",
               "Why is the sky blue?", "What does a compiler do?"]
    return cfg, calibrate_gate(model, tok, prompts[:2], "high_entropy", 0.5,
                               sampling=Sampling(max_new_tokens=16)), prompts


@pytest.mark.slow
@pytest.mark.parametrize("seed", [42, 7, 2026])
def test_operating_point_generation_matches_a_plain_reference_step(model_and_tokenizer, operating_point, seed):
    """At the paper's operating point (S = 5, rho = 0.5, high-entropy gate) the optimised
    processor, on its CPU row path and its batched path, generates exactly the tokens and
    gate decisions of a plainly written step on the embedded model (several prompts, seeds).

    The three steps run in lockstep in one generation (:class:`_Lockstep`): at each of the 40 steps every
    row's processed scores are the plain step's bit for bit, so each processor, generating alone with the
    same seed, would sample the plain step's tokens."""
    from transformers import LogitsProcessorList

    from chainmark.embed import chat_prompt, logits_width

    model, tok = model_and_tokenizer
    cfg, gate, prompts = operating_point
    V = logits_width(model)
    enc = tok([chat_prompt(tok, p) for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False)
    naive = _NaiveChainMark(cfg, gate, V)
    procs = {}
    for row_path in (True, False):
        procs[f"row_path={row_path}"] = ChainMarkLogitsProcessor(cfg, gate, vocab_size=V, record_signals=True)
        procs[f"row_path={row_path}"].row_path = row_path
    lockstep = _Lockstep(naive, procs)
    torch.manual_seed(seed)
    with torch.no_grad():
        model.generate(**enc, do_sample=True, temperature=0.7, top_k=0, top_p=1.0, max_new_tokens=40,
                       min_new_tokens=40, logits_processor=LogitsProcessorList([lockstep]),
                       pad_token_id=tok.pad_token_id)
    assert lockstep.steps == 40
    expected_gated = np.array(naive.gated).T
    assert 0 < expected_gated.mean() < 1  # the gate really opens and closes at this operating point
    for name, proc in procs.items():
        np.testing.assert_array_equal(torch.stack(proc.gated, 1).numpy(), expected_gated, err_msg=name)
