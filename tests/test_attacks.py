"""Tests for cmlab.comparison.attacks, .rewrites and .adversary: the edit counts, determinism, delta_eff,
the (1-delta)^2 law, the Monte Carlo."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from cmlab.comparison import adversary as D
from cmlab.comparison import attacks as A
from cmlab.comparison import rewrites as R
from chainmark.config import ChainMarkConfig
from chainmark.detection import detect
from cmlab.harness.grids import _simulate_watermarked_ids
from chainmark.partition import state_table
from chainmark.topology import Topology

KEY = b"attack-test-key"
V = 49152  # the embedded model's logit width: a realistic, near-uniform partition
S = 5
CONFIG = ChainMarkConfig(KEY, S=S)  # what the keyed adversary holds: the key, S and the clockwork


# --------------------------------------------------------------------------- helpers


def watermarked_sequences(count: int, n: int, rho: float, seed: int = 7) -> np.ndarray:
    """Synthetic ChainMark output: each step is forced to the next state with probability rho."""
    return _simulate_watermarked_ids(count, n, ChainMarkConfig(KEY, S=S, rho=rho), V, seed=seed)


def mean_ratio_and_se(seqs: np.ndarray, attack) -> tuple[float, float]:
    """Mean and standard error of z_post / z_pre over sequences, item i with stream i."""
    attacked = attack.apply_ids([row.tolist() for row in seqs])
    ratios = np.array([detect(b, CONFIG, test="z").z / detect(a.tolist(), CONFIG, test="z").z
                       for a, b in zip(seqs, attacked)])
    return float(ratios.mean()), float(ratios.std(ddof=1) / math.sqrt(len(ratios)))


def partition_slack(gap: float, delta: float) -> float:
    """Deterministic bound on the bias from the partition not being exactly uniform.

    A pair touching a fresh token is legal with probability sum_s pi_s pi_{s+1}
    (or pi_s for one fresh end) instead of exactly 1/S; with eps = max|pi_s - 1/S|
    that moves phi by at most 2 eps on the at most 1-(1-delta)^2 touched pairs,
    and a fresh draw equal to the original (probability 1/V) keeps a pair intact.
    """
    pi = np.bincount(state_table(KEY, V, S), minlength=S) / V
    eps = float(np.abs(pi - 1 / S).max())
    return (1 - (1 - delta) ** 2) * (2 * eps + 1 / V) / gap


# --------------------------------------------------------------------------- substitution


@pytest.mark.parametrize("delta", [0.0, 0.05, 0.07, 0.2, 0.293, 0.5, 1.0])
@pytest.mark.parametrize("n", [1, 13, 100, 200])
def test_substitution_edits_exactly_ceil_delta_n_positions(delta, n):
    ids = list(range(1, n + 1))  # no id is 0 ...
    out = A.Substitution(delta, vocab_size=1, seed=43).edit(ids)  # ... and every draw is 0
    changed = sum(a != b for a, b in zip(ids, out))
    assert len(out) == n
    assert changed == math.ceil(round(delta * n, 9)) == A.n_edits(delta, n)


def test_n_edits_ignores_float_noise():
    assert 0.07 * 100 > 7  # the float product overshoots ...
    assert A.n_edits(0.07, 100) == 7  # ... but is not rounded up to 8
    assert A.n_edits(0.071, 100) == 8


def test_substitution_draws_may_equal_the_original():
    ids = [0, 1] * 100
    out = A.Substitution(1.0, vocab_size=2, seed=43).edit(ids)
    assert sum(a == b for a, b in zip(ids, out)) > 50  # about half, by chance


def test_attacks_are_deterministic_under_a_seed():
    ids = list(range(500, 800))
    for attack in (A.Substitution(0.3, V), A.Deletion(0.3), A.Insertion(0.3, V)):
        assert attack.edit(ids, 43) == attack.edit(ids, 43)
        assert attack.edit(ids, 43) != attack.edit(ids, 44)
        assert attack.edit(ids) == attack.edit(ids, 43)  # the attack's own seed: the paper's 43
    assert A.Substitution(0.3, V, seed=44).edit(ids) == A.Substitution(0.3, V).edit(ids, 44)


def test_larger_delta_edits_a_superset():
    ids = list(range(1000, 1400))
    small = A.Substitution(0.1, V).edit(ids)
    large = A.Substitution(0.3, V).edit(ids)
    edited_small = {i for i, (a, b) in enumerate(zip(ids, small)) if a != b}
    assert all(large[i] == small[i] for i in edited_small)


def test_substitution_accepts_arrays_and_tensors():
    torch = pytest.importorskip("torch")
    ids = list(range(50))
    sub = A.Substitution(0.2, V)
    want = sub.edit(ids)
    assert sub.edit(np.array(ids)) == want
    assert sub.edit(torch.tensor(ids)) == want


# --------------------------------------------------------------------------- deletion / insertion


def _is_subsequence(short: list[int], long: list[int]) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


@pytest.mark.parametrize("delta", [0.0, 0.1, 0.25, 0.5])
def test_deletion_and_insertion_counts(delta):
    ids = list(range(10, 210))
    m = A.n_edits(delta, len(ids))
    deleted = A.Deletion(delta).edit(ids)
    inserted = A.Insertion(delta, V).edit(ids)
    assert len(deleted) == len(ids) - m and _is_subsequence(deleted, ids)
    assert len(inserted) == len(ids) + m and _is_subsequence(ids, inserted)


def test_insertion_positions_are_uniform():
    # a single insertion into n tokens lands in each of the n + 1 gaps equally often
    n, trials = 4, 5000
    counts = np.zeros(n + 1)
    for s in range(trials):
        out = A.Insertion(0.25, vocab_size=1).edit([1] * n, s)  # inserted token is 0
        counts[out.index(0)] += 1
    expected = trials / (n + 1)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 18.47  # chi-square, 4 degrees of freedom, p = 0.001


# --------------------------------------------------------------------------- edit fraction


@pytest.mark.parametrize("original, attacked, expected", [
    ([1, 2, 3, 4], [1, 2, 3, 4], 0.0),
    ([1, 2, 3, 4], [1, 9, 3, 4], 0.25),          # one substitution
    ([1, 2, 3, 4], [1, 3, 4], 0.25),             # one deletion
    ([1, 2, 3, 4], [1, 2, 7, 3, 4], 0.25),       # one insertion
    ([1, 2, 3, 4], [2, 1, 3, 4], 0.5),           # a swap costs two edits
    ([1, 2, 3, 4], [], 1.0),
    ([1, 2], [5, 6, 7, 8], 2.0),                 # can exceed 1
    ([], [], 0.0),
])
def test_edit_fraction_known_pairs(original, attacked, expected):
    assert A.edit_fraction(original, attacked) == pytest.approx(expected)


def test_edit_fraction_of_attacks_matches_their_rate():
    ids = list(range(300, 700))
    assert A.edit_fraction(ids, A.Deletion(0.2).edit(ids)) == pytest.approx(0.2)
    assert A.edit_fraction(ids, A.Insertion(0.2, V).edit(ids)) == pytest.approx(0.2)
    # substitution: at most ceil(delta n) edits; fewer only if a draw repeats the original
    assert 0.19 <= A.edit_fraction(ids, A.Substitution(0.2, V).edit(ids)) <= 0.2


def test_edit_fraction_rejects_an_empty_original():
    with pytest.raises(ValueError, match="original_ids"):
        A.edit_fraction([], [1])


# --------------------------------------------------------------------------- the (1-delta)^2 law


@pytest.mark.parametrize("delta", [0.1, 0.3, 0.5])
def test_mean_z_ratio_after_substitution_is_one_minus_delta_squared(delta):
    n, rho, count = 200, 0.5, 300
    seqs = watermarked_sequences(count, n, rho)
    mean, se = mean_ratio_and_se(seqs, A.Substitution(delta, V, seed=43))
    gap = rho * (S - 1) / S  # phi_pre - p0 in expectation
    finite_n = abs(D.predicted_z_ratio("substitution", delta, n) - (1 - delta) ** 2)
    tol = 4 * se + finite_n + partition_slack(gap, delta)
    assert abs(mean - (1 - delta) ** 2) <= tol, (mean, (1 - delta) ** 2, tol)


@pytest.mark.parametrize("kind, delta", [("deletion", 0.2), ("deletion", 0.4), ("insertion", 0.3)])
def test_mean_z_ratio_after_deletion_and_insertion(kind, delta):
    n, rho, count = 200, 0.5, 300
    seqs = watermarked_sequences(count, n, rho, seed=11)
    attack = R.make_attack(kind, delta=delta, **({"vocab_size": V} if kind == "insertion" else {}))
    mean, se = mean_ratio_and_se(seqs, attack)
    predicted = D.predicted_z_ratio(kind, delta, n, rho=rho, S=S)
    gap = rho * (S - 1) / S
    assert abs(mean - predicted) <= 4 * se + partition_slack(gap, delta), (mean, predicted, se)


# --------------------------------------------------------------------------- the theorem's Monte Carlo on states


def _reference_walks(trials, n, S, rho, rng, successors=None):
    """The walk simulation as chapter 7 first wrote it (clockwork) and as its k = 2 exercise did: the
    package's simulate_walks must draw the same numbers in the same order."""
    states = np.empty((trials, n), dtype=np.int64)
    states[:, 0] = rng.integers(0, S, trials)
    for i in range(1, n):
        forced = rng.random(trials) < rho
        if successors is None:
            states[:, i] = np.where(forced, (states[:, i - 1] + 1) % S, rng.integers(0, S, trials))
        else:
            step = successors[states[:, i - 1], rng.integers(0, successors.shape[1], trials)]
            states[:, i] = np.where(forced, step, rng.integers(0, S, trials))
    return states


