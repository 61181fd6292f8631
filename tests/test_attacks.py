"""Tests for chainmark.attacks: the edit counts, determinism, delta_eff, the (1-delta)^2 law."""
from __future__ import annotations

import math

import numpy as np
import pytest

from chainmark import attacks as A
from chainmark.detect import detect
from chainmark.partition import state_table

KEY = b"attack-test-key"
V = 49152  # the embedded model's logit width: a realistic, near-uniform partition
S = 5


# --------------------------------------------------------------------------- helpers


def watermarked_sequences(count: int, n: int, rho: float, seed: int = 7) -> np.ndarray:
    """Synthetic ChainMark output: each step is forced to the next state with probability rho."""
    table = state_table(KEY, V, S)
    by_state = [np.flatnonzero(table == s) for s in range(S)]
    rng = np.random.default_rng(seed)
    out = np.empty((count, n), dtype=np.int64)
    out[:, 0] = rng.integers(0, V, size=count)
    for i in range(1, n):
        free = rng.integers(0, V, size=count)
        nxt = (table[out[:, i - 1]] + 1) % S
        forced = np.array([by_state[s][rng.integers(len(by_state[s]))] for s in nxt])
        out[:, i] = np.where(rng.random(count) < rho, forced, free)
    return out


def mean_ratio_and_se(seqs: np.ndarray, attack) -> tuple[float, float]:
    """Mean and standard error of z_post / z_pre over sequences, item i with stream i."""
    attacked = attack.apply([row.tolist() for row in seqs])
    ratios = np.array([detect(b, KEY, S).z / detect(a.tolist(), KEY, S).z
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
    out = A.substitute(ids, delta, vocab_size=1, seed=43)  # ... and every draw is 0
    changed = sum(a != b for a, b in zip(ids, out))
    assert len(out) == n
    assert changed == math.ceil(round(delta * n, 9)) == A.n_edits(delta, n)


def test_n_edits_ignores_float_noise():
    assert 0.07 * 100 > 7  # the float product overshoots ...
    assert A.n_edits(0.07, 100) == 7  # ... but is not rounded up to 8
    assert A.n_edits(0.071, 100) == 8


def test_substitution_draws_may_equal_the_original():
    ids = [0, 1] * 100
    out = A.substitute(ids, 1.0, vocab_size=2, seed=43)
    assert sum(a == b for a, b in zip(ids, out)) > 50  # about half, by chance


def test_attacks_are_deterministic_under_a_seed():
    ids = list(range(500, 800))
    for fn in (lambda s: A.substitute(ids, 0.3, V, seed=s), lambda s: A.delete(ids, 0.3, seed=s),
               lambda s: A.insert(ids, 0.3, V, seed=s)):
        assert fn(43) == fn(43)
        assert fn(43) != fn(44)
    assert A.substitute(ids, 0.3, V) == A.substitute(ids, 0.3, V, seed=43)  # the paper's seed


def test_larger_delta_edits_a_superset():
    ids = list(range(1000, 1400))
    small = A.substitute(ids, 0.1, V)
    large = A.substitute(ids, 0.3, V)
    edited_small = {i for i, (a, b) in enumerate(zip(ids, small)) if a != b}
    assert all(large[i] == small[i] for i in edited_small)


def test_substitution_accepts_arrays_and_tensors():
    torch = pytest.importorskip("torch")
    ids = list(range(50))
    want = A.substitute(ids, 0.2, V)
    assert A.substitute(np.array(ids), 0.2, V) == want
    assert A.substitute(torch.tensor(ids), 0.2, V) == want


# --------------------------------------------------------------------------- deletion / insertion


def _is_subsequence(short: list[int], long: list[int]) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


@pytest.mark.parametrize("delta", [0.0, 0.1, 0.25, 0.5])
def test_deletion_and_insertion_counts(delta):
    ids = list(range(10, 210))
    m = A.n_edits(delta, len(ids))
    deleted = A.delete(ids, delta)
    inserted = A.insert(ids, delta, V)
    assert len(deleted) == len(ids) - m and _is_subsequence(deleted, ids)
    assert len(inserted) == len(ids) + m and _is_subsequence(ids, inserted)


def test_insertion_positions_are_uniform():
    # a single insertion into n tokens lands in each of the n + 1 gaps equally often
    n, trials = 4, 5000
    counts = np.zeros(n + 1)
    for s in range(trials):
        out = A.insert([1] * n, 0.25, vocab_size=1, seed=s)  # inserted token is 0
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
    assert A.edit_fraction(ids, A.delete(ids, 0.2)) == pytest.approx(0.2)
    assert A.edit_fraction(ids, A.insert(ids, 0.2, V)) == pytest.approx(0.2)
    # substitution: at most ceil(delta n) edits; fewer only if a draw repeats the original
    assert 0.19 <= A.edit_fraction(ids, A.substitute(ids, 0.2, V)) <= 0.2


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
    finite_n = abs(A.predicted_z_ratio("substitution", delta, n) - (1 - delta) ** 2)
    tol = 4 * se + finite_n + partition_slack(gap, delta)
    assert abs(mean - (1 - delta) ** 2) <= tol, (mean, (1 - delta) ** 2, tol)


@pytest.mark.parametrize("kind, delta", [("deletion", 0.2), ("deletion", 0.4), ("insertion", 0.3)])
def test_mean_z_ratio_after_deletion_and_insertion(kind, delta):
    n, rho, count = 200, 0.5, 300
    seqs = watermarked_sequences(count, n, rho, seed=11)
    attack = A.make_attack(kind, delta=delta, **({"vocab_size": V} if kind == "insertion" else {}))
    mean, se = mean_ratio_and_se(seqs, attack)
    predicted = A.predicted_z_ratio(kind, delta, n, rho=rho, S=S)
    gap = rho * (S - 1) / S
    assert abs(mean - predicted) <= 4 * se + partition_slack(gap, delta), (mean, predicted, se)


def test_predicted_ratio_limits():
    assert A.predicted_z_ratio("substitution", 0.2) == pytest.approx(0.64)
    assert A.predicted_z_ratio("substitution", 0.2, 10 ** 6) == pytest.approx(0.64, abs=1e-5)
    assert A.predicted_z_ratio("deletion", 0.3) == pytest.approx(0.7 ** 1.5)
    assert A.predicted_z_ratio("deletion", 0.3, 10 ** 4) == pytest.approx(0.7 ** 1.5, abs=1e-3)
    assert A.predicted_z_ratio("insertion", 0.3, 10 ** 5) == pytest.approx(1.3 ** -1.5, abs=1e-4)
    delta_star = 1 - 1 / math.sqrt(2)
    assert A.predicted_z_ratio("substitution", delta_star) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="kind"):
        A.predicted_z_ratio("paraphrase", 0.2)


# --------------------------------------------------------------------------- the Attack interface


def test_attack_registry_and_levels():
    assert set(A.ATTACKS) == {"substitution", "deletion", "insertion", "paraphrase", "back_translation"}
    sub = A.make_attack("substitution", delta=0.2, vocab_size=V)
    assert sub.level == "tokens" and sub.describe()["delta"] == 0.2
    assert A.Deletion(0.1).level == A.Insertion(0.1, V).level == "tokens"
    assert A.Paraphrase.level == A.BackTranslation.level == "text"
    with pytest.raises(ValueError, match="unknown attack"):
        A.make_attack("shuffle")


def test_apply_gives_each_item_its_own_stream():
    ids = list(range(100, 300))
    sub = A.Substitution(0.2, V, seed=43)
    first, second = sub.apply([ids, ids])
    assert first != second
    assert sub.apply([ids, ids]) == [first, second]
    assert sub(ids) == A.substitute(ids, 0.2, V, seed=43)


def test_apply_keyed_derives_each_stream_from_the_seed_and_the_name():
    ids = list(range(100, 300))
    sub = A.Substitution(0.2, V, seed=43)
    a, b = sub.apply_keyed([ids, ids], ["m/wiki/0000", "m/wiki/0001"])
    assert a != b
    # the name, not the position, picks the stream: reordered or alone, the same edits
    assert sub.apply_keyed([ids, ids], ["m/wiki/0001", "m/wiki/0000"]) == [b, a]
    assert sub.apply_keyed([ids], ["m/wiki/0001"]) == [b]
    assert A.Substitution(0.2, V, seed=44).apply_keyed([ids], ["m/wiki/0001"]) != [b]
    # the stream is record_seed's, and it is nested in delta like the plain attack
    assert b == A.substitute(ids, 0.2, V, seed=np.random.default_rng(A.record_seed(43, "m/wiki/0001")))
    small = A.Substitution(0.1, V, seed=43).apply_keyed([ids], ["m/wiki/0001"])[0]
    assert {i for i, (x, y) in enumerate(zip(ids, small)) if x != y} <= \
        {i for i, (x, y) in enumerate(zip(ids, b)) if x != y}
    # a stable hash: the same words on every machine and every Python (no PYTHONHASHSEED)
    assert A.record_seed(43, "chainmark/wiki/0003").spawn_key == A.record_seed(43, "chainmark/wiki/0003").spawn_key
    assert A.record_seed(43, "x").spawn_key == (1108767021, 1152394935, 2843501057, 4113739003)
    with pytest.raises(ValueError, match="one entry per item"):
        sub.apply_keyed([ids, ids], ["only one"])
    with pytest.raises(TypeError, match="names"):
        sub.apply_keyed([ids], "m/wiki/0000")
    with pytest.raises(TypeError, match="Generator"):
        A.record_seed(np.random.default_rng(0), "x")
    with pytest.raises(TypeError, match="record"):
        A.record_seed(43, 7)


def test_text_attack_through_apply_ids():
    class Tok:  # a character-level stand-in tokenizer
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(i) for i in ids)

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

    bt = A.BackTranslation("fr", translator=lambda text: text.upper())
    assert bt.apply_ids([[104, 105]], Tok()) == [[72, 73]]
    with pytest.raises(ValueError, match="tokenizer"):
        bt.apply_ids([[104, 105]])


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_bad_delta_is_a_value_error(bad):
    with pytest.raises(ValueError, match="delta"):
        A.substitute([1, 2, 3], bad, V)


