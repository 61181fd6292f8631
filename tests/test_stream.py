"""Scoring in pieces (chainmark.auditor.stream): the same tokens and the same verdict as scoring a text whole."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chainmark import cli
from chainmark.auditor.transit import TextPreparation
from chainmark.config import ChainMarkConfig
from chainmark.significance import TESTS
from chainmark.detection import detect, detect_text
from chainmark.auditor.keyfiles import write_key_file
from chainmark.auditor.repetition import repetition_warning
from chainmark.auditor.stream import (StreamingDetector, UncuttableText, _cut_keeps_tokens, decoded_chunks,
                              detect_text_stream, stream_text, text_pieces)
from chainmark.auditor.tokenizer import load_tokenizer
from chainmark.cli.common import EXIT_USAGE

Z_ALPHA_01 = 2.3263478740408408
KEY = bytes(range(32))
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def same(a, b) -> bool:
    fields = ("n_tokens", "n_scored", "n_hits", "phi", "z", "p_value", "is_watermarked")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def mixed_text(chars: int, seed: int = 0) -> str:
    """Prose with the boundaries that matter: spaces, double spaces, newlines, CRLF, tabs, digits, punctuation,
    accents, CJK, emoji (four UTF-8 bytes) and a combining mark."""
    rng = np.random.default_rng(seed)
    words = ["the", "walk", "of", "states", "café", "naïve", "東京", "🙂", "e\u0301", "x=1;", "3.14", "(a,", "b)",
             "«quote»", "don't", "—", "über", "ß"]
    seps = [" ", " ", " ", "  ", "\n", "\r\n", "\t", "\n\n", " \n"]
    count = chars // 4 + 10  # a word and a separator average well over 4 characters
    w, s = rng.integers(len(words), size=count), rng.integers(len(seps), size=count)
    return "".join(words[i] + seps[j] for i, j in zip(w.tolist(), s.tolist()))[:chars]


@pytest.mark.parametrize("test", TESTS)
def test_counters_fed_in_pieces_equal_detect_on_the_whole(test):
    rng = np.random.default_rng(7)
    for trial in range(150):
        vocab = int(rng.integers(2, 300))
        n = int(rng.integers(0, 400))
        ids = rng.integers(0, vocab, n)
        if trial % 3 == 0:  # repetitive: a short phrase over and over
            ids = np.tile(ids[:4], 100)[:n]
        config = ChainMarkConfig(KEY, S=int(rng.integers(2, 9)))
        for vocab_size in (None, 300):
            scorer = StreamingDetector(config, test=test, vocab_size=vocab_size)
            for part in np.split(ids, np.sort(rng.integers(0, n + 1, int(rng.integers(0, 7))))):
                scorer.update(part)
            assert same(scorer.result(), detect(ids, config, test=test, vocab_size=vocab_size)), (trial, test)
            pairs = set(zip(ids[:-1].tolist(), ids[1:].tolist()))
            assert scorer.distinct_pairs == len(pairs)
            assert scorer.repeated_pair_share == (0.0 if n < 2 else 1 - len(pairs) / (n - 1))


def test_pieces_give_the_whole_texts_tokens_at_every_kind_of_boundary(tokenizer):
    for seed in range(4):
        text = mixed_text(30_000, seed)
        whole = tokenizer(text, add_special_tokens=False)["input_ids"]
        for piece_chars in (64, 200, 1000, 7000):
            pieces = list(text_pieces([text[i:i + 333] for i in range(0, len(text), 333)], tokenizer, piece_chars))
            assert "".join(pieces) == text
            assert len(pieces) > len(text) // (2 * piece_chars) if piece_chars < 7000 else len(pieces) > 2
            ids = [i for p in pieces for i in tokenizer(p, add_special_tokens=False)["input_ids"]]
            assert ids == whole, (seed, piece_chars)


@pytest.mark.parametrize("test", TESTS)
def test_streamed_verdict_equals_detect_text(tokenizer, test):
    text = mixed_text(20_000, seed=11) + ("The same sentence again. " * 200)
    whole = detect_text(text, tokenizer, ChainMarkConfig(KEY, S=4), alpha=0.001, test=test)
    for piece_chars in (100, 2500):
        result, share = detect_text_stream([text], tokenizer, ChainMarkConfig(KEY, S=4), alpha=0.001, test=test,
                                           piece_chars=piece_chars)
        assert same(result, whole)
        ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"])
        assert share == 1 - len(set(zip(ids[:-1].tolist(), ids[1:].tolist()))) / (ids.size - 1)


def test_a_cut_that_changes_tokens_is_refused_not_trusted(tokenizer):
    class MarksEveryStart:  # like a SentencePiece tokenizer that prepends a space marker to every text
        def __call__(self, text, add_special_tokens=False):
            return tokenizer("\u2581" + text if text else "", add_special_tokens=False)

        def __len__(self):
            return len(tokenizer)

    marker = MarksEveryStart()
    text = "one two three\nfour five six\n" * 200
    assert not _cut_keeps_tokens(text, text.index("four"), marker)
    assert _cut_keeps_tokens(text, text.index("four"), tokenizer)
    with pytest.raises(UncuttableText, match="without changing its tokens"):
        list(text_pieces([text], marker, piece_chars=100, max_piece_chars=400))
    # within the reach allowed it is one piece: scored whole, exactly
    assert list(text_pieces([text[:300]], marker, piece_chars=400)) == [text[:300]]


def test_a_text_with_no_place_to_cut_is_an_error_beyond_the_reach(tokenizer):
    text = "🙂" * 5000
    with pytest.raises(UncuttableText):
        list(text_pieces([text], tokenizer, piece_chars=500, max_piece_chars=2000))
    assert list(text_pieces([text], tokenizer, piece_chars=500, max_piece_chars=6000)) == [text]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 1 << 20])
def test_decoding_in_blocks_keeps_multibyte_characters_whole(size):
    text = mixed_text(3000, seed=3)
    assert "".join(decoded_chunks(io.BytesIO(text.encode("utf-8")), "utf-8", size)) == text
    assert "".join(decoded_chunks(io.BytesIO(text.encode("utf-16")), "utf-16", size)) == text
    bad = text.encode("utf-8")[:1000] + b"\xff" + b"tail"
    with pytest.raises(UnicodeDecodeError) as info:
        "".join(decoded_chunks(io.BytesIO(bad), "utf-8", size))
    assert info.value.start == 1000  # the offset in the whole stream


def test_repetition_warning_fires_for_the_z_test_on_repetitive_text_only(tokenizer):
    from chainmark.auditor.repetition import null_fpr, pair_counts, pair_null, text_null
    from chainmark.topology import Topology

    clockwork = Topology.clockwork(5)
    smiles = "🙂" * 500
    scorer = stream_text([smiles], tokenizer, ChainMarkConfig(KEY), test="z", count_pairs=True, piece_chars=300)
    result, share = scorer.result(), scorer.repeated_pair_share
    assert share > 0.99
    # the multiplicities the stream kept give the null the whole text gives
    ids = np.array(tokenizer(smiles, add_special_tokens=False)["input_ids"])
    null = pair_null(*scorer.pair_counts(), clockwork)
    whole = text_null(ids, clockwork)
    assert (null.mean, null.variance) == (whole.mean, whole.variance)
    assert sorted(scorer.pair_counts()[2].tolist()) == sorted(pair_counts(ids)[2].tolist())
    note, rate = repetition_warning(null, share, scorer.n_transitions, result.n_scored, "z", Z_ALPHA_01, 0.01,
                                    clockwork.p0)
    assert note and f"{100 * share:.1f}%" in note and "--test exact" in note and rate > 0.02
    exact = stream_text([smiles], tokenizer, ChainMarkConfig(KEY), test="exact")
    assert exact.repeated_pair_share == share and exact.n_scored <= 3 and not exact.result().is_watermarked
    note, rate = repetition_warning(None, share, exact.n_transitions, exact.n_scored, "exact", Z_ALPHA_01, 0.01, 0.2)
    assert rate is None and "scores only the transitions that reach a new token" in note
    prose = ("Bees tell each other where flowers are by dancing: the angle of the waggle run gives the direction "
             "and its length the distance, so a forager that watches one dance can fly straight to the patch.")
    scorer = stream_text([prose], tokenizer, ChainMarkConfig(KEY), test="z", count_pairs=True)
    null = pair_null(*scorer.pair_counts(), clockwork)
    assert scorer.repeated_pair_share < 0.05
    assert repetition_warning(null, scorer.repeated_pair_share, scorer.n_transitions, scorer.n_scored, "z",
                              Z_ALPHA_01, 0.01, clockwork.p0)[0] is None
    # a higher (recalibrated) threshold lowers the rate the text's null gives
    assert null_fpr(null, 0.2, 3.5) < null_fpr(null, 0.2, Z_ALPHA_01)
    with pytest.raises(ValueError, match="count_pairs"):
        stream_text([prose], tokenizer, ChainMarkConfig(KEY), test="z").pair_counts()


def test_cli_reports_the_share_and_warns(tmp_path, capsys, monkeypatch):
    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    (tmp_path / "smile.txt").write_text("🙂" * 500 + "\n", "utf-8")
    monkeypatch.chdir(tmp_path)
    code = cli.main(["detect", "--key-file", str(key), "--test", "z", "--json", "smile.txt"])
    out, err = capsys.readouterr()
    row = json.loads(out)
    assert code == 0 and row["repeated_pair_share"] > 0.99 and "repeat an earlier token pair" in err
    assert row["text_null_fpr"] > 0.02 and row["text_null_variance_ratio"] > 10 and row["z_text_null"] is not None
    assert f"flagged {100 * row['text_null_fpr']:.1f}% of the time" in err
    code = cli.main(["detect", "--key-file", str(key), "--json", "smile.txt"])  # the default: exact
    out, err = capsys.readouterr()
    row = json.loads(out)
    assert code == 0 and row["test"] == "exact" and not row["is_watermarked"] and row["text_null_fpr"] is None


def test_cli_refuses_an_uncuttable_input_with_exit_2(tmp_path, capsys, monkeypatch):
    import chainmark.auditor.stream as stream

    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    (tmp_path / "run.txt").write_text("🙂" * 20_000, "utf-8")
    monkeypatch.setattr(stream, "PIECE_CHARS", 500)  # a piece may then grow to 8,000 characters
    code = cli.main(["detect", "--key-file", str(key), str(tmp_path / "run.txt")])
    _, err = capsys.readouterr()
    assert code == EXIT_USAGE and "run.txt" in err and "without changing its tokens" in err


def _cli(*args: str, stdin: bytes | None = None, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chainmark.cli", *args], input=stdin, capture_output=True,
                          cwd=cwd, timeout=600)


def test_standard_input_larger_than_the_spool_gives_the_files_result(tmp_path):
    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    text = mixed_text(9 << 20, seed=5)  # more than the 8 MiB kept in memory: spooled to a temporary file
    (tmp_path / "t.txt").write_text(text, "utf-8", newline="")
    from_file = _cli("detect", "--key-file", str(key), "--json", "t.txt", cwd=tmp_path)
    from_stdin = _cli("detect", "--key-file", str(key), "--json", "-", stdin=text.encode("utf-8"), cwd=tmp_path)
    assert from_file.returncode == from_stdin.returncode == 0, from_stdin.stderr
    a, b = json.loads(from_file.stdout), json.loads(from_stdin.stdout)
    assert {k: v for k, v in a.items() if k != "file"} == {k: v for k, v in b.items() if k != "file"}


@pytest.mark.slow
def test_a_long_text_scores_the_same_in_pieces_as_whole(tokenizer, tmp_path):
    """The acceptance check: a 4 MB text cut into 64 pieces gives identical tokens and statistics, for every
    test, as the whole; the command line, scoring the file, agrees. (It was once 40 MB in 40 pieces:
    the equality is a property of the cuts, not of the size, and 64 cuts test more boundaries in a tenth of the
    time; bench_stream.py streams the large inputs whose whole tokenization would not fit in memory.) The command
    line prepares the text in pieces (chainmark.auditor.transit) and must agree with the text prepared whole."""
    text = mixed_text(4 << 20, seed=40)
    ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    piece_ids = []
    chunks = [text[i:i + (1 << 20)] for i in range(0, len(text), 1 << 20)]
    for piece in text_pieces(chunks, tokenizer, piece_chars=1 << 16):
        piece_ids.append(np.asarray(tokenizer(piece, add_special_tokens=False)["input_ids"], dtype=np.int64))
    assert len(piece_ids) >= 32, len(piece_ids)
    assert np.array_equal(np.concatenate(piece_ids), ids)
    vocab = len(tokenizer)
    for test in TESTS:
        scorer = StreamingDetector(ChainMarkConfig(KEY, S=5), test=test, vocab_size=vocab)
        for part in piece_ids:
            scorer.update(part)
        assert same(scorer.result(), detect(ids, ChainMarkConfig(KEY, S=5), test=test, vocab_size=vocab)), test
    del ids, piece_ids
    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    path = tmp_path / "big.txt"
    path.write_text(text, "utf-8", newline="")
    proc = _cli("detect", "--key-file", str(key), "--test", "z", "--json", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    # the command line prepares the text first (NFC, LF line endings: the regime's default), in pieces
    streamed, _ = detect_text_stream([TextPreparation().apply(text)], tokenizer, ChainMarkConfig(KEY), test="z")
    assert text != TextPreparation().apply(text)  # the text holds what the preparation changes (CR, combining marks)
    assert row["n_tokens"] == streamed.n_tokens and row["z"] == streamed.z and row["n_valid"] == streamed.n_hits


@pytest.mark.parametrize("test", TESTS)
def test_ids_near_2_to_the_40_need_no_table_over_their_range(test):
    """Without vocab_size the counters keep the ids seen (sorted), never a table indexed by id: ids near 2**40
    (a tebibyte of first-seen flags, pair codes past 2**63) score in a few megabytes, as detect scores them."""
    import tracemalloc

    rng = np.random.default_rng(40)
    base = 2**40
    ids = base + np.concatenate([rng.integers(0, 3000, 20_000), np.tile(rng.integers(0, 50, 8), 500),
                                 rng.integers(0, 2**20, 2_000)]).astype(np.int64)
    ids[::97] += 2**41  # a few ids further out still
    parts = np.split(ids, np.sort(rng.integers(0, ids.size, 12)))
    tracemalloc.start()
    try:
        scorer = StreamingDetector(ChainMarkConfig(KEY, S=5), test=test)
        for part in parts:
            scorer.update(part)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
    assert same(scorer.result(), detect(ids, ChainMarkConfig(KEY, S=5), test=test))
    pairs = set(zip(ids[:-1].tolist(), ids[1:].tolist()))
    assert scorer.distinct_pairs == len(pairs)
    assert scorer.repeated_pair_share == 1 - len(pairs) / (ids.size - 1)
    # a vocabulary larger than any state table is refused when ids arrive, never allocated first
    tracemalloc.start()
    try:
        wide = StreamingDetector(ChainMarkConfig(KEY, S=5), test=test, vocab_size=2**41)
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()
    with pytest.raises(ValueError, match="vocab_size must lie in"):
        wide.update(ids[1:10])


def test_pair_counts_are_kept_up_to_a_cap_and_then_dropped_so_memory_stays_flat(monkeypatch):
    import chainmark.auditor.stream as stream_module
    from chainmark.auditor.repetition import pair_counts

    rng = np.random.default_rng(5)
    ids = rng.integers(0, 300, 4000)
    scorer = StreamingDetector(ChainMarkConfig(KEY, S=5), 0.01, "z", 300, count_pairs=True)
    for piece in np.array_split(ids, 7):  # pieces: the counts merge across them, the boundary pair included
        scorer.update(piece)
    a, b, m = scorer.pair_counts()
    ea, eb, em = pair_counts(ids)
    assert scorer.pairs_counted and (a.tolist(), b.tolist(), m.tolist()) == (ea.tolist(), eb.tolist(), em.tolist())
    monkeypatch.setattr(stream_module, "_PAIR_COUNT_MAX", 50)
    capped = StreamingDetector(ChainMarkConfig(KEY, S=5), 0.01, "z", 300, count_pairs=True)
    for piece in np.array_split(ids, 7):
        capped.update(piece)
    assert not capped.pairs_counted  # scored all the same:
    assert capped.result().to_dict() == scorer.result().to_dict()
    with pytest.raises(ValueError, match="more than 50 distinct token pairs"):
        capped.pair_counts()


def test_the_loose_form_is_refused_with_what_to_pass():
    """The stream takes the configuration detect takes; a key with S and the topology beside it is a TypeError
    that names ChainMarkConfig (before any text is read)."""
    for loose in (lambda: StreamingDetector(KEY, 5, "clockwork"), lambda: StreamingDetector(KEY, S=5),
                  lambda: stream_text(["text"], None, KEY, S=5), lambda: detect_text_stream(["text"], None, KEY)):
        with pytest.raises(TypeError, match=r"takes one ChainMarkConfig .*pass ChainMarkConfig\(key, S="):
            loose()