def _reference_blind(states, delta, S, rng):
    hit = rng.random(states.shape) < delta
    return np.where(hit, rng.integers(0, S, states.shape), states)


@pytest.mark.parametrize("S, rho", [(3, 0.25), (5, 0.5), (12, 1.0), (5, 0.0)])
def test_simulate_walks_draws_like_the_chapters_first_simulation(S, rho):
    mine, ref = np.random.default_rng(43), np.random.default_rng(43)
    for n in (1, 2, 40):
        walks = D.simulate_walks(50, n, S, rho, mine)
        want = _reference_walks(50, n, S, rho, ref)
        assert walks.dtype == np.int64 and walks.shape == (50, n)
        np.testing.assert_array_equal(walks, want)
        for d in (0.0, 0.3, 1.0):  # one generator shared by walks and attacks, in the chapter's order
            np.testing.assert_array_equal(D.blind_substitution(walks, d, S, mine), _reference_blind(want, d, S, ref))
    np.testing.assert_array_equal(D.simulate_walks(20, 30, S, rho, 7), D.simulate_walks(20, 30, S, rho, 7))
    np.testing.assert_array_equal(D.simulate_walks(20, 30, S, rho), D.simulate_walks(20, 30, S, rho, 43))


def test_simulate_walks_on_a_k_regular_topology():
    soft = Topology.soft_cycle(5)
    succ = np.array([soft.successors(s) for s in range(5)])
    walks = D.simulate_walks(300, 60, 5, 1.0, np.random.default_rng(1), topology=soft)
    np.testing.assert_array_equal(walks, _reference_walks(300, 60, 5, 1.0, np.random.default_rng(1), succ))
    assert soft.is_valid(walks[:, :-1], walks[:, 1:]).all()  # rho = 1: every step legal
    assert D.simulate_walks(5, 9, 5, 0.5, 3, topology="soft_cycle").shape == (5, 9)
    with pytest.raises(ValueError, match="k-regular"):
        irregular = Topology.from_matrix([[0, 1, 1], [1, 0, 0], [1, 0, 0]], allow_irregular=True)
        D.simulate_walks(5, 9, 3, 0.5, topology=irregular)