def test_bad_types_are_type_errors():
    with pytest.raises(TypeError, match="delta"):
        A.delete([1, 2, 3], "0.2")
    with pytest.raises(TypeError, match="delta"):
        A.delete([1, 2, 3], True)
    with pytest.raises(TypeError, match="token_ids"):
        A.substitute("some text", 0.2, V)
    with pytest.raises(ValueError, match="vocab_size"):
        A.insert([1, 2], 0.5, 0)
    with pytest.raises(ValueError, match="token_ids"):
        A.substitute([1, -2, 3], 0.2, V)


def test_empty_and_tiny_inputs():
    assert A.substitute([], 0.5, V) == [] and A.delete([], 0.5) == [] and A.insert([], 0.5, V) == []
    assert A.delete([7], 1.0) == []
    assert len(A.insert([7], 1.0, V)) == 2


# --------------------------------------------------------------------------- back-translation plumbing


def test_back_translate_calls_a_three_argument_translator_per_leg():
    calls = []

    def translator(text, src, tgt):
        calls.append((text, src, tgt))
        return f"{tgt}:{text}"

    out = A.back_translate(["hello", "world"], pivot="zh", translator=translator)
    assert out == ["en:zh:hello", "en:zh:world"]
    assert calls[:2] == [("hello", "en", "zh"), ("zh:hello", "zh", "en")]