@pytest.mark.parametrize("delta", [0.1, 0.3, 0.5])
def test_blind_substitution_on_walks_follows_the_law(delta):
    S, rho, trials, n = 5, 0.5, 4000, 100
    rng = np.random.default_rng(5)
    walks = D.simulate_walks(trials, n, S, rho, rng)

    def excess(w):
        return (((w[:, 1:] - w[:, :-1]) % S == 1).mean(axis=1) - 1 / S)

    before, after = excess(walks), excess(D.blind_substitution(walks, delta, S, rng))
    ratio = after.mean() / before.mean()
    se = after.std(ddof=1) / np.sqrt(trials) / before.mean()
    assert abs(ratio - (1 - delta) ** 2) <= 4 * se + 0.01, (ratio, (1 - delta) ** 2, se)


def test_monte_carlo_argument_errors():
    with pytest.raises(ValueError, match="trials"):
        D.simulate_walks(0, 10, 5, 0.5)
    with pytest.raises(TypeError, match="n"):
        D.simulate_walks(10, 2.5, 5, 0.5)
    with pytest.raises(ValueError, match="rho"):
        D.simulate_walks(10, 10, 5, 1.5)
    with pytest.raises(ValueError, match="S"):
        D.simulate_walks(10, 10, 1, 0.5)
    with pytest.raises(ValueError, match="delta"):
        D.blind_substitution(np.zeros((2, 3), dtype=int), -0.1, 5)
    with pytest.raises(TypeError, match="integer"):
        D.blind_substitution(np.zeros((2, 3)), 0.1, 5)


def test_predicted_ratio_limits():
    assert D.predicted_z_ratio("substitution", 0.2) == pytest.approx(0.64)
    assert D.predicted_z_ratio("substitution", 0.2, 10 ** 6) == pytest.approx(0.64, abs=1e-5)
    assert D.predicted_z_ratio("deletion", 0.3) == pytest.approx(0.7 ** 1.5)
    assert D.predicted_z_ratio("deletion", 0.3, 10 ** 4) == pytest.approx(0.7 ** 1.5, abs=1e-3)
    assert D.predicted_z_ratio("insertion", 0.3, 10 ** 5) == pytest.approx(1.3 ** -1.5, abs=1e-4)
    delta_star = 1 - 1 / math.sqrt(2)
    assert D.predicted_z_ratio("substitution", delta_star) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="kind"):
        D.predicted_z_ratio("paraphrase", 0.2)


# --------------------------------------------------------------------------- the Attack interface


def test_attack_registry_and_levels():
    assert set(R._ATTACKS) == {"substitution", "deletion", "insertion", "paraphrase", "back_translation"}
    sub = R.make_attack("substitution", delta=0.2, vocab_size=V)
    assert sub.level == "tokens" and sub.describe()["delta"] == 0.2
    assert A.Deletion(0.1).level == A.Insertion(0.1, V).level == "tokens"
    assert R.Paraphrase.level == R.BackTranslation.level == "text"
    with pytest.raises(ValueError, match="unknown attack"):
        R.make_attack("shuffle")


def test_apply_ids_gives_each_item_its_own_stream():
    ids = list(range(100, 300))
    sub = A.Substitution(0.2, V, seed=43)
    first, second = sub.apply_ids([ids, ids])
    assert first != second
    assert sub.apply_ids([ids, ids]) == [first, second]
    # item i gets the i-th stream spawned from the seed; edit alone uses the seed itself
    streams = np.random.SeedSequence(43).spawn(2)
    assert [first, second] == [sub.edit(ids, np.random.default_rng(s)) for s in streams]
    assert sub.edit(ids) == sub.edit(ids, 43) != first
    assert sub.apply_ids([ids], object()) == [first]  # a tokenizer is accepted and not needed