def test_back_translate_batched_and_round_trip_callables():
    class Batched:
        batched = True

        def __call__(self, texts, src, tgt):
            return [f"{src}>{tgt}|{t}" for t in texts]

    assert A.back_translate(["a", "b"], "de", Batched()) == ["de>en|en>de|a", "de>en|en>de|b"]
    assert A.back_translate(["a"], "ru", translator=lambda t: t * 2) == ["aa"]


def test_back_translate_argument_errors():
    with pytest.raises(ValueError, match="language"):
        A.back_translate(["a"], pivot="klingon", translator=lambda t: t)
    with pytest.raises(ValueError, match="translator"):
        A.back_translate(["a"], pivot="fr")  # neither a translator nor a model
    with pytest.raises(TypeError, match="translator"):
        A.back_translate(["a"], pivot="fr", translator=42)
    with pytest.raises(TypeError, match="texts"):
        A.back_translate("a single string", pivot="fr", translator=lambda t: t)


def test_language_codes():
    assert A.language("zh") == ("zho_Hans", "Chinese (Simplified)")
    assert A.language("fra_Latn")[0] == "fra_Latn"
    assert A.language("swh_Latn") == ("swh_Latn", "swh_Latn")


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
    translator = A.Seq2SeqTranslator(model, tok, max_new_tokens=4, num_beams=1)
    out = A.back_translate(["hello world", "abc"], pivot="zh", translator=translator)
    assert len(out) == 2 and all(isinstance(t, str) for t in out)
    assert seen == [("eng_Latn", tok.convert_tokens_to_ids("zho_Hans")),
                    ("zho_Hans", tok.convert_tokens_to_ids("eng_Latn"))]
    bt = A.BackTranslation("fr", translator=translator)
    assert bt.describe()["translator"] == translator.name