def test_apply_ids_with_names_derives_each_stream_from_the_seed_and_the_name():
    ids = list(range(100, 300))
    sub = A.Substitution(0.2, V, seed=43)
    a, b = sub.apply_ids([ids, ids], names=["m/wiki/0000", "m/wiki/0001"])
    assert a != b
    # the name, not the position, picks the stream: reordered or alone, the same edits
    assert sub.apply_ids([ids, ids], names=["m/wiki/0001", "m/wiki/0000"]) == [b, a]
    assert sub.apply_ids([ids], names=["m/wiki/0001"]) == [b]
    assert A.Substitution(0.2, V, seed=44).apply_ids([ids], names=["m/wiki/0001"]) != [b]
    # the stream is record_seed's, and it is nested in delta like the plain attack
    assert b == sub.edit(ids, np.random.default_rng(A._record_seed(43, "m/wiki/0001")))
    assert b == sub.edit(ids, A._record_seed(43, "m/wiki/0001"))
    small = A.Substitution(0.1, V, seed=43).apply_ids([ids], names=["m/wiki/0001"])[0]
    assert {i for i, (x, y) in enumerate(zip(ids, small)) if x != y} <= \
        {i for i, (x, y) in enumerate(zip(ids, b)) if x != y}
    # a stable hash: the same words on every machine and every Python (no PYTHONHASHSEED)
    assert A._record_seed(43, "chainmark/wiki/0003").spawn_key == A._record_seed(43, "chainmark/wiki/0003").spawn_key
    assert A._record_seed(43, "x").spawn_key == (1108767021, 1152394935, 2843501057, 4113739003)
    with pytest.raises(ValueError, match="one entry per item"):
        sub.apply_ids([ids, ids], names=["only one"])
    with pytest.raises(TypeError, match="names"):
        sub.apply_ids([ids], names="m/wiki/0000")
    with pytest.raises(TypeError, match="Generator"):
        A._record_seed(np.random.default_rng(0), "x")
    with pytest.raises(TypeError, match="record"):
        A._record_seed(43, 7)


def upper(texts, source, target):
    """A stand-in Translator: (texts, source, target) -> texts."""
    return [t.upper() for t in texts]


def test_text_attack_through_apply_ids():
    class Tok:  # a character-level stand-in tokenizer
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(i) for i in ids)

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

    bt = R.BackTranslation("fr", upper)
    assert bt.apply_ids([[104, 105]], Tok()) == [[72, 73]]
    assert bt.apply_ids([[104, 105]], Tok(), names=["m/wiki/0000"]) == [[72, 73]]  # names do not matter
    with pytest.raises(ValueError, match="tokenizer"):
        bt.apply_ids([[104, 105]])
    with pytest.raises(ValueError, match="one entry per item"):
        bt.apply_ids([[104, 105]], Tok(), names=[])


def test_a_token_attack_does_not_take_text():
    with pytest.raises(TypeError, match="apply_ids"):
        A.Substitution(0.2, V).apply_text(["some text"])


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_bad_delta_is_a_value_error(bad):
    with pytest.raises(ValueError, match="delta"):
        A.Substitution(bad, V)


def test_bad_types_are_type_errors():
    with pytest.raises(TypeError, match="delta"):
        A.Deletion("0.2")
    with pytest.raises(TypeError, match="delta"):
        A.Deletion(True)
    with pytest.raises(TypeError, match="token_ids"):
        A.Substitution(0.2, V).edit("some text")
    with pytest.raises(ValueError, match="vocab_size"):
        A.Insertion(0.5, 0)
    with pytest.raises(ValueError, match="token_ids"):
        A.Substitution(0.2, V).edit([1, -2, 3])


def test_empty_and_tiny_inputs():
    assert A.Substitution(0.5, V).edit([]) == [] and A.Deletion(0.5).edit([]) == []
    assert A.Insertion(0.5, V).edit([]) == []
    assert A.Deletion(1.0).edit([7]) == []
    assert len(A.Insertion(1.0, V).edit([7])) == 2


# --------------------------------------------------------------------------- back-translation plumbing


def test_back_translation_calls_the_translator_once_per_leg_on_the_whole_batch():
    calls = []

    def translator(texts, source, target):
        calls.append((list(texts), source, target))
        return [f"{source}>{target}|{t}" for t in texts]

    bt = R.BackTranslation("zh", translator)
    assert bt.apply_text(["hello", "world"]) == ["zh>en|en>zh|hello", "zh>en|en>zh|world"]
    assert calls == [(["hello", "world"], "en", "zh"), (["en>zh|hello", "en>zh|world"], "zh", "en")]
    assert R.BackTranslation("de", translator, source="fr").apply_text(["a"]) == ["de>fr|fr>de|a"]
    assert bt.apply_text([]) == []
    assert bt.describe() == {"attack": "back_translation", "level": "text", "pivot": "zh", "source": "en",
                             "translator": "translator"}


def test_back_translation_takes_one_translator_protocol():
    # a model id, None, a one-argument round trip, a non-callable: each a TypeError that says what to pass
    with pytest.raises(TypeError, match=r"Seq2SeqTranslator\('facebook/nllb"):
        R.BackTranslation("zh", "facebook/nllb-200-distilled-600M")
    with pytest.raises(TypeError, match="LMTranslator"):
        R.BackTranslation("zh", None)
    with pytest.raises(TypeError, match="texts, source, target"):
        R.BackTranslation("zh", lambda text: text)
    with pytest.raises(TypeError, match="translator"):
        R.BackTranslation("zh", 42)
    # a per-text translator (text, source, target) -> text is caught when it returns one string
    with pytest.raises(TypeError, match="list of strings"):
        R.BackTranslation("zh", lambda text, source, target: f"{target}:{text}").apply_text(["a"])
    with pytest.raises(ValueError, match="returned 1 texts for 2"):
        R.BackTranslation("zh", lambda texts, source, target: texts[:1]).apply_text(["a", "b"])
    with pytest.raises(TypeError, match="position 0"):
        R.BackTranslation("zh", lambda texts, source, target: [None] * len(texts)).apply_text(["a"])


def test_back_translation_argument_errors():
    with pytest.raises(ValueError, match="language"):
        R.BackTranslation("klingon", upper)
    with pytest.raises(ValueError, match="language"):
        R.BackTranslation("fr", upper, source="klingon")
    with pytest.raises(TypeError, match="texts"):
        R.BackTranslation("fr", upper).apply_text("a single string")


def test_language_codes():
    assert R._language("zh") == ("zho_Hans", "Chinese (Simplified)")
    assert R._language("fra_Latn")[0] == "fra_Latn"
    assert R._language("swh_Latn") == ("swh_Latn", "swh_Latn")