def test_seq2seq_translator_needs_a_tokenizer_for_a_loaded_model():
    model, _ = _tiny_nllb()
    with pytest.raises(ValueError, match="tokenizer"):
        A.Seq2SeqTranslator(model)


def test_clean_reply():
    assert A._clean_reply("Here is the rewritten text:\nThe sky is blue.") == "The sky is blue."
    assert A._clean_reply('"Quoted answer."') == "Quoted answer."
    assert A._clean_reply("Plain answer.") == "Plain answer."


# --------------------------------------------------------------------------- the informed adversary


def test_keyed_scrub_and_forge_need_few_edits():
    wm = watermarked_sequences(1, 200, 0.5, seed=3)[0].tolist()
    assert detect(wm, KEY, S).z > 8
    scrubbed = A.keyed_scrub(wm, KEY, V, S=S, target_z=2.326)
    assert detect(scrubbed, KEY, S).z < 2.326
    assert A.edit_fraction(wm, scrubbed) < 0.3  # far below what a blind attacker needs
    plain = np.random.default_rng(5).integers(0, V, size=200).tolist()
    forged = A.keyed_forge(plain, KEY, V, S=S, target_z=4.0)
    assert detect(forged, KEY, S).z > 4.0
    assert A.edit_fraction(plain, forged) < 0.3
    walk = A.random_walk_text(100, KEY, V, S=S)
    assert detect(walk, KEY, S).phi == 1.0


# --------------------------------------------------------------------------- with the real model


@pytest.mark.slow
def test_paraphrase_and_lm_back_translation_with_the_embedded_model():
    from chainmark.models import load_model

    model, tok = load_model()
    text = "The cat sat on the warm mat and watched the rain fall outside."
    first = A.paraphrase([text, ""], model, tok, max_new_tokens=24)
    assert first[1] == "" and isinstance(first[0], str) and first[0].strip()
    assert A.paraphrase([text, ""], model, tok, max_new_tokens=24) == first  # seeded
    bt = A.back_translate([text], pivot="fr", model=model, tokenizer=tok, max_new_tokens=24)
    assert len(bt) == 1 and isinstance(bt[0], str)
    assert "causal LM" in A.translator_name(A.resolve_translator(None, model, tok))