def _tiny_nllb():
    """A randomly initialised, tiny NLLB-architecture model and a real NllbTokenizer, offline."""
    transformers = pytest.importorskip("transformers")
    import torch

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for ch in "▁abcdefghijklmnopqrstuvwxyz":
        vocab[ch] = len(vocab)
    tok = transformers.NllbTokenizer(vocab=vocab, merges=[])
    config = transformers.M2M100Config(
        vocab_size=len(tok), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    torch.manual_seed(0)
    return transformers.M2M100ForConditionalGeneration(config).eval(), tok


def test_seq2seq_translator_runs_the_nllb_code_path():
    model, tok = _tiny_nllb()
    seen = []
    original = model.generate

    def spy(**kwargs):
        seen.append((tok.src_lang, kwargs["forced_bos_token_id"]))
        out = original(**kwargs)
        assert (out[:, 1] == kwargs["forced_bos_token_id"]).all()  # the target language is forced
        return out

    model.generate = spy
    translator = R.Seq2SeqTranslator(model, tok, max_new_tokens=4, num_beams=1)
    out = R.BackTranslation("zh", translator).apply_text(["hello world", "abc"])
    assert len(out) == 2 and all(isinstance(t, str) for t in out)
    assert seen == [("eng_Latn", tok.convert_tokens_to_ids("zho_Hans")),
                    ("zho_Hans", tok.convert_tokens_to_ids("eng_Latn"))]
    bt = R.BackTranslation("fr", translator)
    assert bt.describe()["translator"] == translator.name


def test_seq2seq_translator_needs_a_tokenizer_for_a_loaded_model():
    model, _ = _tiny_nllb()
    with pytest.raises(ValueError, match="tokenizer"):
        R.Seq2SeqTranslator(model)


def test_translator_or_fallback_falls_back_to_the_chat_model_once(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(R, "_SEQ2SEQ_LOADED", {})
    missing = str(tmp_path / "no-such-translator")  # a model that cannot load (offline or not)
    chat = object()  # the chat model: LMTranslator only keeps it until it translates
    first = R.translator_or_fallback(chat, "tok", max_new_tokens=12, batch_size=3, seed=5, translator=missing)
    assert isinstance(first, R.LMTranslator)
    assert (first.model, first.tokenizer, first.max_new_tokens, first.batch_size, first.seed) == (chat, "tok", 12, 3, 5)
    assert re.fullmatch(rf"could not load {re.escape(missing)} \(\w+\); the chat model translates\n",
                        capsys.readouterr().out)
    again = R.translator_or_fallback(chat, "tok", max_new_tokens=12, batch_size=3, seed=6, translator=missing)
    assert isinstance(again, R.LMTranslator) and again.seed == 6
    assert capsys.readouterr().out == ""  # the failure is kept: no second attempt, no second line
    skipped = R.translator_or_fallback(chat, "tok", max_new_tokens=12, batch_size=3, translator=missing + "-2",
                                       use_seq2seq=False)
    assert isinstance(skipped, R.LMTranslator) and skipped.seed == R.ATTACK_SEED
    assert (missing + "-2", 3) not in R._SEQ2SEQ_LOADED  # not even tried
    assert capsys.readouterr().out == ""


def test_translator_or_fallback_loads_a_seq2seq_model_once(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(R, "_SEQ2SEQ_LOADED", {})
    model, tok = _tiny_nllb()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    first = R.translator_or_fallback(object(), None, max_new_tokens=12, batch_size=2, translator=str(tmp_path))
    assert isinstance(first, R.Seq2SeqTranslator) and first.batch_size == 2
    assert R.translator_or_fallback(object(), None, max_new_tokens=12, batch_size=2, seed=9,
                                    translator=str(tmp_path)) is first
    assert capsys.readouterr().out == ""
    assert len(R.BackTranslation("zh", first).apply_text(["abc"])) == 1


def test_clean_reply():
    assert R._clean_reply("Here is the rewritten text:\nThe sky is blue.") == "The sky is blue."
    assert R._clean_reply('"Quoted answer."') == "Quoted answer."
    assert R._clean_reply("Plain answer.") == "Plain answer."


# --------------------------------------------------------------------------- the informed adversary


def test_keyed_scrub_and_forge_need_few_edits():
    wm = watermarked_sequences(1, 200, 0.5, seed=3)[0].tolist()
    assert detect(wm, CONFIG, test="z").z > 8
    scrubbed = D.keyed_scrub(wm, CONFIG, V, target_z=2.326)
    assert detect(scrubbed, CONFIG, test="z").z < 2.326
    assert A.edit_fraction(wm, scrubbed) < 0.3  # far below what a blind attacker needs
    plain = np.random.default_rng(5).integers(0, V, size=200).tolist()
    forged = D.keyed_forge(plain, CONFIG, V, target_z=4.0)
    assert detect(forged, CONFIG, test="z").z > 4.0
    assert A.edit_fraction(plain, forged) < 0.3
    walk = D.random_walk_text(100, CONFIG, V)
    assert detect(walk, CONFIG, test="z").phi == 1.0


# --------------------------------------------------------------------------- with the real model


@pytest.mark.slow
def test_paraphrase_and_lm_back_translation_with_the_embedded_model():
    from cmlab.harness.models import load_model

    model, tok = load_model()
    text = "The cat sat on the warm mat and watched the rain fall outside."
    para = R.Paraphrase(model, tok, max_new_tokens=24)
    first = para.apply_text([text, ""])
    assert first[1] == "" and isinstance(first[0], str) and first[0].strip()
    assert para.apply_text([text, ""]) == first  # seeded
    translator = R.LMTranslator(model, tok, max_new_tokens=24)
    bt = R.BackTranslation("fr", translator).apply_text([text])
    assert len(bt) == 1 and isinstance(bt[0], str)
    assert "causal LM" in R._translator_name(translator)
