"""The ``chainmark`` command line: commands, exit codes, messages, and no key leaks.

Most tests run :func:`chainmark.cli.main` in-process with a byte-level fake
tokenizer (fast, no model files); the slow ones run the installed console
script with the embedded model's real tokenizer.
"""
from __future__ import annotations

import base64
import io
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chainmark import calibrate as cal
from chainmark import cli
from chainmark.auditor.regime import (_REGIME_FORMAT, Regime, _regime_digest, regime_document, _regime_problems,
                                      tokenizer_fingerprint)
from chainmark.auditor.tokenizer import load_tokenizer as real_load_tokenizer
from chainmark.cli import detect_commands
from chainmark.cli.common import EXIT_DETECTED, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE
from chainmark.partition import state_table
from chainmark.auditor.keyfiles import _KEY_ENV, KEY_FILE_ENV, write_key_file
from chainmark.keys import derive_key, key_fingerprint
from cli_support import KEY, ByteTokenizer, watermarked_text

ROOT = Path(__file__).resolve().parents[1]
class OtherTokenizer(ByteTokenizer):
    def get_vocab(self):
        return {f"[{i}]": i for i in range(256)}


@pytest.fixture(autouse=True)
def fake_tokenizer(monkeypatch):
    """Use the byte tokenizer unless a test asks for another; no key from the environment."""
    import chainmark.auditor.tokenizer

    monkeypatch.delenv(_KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    loaded = []

    def load(name=None, revision=None):
        loaded.append(name)
        if revision is not None:
            loaded.append(("revision", name, revision))
        if name == "other-tokenizer":
            return OtherTokenizer()
        if name == "broken/tokenizer":
            raise chainmark.auditor.tokenizer.TokenizerLoadError(f"Could not load the tokenizer {name!r}: not found")
        return ByteTokenizer()

    monkeypatch.setattr(chainmark.auditor.tokenizer, "load_tokenizer", load)
    return loaded


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "deploy.key"
    write_key_file(path, KEY)
    return path


def plain_text(length: int = 300, seed: int = 1) -> str:
    rng = np.random.default_rng(seed)
    return bytes(rng.integers(97, 123, size=length).tolist()).decode("ascii")


def run(capsys, *argv, stdin: str | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------
# help and usage
# ---------------------------------------------------------------------------
def test_help_has_examples_and_exit_codes(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "examples:" in out and "exit codes" in out
    for command in ("detect", "calibrate", "recalibrate", "keygen", "regime"):
        assert command in out
        code, out_sub, _ = run(capsys, command, "--help")
        assert code == 0 and "examples:" in out_sub, command


def test_no_command_is_a_usage_error(capsys):
    code, _, err = run(capsys)
    assert code == EXIT_USAGE and "usage" in err


@pytest.mark.parametrize("argv, words", [
    (["detect", "--S", "1", "x.txt"], ["--S", ">= 2"]),
    (["detect", "--S", "five", "x.txt"], ["--S", ">= 2"]),
    (["detect", "--alpha", "0", "x.txt"], ["--alpha", "(0.0, 1.0)"]),
    (["detect", "--alpha", "1.5", "x.txt"], ["--alpha", "(0.0, 1.0)"]),
    (["detect", "--topology", "spiral", "x.txt"], ["--topology", "clockwork"]),
    (["detect", "--threshold", "nan", "x.txt"], ["--threshold", "finite"]),
    (["detect"], ["FILE"]),
    (["calibrate", "--n", "1", "--rho", "0.5", "--alpha", "0.01"], ["--n", ">= 2"]),
    (["calibrate", "--n", "100", "--rho", "1.5", "--alpha", "0.01"], ["--rho", "(0.0, 1.0]"]),
    (["calibrate", "--n", "100", "--rho", "0", "--alpha", "0.01"], ["--rho", "(0.0, 1.0]"]),
    (["calibrate", "--n", "100", "--rho", "0.5", "--alpha", "1"], ["--alpha", "(0.0, 1.0)"]),
    (["calibrate", "--n", "100", "--rho", "0.5", "--alpha", "0.01", "--k", "0"], ["--k", ">= 1"]),
    (["recalibrate", "--null", "x.jsonl", "--alpha", "0.01", "--method", "median"], ["--method", "sd"]),
    (["keygen"], ["--out"]),
])
def test_bad_options_exit_2_naming_the_option_and_range(capsys, argv, words):
    code, _, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    for word in words:
        assert word in err, (word, err)


# ---------------------------------------------------------------------------
# keygen
# ---------------------------------------------------------------------------
def test_keygen_writes_private_32_byte_key_and_prints_only_its_fingerprint(capsys, tmp_path):
    out_path = tmp_path / "new.key"
    code, out, err = run(capsys, "keygen", "--out", out_path)
    assert code == 0
    key = out_path.read_bytes()
    assert len(key) == 32
    assert stat.S_IMODE(out_path.stat().st_mode) == 0o600
    assert out.strip() == key_fingerprint(key)
    assert_no_key(key, out + err)


def test_keygen_refuses_to_overwrite(capsys, key_file):
    before = key_file.read_bytes()
    code, out, err = run(capsys, "keygen", "--out", key_file)
    assert code == EXIT_USAGE and "refusing to overwrite" in err and out == ""
    assert key_file.read_bytes() == before


def test_keygen_derives_per_deployment_keys(capsys, tmp_path, key_file):
    a, b = tmp_path / "a.key", tmp_path / "b.key"
    code, out_a, err = run(capsys, "keygen", "--out", a, "--from-master", key_file, "--context", "acme/2026-Q3")
    assert code == 0 and a.read_bytes() == derive_key(KEY, "acme/2026-Q3")
    assert out_a.strip() == key_fingerprint(a.read_bytes())
    assert_no_key(KEY, out_a + err)
    assert_no_key(a.read_bytes(), out_a + err)
    run(capsys, "keygen", "--out", b, "--from-master", key_file, "--context", "acme/2026-Q4")
    assert a.read_bytes() != b.read_bytes()


def test_keygen_context_needs_master(capsys, tmp_path):
    code, _, err = run(capsys, "keygen", "--out", tmp_path / "x.key", "--context", "c")
    assert code == EXIT_USAGE and "--from-master" in err
    assert not (tmp_path / "x.key").exists()


# ---------------------------------------------------------------------------
# detect
# ---------------------------------------------------------------------------
def test_detect_table_finds_the_watermark(capsys, tmp_path, key_file):
    marked = write(tmp_path, "marked.txt", watermarked_text(KEY))
    plain = write(tmp_path, "plain.txt", plain_text())
    code, out, err = run(capsys, "detect", "--key-file", key_file, marked, plain)
    assert code == 0, err
    lines = out.splitlines()
    assert any("marked.txt" in ln and "WATERMARKED" in ln for ln in lines)
    assert any("plain.txt" in ln and "not detected" in ln for ln in lines)
    assert key_fingerprint(KEY) in out
    assert "1 of 2 input(s) detected" in out


def test_detect_json_lines(capsys, tmp_path, key_file):
    marked = write(tmp_path, "marked.txt", watermarked_text(KEY))
    plain = write(tmp_path, "plain.txt", plain_text())
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--json", "--test", "z", marked, plain)
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["file"] for r in rows] == [str(marked), str(plain)]
    assert rows[0]["is_watermarked"] and not rows[1]["is_watermarked"]
    assert rows[0]["n_tokens"] == 300 and rows[0]["n_transitions"] == 299
    assert rows[0]["n_valid"] == 299 and rows[0]["phi"] == 1.0
    for r in rows:
        assert 0 <= r["phi"] <= 1 and 0 <= r["p_value"] <= 1
        assert r["key_fingerprint"] == key_fingerprint(KEY) and r["S"] == 5 and r["k"] == 1
        assert r["threshold"] == pytest.approx(2.3263478740408408)


def test_detect_matches_the_library(capsys, tmp_path, key_file):
    from chainmark.detection import detect_text
    from chainmark.config import ChainMarkConfig

    text = plain_text(500, seed=5)
    path = write(tmp_path, "t.txt", text)
    config = ChainMarkConfig(KEY, S=3, topology="soft_cycle")
    for test in (None, "z", "distinct", "exact"):  # no --test: the exact test
        chosen = ["--test", test] if test else []
        code, out, _ = run(capsys, "detect", "--key-file", key_file, "--json", "--S", "3",
                           "--topology", "soft_cycle", "--alpha", "0.001", *chosen, path)
        row = json.loads(out)
        ref = detect_text(text, ByteTokenizer(), config, alpha=0.001, test=test or "exact")
        assert code == 0 and row["test"] == (test or "exact")
        assert row["z"] == pytest.approx(ref.z) and row["n_valid"] == ref.n_hits
        assert row["n_transitions"] == ref.n_scored and row["is_watermarked"] == ref.is_watermarked
        assert row["p_value"] == pytest.approx(ref.p_value) and row["k"] == 2


def test_the_default_test_is_exact_unless_a_regime_or_z_option_names_another(capsys, tmp_path, key_file):
    path = write(tmp_path, "t.txt", plain_text(400, seed=3))

    def test_of(*options):
        code, out, _ = run(capsys, "detect", "--key-file", key_file, "--json", *options, path)
        assert code == 0, options
        row = json.loads(out)
        return row["test"], row["threshold"]

    assert test_of() == ("exact", None)  # nothing named: the test whose FPR holds for every text
    assert test_of("--threshold", "3.1") == ("z", 3.1)  # a z threshold given alone asks for the z-test
    assert test_of("--test", "distinct")[0] == "distinct"
    assert test_of("--test", "z")[0] == "z"
    regime = tmp_path / "regime.json"
    for options, expected in ((["--test", "z"], "z"), ([], "exact"), (["--test", "distinct"], "distinct")):
        regime.unlink(missing_ok=True)
        code, _, _ = run(capsys, "regime", "--key-file", key_file, "--S", "5", "--alpha", "0.01", *options,
                         "--out", regime)
        assert code == 0
        published = json.loads(regime.read_text())
        assert published["test"] == expected
        assert published["distinct_pairs"] is (expected == "distinct")  # still written, derived from the test
        assert test_of("--regime", regime)[0] == expected  # a regime's test is applied, never the default
    # a regime written before tests had names says only "distinct_pairs": true, and still means the distinct test
    document = json.loads(regime.read_text())
    del document["test"]
    document["digest"] = _regime_digest(document)
    regime.unlink()
    regime.write_text(json.dumps(document))
    assert test_of("--regime", regime)[0] == "distinct"
    # a regime written before tests had names (no "test" field) still means the z-test
    regime.unlink()
    assert run(capsys, "regime", "--key-file", key_file, "--S", "5", "--alpha", "0.01", "--test", "z",
               "--out", regime)[0] == 0
    assert test_of("--regime", regime, "--test", "distinct")[0] == "distinct"  # an option overrides the regime's
    document = json.loads(regime.read_text())
    del document["test"]
    document["distinct_pairs"] = False
    document["digest"] = _regime_digest(document)
    regime.unlink()
    regime.write_text(json.dumps(document))
    assert test_of("--regime", regime)[0] == "z"


def test_detect_distinct_pairs(capsys, tmp_path, key_file):
    path = write(tmp_path, "rep.txt", "abab" * 100)
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--json", "--test", "distinct", path)
    row = json.loads(out)
    assert code == 0 and row["n_transitions"] == 2 and row["distinct_pairs"] and row["test"] == "distinct"


@pytest.mark.parametrize("command", [["detect"], ["audit", "--out", "audit.jsonl"], ["regime", "--S", "5",
                                                                                      "--alpha", "0.01"]])
def test_the_distinct_test_has_one_spelling_on_the_command_line(capsys, tmp_path, key_file, command):
    """--test distinct chooses it; the old --distinct-pairs flag is an unknown option (exit 2), named in no help."""
    path = write(tmp_path, "rep.txt", "abab" * 100)
    inputs = [] if command[0] == "regime" else [path]
    code, out, err = run(capsys, *command, "--key-file", key_file, "--distinct-pairs", *inputs)
    assert code == EXIT_USAGE and out == "" and "unrecognized arguments: --distinct-pairs" in err
    code, help_text, _ = run(capsys, command[0], "--help")
    assert code == 0 and "--distinct-pairs" not in help_text


def test_fail_on_detect_exit_codes(capsys, tmp_path, key_file):
    marked = write(tmp_path, "marked.txt", watermarked_text(KEY))
    plain = write(tmp_path, "plain.txt", plain_text())
    assert run(capsys, "detect", "--key-file", key_file, marked)[0] == EXIT_OK
    assert run(capsys, "detect", "--key-file", key_file, "--fail-on-detect", marked, plain)[0] == EXIT_DETECTED
    assert run(capsys, "detect", "--key-file", key_file, "--fail-on-detect", plain)[0] == EXIT_OK


def test_detect_reads_stdin(capsys, tmp_path, key_file, monkeypatch):
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--json", "-",
                       stdin=watermarked_text(KEY), monkeypatch=monkeypatch)
    row = json.loads(out)
    assert code == 0 and row["file"] == "<stdin>" and row["is_watermarked"]


def test_detect_stdin_only_once(capsys, key_file):
    code, _, err = run(capsys, "detect", "--key-file", key_file, "-", "-")
    assert code == EXIT_USAGE and "only once" in err


def test_key_from_environment(capsys, tmp_path, monkeypatch):
    path = write(tmp_path, "m.txt", watermarked_text(KEY))
    monkeypatch.setenv(_KEY_ENV, KEY.hex())
    code, out, err = run(capsys, "detect", "--json", path)
    assert code == 0 and json.loads(out)["key_fingerprint"] == key_fingerprint(KEY)
    assert_no_key(KEY, out + err)


def test_detect_threshold_and_min_tokens(capsys, tmp_path, key_file):
    marked = write(tmp_path, "marked.txt", watermarked_text(KEY))
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--json", "--threshold", "1e6", marked)
    row = json.loads(out)
    assert code == 0 and not row["is_watermarked"] and row["threshold"] == 1e6
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--json", "--min-tokens", "1000",
                       "--fail-on-detect", marked)
    row = json.loads(out)
    assert code == 0 and row["decision"] == "too short" and not row["is_watermarked"]


def test_one_token_text_is_too_short(capsys, tmp_path, key_file):
    path = write(tmp_path, "one.txt", "a")
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--json", path)
    row = json.loads(out)
    assert code == 0 and row["decision"] == "too short" and row["p_value"] == 1.0


def test_missing_key_file(capsys, tmp_path):
    path = write(tmp_path, "t.txt", "hello")
    code, out, err = run(capsys, "detect", "--key-file", tmp_path / "nope.key", path)
    assert code == EXIT_USAGE and out == ""
    assert "nope.key" in err and "does not exist" in err and "keygen" in err


def test_no_key_at_all(capsys, tmp_path):
    path = write(tmp_path, "t.txt", "hello")
    code, _, err = run(capsys, "detect", path)
    assert code == EXIT_USAGE and "--key-file" in err and _KEY_ENV in err


def test_empty_key_file(capsys, tmp_path):
    empty = tmp_path / "empty.key"
    empty.write_bytes(b"")
    code, _, err = run(capsys, "detect", "--key-file", empty, write(tmp_path, "t.txt", "hello"))
    assert code == EXIT_USAGE and "empty" in err


def test_unreadable_key_file(capsys, tmp_path, key_file, monkeypatch):
    real = Path.open

    def guarded(self, *args, **kwargs):
        if self.name == key_file.name:
            raise PermissionError(13, "Permission denied")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", guarded)
    code, _, err = run(capsys, "detect", "--key-file", key_file, write(tmp_path, "t.txt", "hello"))
    assert code == EXIT_USAGE and "not readable" in err


def test_loose_key_file_permissions_warn(capsys, tmp_path, key_file):
    os.chmod(key_file, 0o644)
    code, _, err = run(capsys, "detect", "--key-file", key_file, write(tmp_path, "t.txt", "hello there"))
    assert code == 0 and "chmod 600" in err


def test_bad_inputs_are_all_reported_and_nothing_is_scored(capsys, tmp_path, key_file):
    good = write(tmp_path, "good.txt", "some text")
    empty = write(tmp_path, "empty.txt", "  \n\t")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    code, out, err = run(capsys, "detect", "--key-file", key_file, good, empty, latin,
                         tmp_path / "missing.txt", tmp_path)
    assert code == EXIT_USAGE and out == ""
    assert "nothing was scored" in err
    assert "empty.txt: empty input" in err
    assert "latin.txt is not utf-8 text" in err
    assert "missing.txt does not exist" in err
    assert "is a folder" in err
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--encoding", "latin-1", "--json", latin)
    assert code == 0 and json.loads(out)["n_tokens"] == 5


def test_empty_stdin(capsys, key_file, monkeypatch):
    code, _, err = run(capsys, "detect", "--key-file", key_file, "-", stdin="", monkeypatch=monkeypatch)
    assert code == EXIT_USAGE and "<stdin>: empty input" in err


def test_tokenizer_that_cannot_be_loaded(capsys, tmp_path, key_file):
    code, out, err = run(capsys, "detect", "--key-file", key_file, "--tokenizer", "broken/tokenizer",
                         write(tmp_path, "t.txt", "hello"))
    assert code == EXIT_USAGE and out == ""
    assert "tokenizer cannot be loaded" in err and "broken/tokenizer" in err


def test_unknown_encoding(capsys, tmp_path, key_file):
    code, _, err = run(capsys, "detect", "--key-file", key_file, "--encoding", "klingon",
                       write(tmp_path, "t.txt", "hello"))
    assert code == EXIT_USAGE and "klingon" in err


# ---------------------------------------------------------------------------
# regime
# ---------------------------------------------------------------------------
def test_regime_document_and_detect_with_it(capsys, tmp_path, key_file):
    regime = tmp_path / "regime.json"
    code, out, err = run(capsys, "regime", "--key-file", key_file, "--S", "5", "--alpha", "0.01",
                         "--threshold", "2.9", "--n-min", "50", "--rho", "0.5", "--gate", "high_entropy",
                         "--tau", "2.25", "--out", regime)
    assert code == 0, err
    doc = json.loads(regime.read_text())
    assert doc == json.loads(out) and doc["tau"] == 2.25  # the whole configuration, the key aside
    assert doc["format"] == _REGIME_FORMAT and doc["S"] == 5 and doc["threshold"] == 2.9
    assert doc["key_fingerprint"] == key_fingerprint(KEY) and doc["n_min"] == 50
    assert doc["tokenizer_fingerprint"] == tokenizer_fingerprint(ByteTokenizer())
    assert_no_key(KEY, regime.read_text() + out + err)

    marked = write(tmp_path, "marked.txt", watermarked_text(KEY))
    short = write(tmp_path, "short.txt", watermarked_text(KEY, length=20))
    code, out, _ = run(capsys, "detect", "--regime", regime, "--key-file", key_file, "--json", marked, short)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and rows[0]["threshold"] == 2.9 and rows[0]["is_watermarked"]
    assert rows[1]["decision"] == "too short"
    # an explicit option wins over the regime
    code, out, _ = run(capsys, "detect", "--regime", regime, "--key-file", key_file, "--json",
                       "--min-tokens", "0", short)
    assert json.loads(out)["decision"] != "too short"


def test_regime_refuses_wrong_key_and_wrong_tokenizer(capsys, tmp_path, key_file):
    regime = tmp_path / "regime.json"
    assert run(capsys, "regime", "--key-file", key_file, "--S", "5", "--alpha", "0.01", "--out", regime)[0] == 0
    text = write(tmp_path, "t.txt", plain_text())
    other_key = tmp_path / "other.key"
    write_key_file(other_key, b"another key entirely")
    code, _, err = run(capsys, "detect", "--regime", regime, "--key-file", other_key, text)
    assert code == EXIT_USAGE and "does not match" in err
    assert_no_key(b"another key entirely", err)
    code, _, err = run(capsys, "detect", "--regime", regime, "--key-file", key_file,
                       "--tokenizer", "other-tokenizer", text)
    assert code == EXIT_USAGE and "tokenizer mismatch" in err


def test_a_regime_threshold_needs_its_gate(capsys, key_file):
    code, _, err = run(capsys, "regime", "--key-file", key_file, "--S", "5", "--alpha", "0.01", "--tau", "2.25")
    assert code == 2 and '"tau" is the threshold of a gate' in err


def test_regime_file_problems(capsys, tmp_path, key_file):
    text = write(tmp_path, "t.txt", "hello")
    code, _, err = run(capsys, "detect", "--regime", tmp_path / "none.json", "--key-file", key_file, text)
    assert code == EXIT_USAGE and "does not exist" in err
    bad = write(tmp_path, "bad.json", "{not json")
    code, _, err = run(capsys, "detect", "--regime", bad, "--key-file", key_file, text)
    assert code == EXIT_USAGE and "not JSON" in err
    other = write(tmp_path, "other.json", json.dumps({"S": 5}))
    code, _, err = run(capsys, "detect", "--regime", other, "--key-file", key_file, text)
    assert code == EXIT_USAGE and _REGIME_FORMAT in err


def test_regime_document_validates():
    """The settings are checked where the Regime is made, the rest by regime_document, each by its name."""
    with pytest.raises(ValueError, match=r'"S" must be an integer in \[2, '):
        Regime(S=1, alpha=0.01)
    with pytest.raises(ValueError, match=r'"alpha" must be a number in \(0, 1\)'):
        Regime(S=5, alpha=1.0)
    with pytest.raises(ValueError, match=r'"rho" must be a number in \[0, 1\]'):
        Regime(S=5, alpha=0.01, rho=2)
    with pytest.raises(ValueError, match='"threshold" must be a finite number'):
        Regime(S=5, alpha=0.01, threshold=float("inf"))
    with pytest.raises(ValueError, match="n_min must be an integer >= 2"):
        regime_document(KEY, Regime(S=5, alpha=0.01, n_min=1))
    with pytest.raises(ValueError, match="key must be non-empty"):
        regime_document(b"", Regime(S=5, alpha=0.01))
    with pytest.raises(TypeError, match="regime must be a chainmark.auditor.regime.Regime"):
        regime_document(KEY, 5, 0.01)  # the settings travel as one Regime
    with pytest.raises(ValueError, match="does not match the regime's"):  # a regime made for another key
        regime_document(KEY, Regime(S=5, alpha=0.01, key_fingerprint=key_fingerprint(b"another key entirely")))
    doc = regime_document(KEY, Regime(S=5, alpha=0.01))
    assert "key" not in doc and doc["threshold"] == doc["z_alpha"]


# ---------------------------------------------------------------------------
# calibrate and recalibrate
# ---------------------------------------------------------------------------
def test_calibrate_reports_s_star_from_the_calibration_module(capsys):
    code, out, _ = run(capsys, "calibrate", "--n", "200", "--rho", "0.5", "--alpha", "0.001", "--json")
    row = json.loads(out)
    assert code == 0
    assert row["S_star"] == cal.s_star(200, 0.5, 0.001)
    assert row["predicted_z"] == pytest.approx(cal.predicted_z(200, 0.5, row["S_star"]))
    code, out, _ = run(capsys, "calibrate", "--n", "50", "--rho", "0.25", "--alpha", "0.01", "--k", "2")
    assert code == 0 and f"S* = {cal.s_star(50, 0.25, 0.01, k=2)}" in out


def test_calibrate_rejects_zero_budget(capsys):
    """--rho is checked once, against the range its help states: (0, 1]."""
    code, _, err = run(capsys, "calibrate", "--n", "100", "--rho", "0", "--alpha", "0.01")
    assert code == EXIT_USAGE and "--rho" in err and "(0.0, 1.0]" in err
    assert "[0.0, 1.0]" not in err and "must be > 0" not in err
    code, out, _ = run(capsys, "calibrate", "--n", "100", "--rho", "1", "--alpha", "0.01", "--json")
    assert code == EXIT_OK and json.loads(out)["rho"] == 1.0  # the closed end is allowed
    _, help_text, _ = run(capsys, "calibrate", "--help")
    assert "(0, 1]" in " ".join(help_text.split())


@pytest.mark.parametrize("error", [RuntimeError("boom\nsecond line"), ZeroDivisionError(), AssertionError("x")])
def test_unexpected_exception_is_an_internal_error_not_detected(capsys, monkeypatch, error):
    """A bug in a command ends with one line on stderr and exit code 3, never a traceback or 1."""
    def broken(args):
        raise error

    monkeypatch.setattr(detect_commands, "_cmd_calibrate", broken)
    code, out, err = run(capsys, "calibrate", "--n", "100", "--rho", "0.5", "--alpha", "0.01")
    assert code == EXIT_INTERNAL == 3
    assert code not in (EXIT_OK, EXIT_DETECTED, EXIT_USAGE)
    assert out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("chainmark: internal error: ")
    assert type(error).__name__ in err


def test_interrupts_are_not_swallowed_as_internal_errors(capsys, monkeypatch):
    def leave(args):
        raise SystemExit(7)

    monkeypatch.setattr(detect_commands, "_cmd_calibrate", leave)
    with pytest.raises(SystemExit):
        run(capsys, "calibrate", "--n", "100", "--rho", "0.5", "--alpha", "0.01")


def test_exit_codes_are_documented(capsys):
    _, help_text, _ = run(capsys, "--help")
    for code_and_meaning in ("0 ok", "1 watermark detected", "2 usage error", "3 internal error"):
        assert code_and_meaning in " ".join(help_text.split()), code_and_meaning
    assert "3 an internal error" in " ".join((cli.__doc__ or "").split())


def null_file(tmp_path: Path, z: np.ndarray) -> Path:
    path = tmp_path / "null.jsonl"
    path.write_text("".join(json.dumps({"file": f"doc{i}.txt", "z": float(v)}) + "\n" for i, v in enumerate(z)))
    return path


def test_recalibrate_uses_the_calibration_module(capsys, tmp_path):
    z = np.random.default_rng(3).normal(0.3, 1.2, size=2000)
    path = null_file(tmp_path, z)
    for method in ("sd", "quantile"):
        code, out, err = run(capsys, "recalibrate", "--null", path, "--alpha", "0.01", "--method", method, "--json")
        row = json.loads(out)
        assert code == 0, err
        assert row["threshold"] == pytest.approx(cal.recalibrate(z, 0.01, method=method))
        assert row["n_null"] == 2000 and row["fpr_at_threshold"] <= row["fpr_at_z_alpha"]
    code, out, _ = run(capsys, "recalibrate", "--null", path, "--alpha", "0.01")
    assert code == 0 and "--threshold" in out


def test_recalibrate_warns_about_heavy_tailed_nulls(capsys, tmp_path):
    """The sd recipe assumes a Gaussian null: on a heavy-tailed one the command says so, and a
    too-small corpus is never told to fall back on sd when the tail is heavy."""
    rng = np.random.default_rng(5)
    gauss, heavy = rng.normal(size=3000), rng.standard_t(3, size=3000)
    assert cal.excess_kurtosis(gauss) < cal.HEAVY_TAIL_KURTOSIS < cal.excess_kurtosis(heavy)
    code, _, err = run(capsys, "recalibrate", "--null", null_file(tmp_path, gauss), "--alpha", "0.01")
    assert code == 0 and "heavy-tailed" not in err
    code, out, err = run(capsys, "recalibrate", "--null", null_file(tmp_path, heavy), "--alpha", "0.01", "--json")
    assert code == 0 and "heavy-tailed" in err and "--method quantile" in err
    assert json.loads(out)["null_excess_kurtosis"] > cal.HEAVY_TAIL_KURTOSIS
    small = heavy[:300]
    code, _, err = run(capsys, "recalibrate", "--null", null_file(tmp_path, small), "--alpha", "0.01",
                       "--method", "quantile")
    assert code == 0 and "use more texts" in err and "or --method sd" not in err
    code, _, err = run(capsys, "recalibrate", "--null", null_file(tmp_path, gauss[:300]), "--alpha", "0.01",
                       "--method", "quantile")
    assert code == 0 and "or --method sd" in err


def test_recalibrate_from_detect_json(capsys, tmp_path, key_file):
    paths = [write(tmp_path, f"p{i}.txt", plain_text(200, seed=i)) for i in range(30)]
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--json", *paths)
    null = write(tmp_path, "null.jsonl", out)
    code, out, err = run(capsys, "recalibrate", "--null", null, "--alpha", "0.05", "--json")
    assert code == 0, err
    assert json.loads(out)["n_null"] == 30


def test_recalibrate_stdin(capsys, monkeypatch):
    lines = "\n".join(json.dumps({"z": v}) for v in np.linspace(-2, 2, 50))
    code, out, err = run(capsys, "recalibrate", "--null", "-", "--alpha", "0.1", stdin=lines, monkeypatch=monkeypatch)
    assert code == 0, err


@pytest.mark.parametrize("content, words", [
    ('{"z": 1.0}\nnot json\n', ["line 2", "not JSON"]),
    ('{"z": 1.0}\n{"score": 2}\n', ["line 2", '"z"']),
    ('{"z": 1.0}\n{"z": "high"}\n', ["line 2", "finite"]),
    ('{"z": 1.0}\n{"z": NaN}\n', ["line 2", "finite"]),
    ('[1, 2]\n', ["line 1"]),
    ('\n{"z": 1.0}\n\n', ["at least 2"]),
    ("", ["at least 2"]),
])
def test_null_file_format_errors(capsys, tmp_path, content, words):
    path = write(tmp_path, "null.jsonl", content)
    code, _, err = run(capsys, "recalibrate", "--null", path, "--alpha", "0.01")
    assert code == EXIT_USAGE
    for word in words:
        assert word in err


def test_null_file_missing(capsys, tmp_path):
    code, _, err = run(capsys, "recalibrate", "--null", tmp_path / "none.jsonl", "--alpha", "0.01")
    assert code == EXIT_USAGE and "does not exist" in err


def test_read_null_z_skips_blank_lines_and_extra_fields():
    assert detect_commands._read_null_z(['{"z": 1}', "", '  {"z": -2.5, "file": "a"}  '], "f") == [1.0, -2.5]


# ---------------------------------------------------------------------------
# the key never leaks
# ---------------------------------------------------------------------------
def key_forms(key: bytes) -> list[str]:
    forms = [key.hex(), key.hex().upper(), base64.b64encode(key).decode(), repr(key)[2:-1]]
    try:
        forms.append(key.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    return [f for f in forms if len(f) >= 8]


def assert_no_key(key: bytes, text: str) -> None:
    for form in key_forms(key):
        assert form not in text, "the key leaked into the output"


def test_no_command_prints_the_key(capsys, tmp_path, key_file, monkeypatch):
    """Every path through the CLI, successful or failing, keeps the key out of its output."""
    marked = write(tmp_path, "marked.txt", watermarked_text(KEY))
    empty = write(tmp_path, "empty.txt", "")
    regime = tmp_path / "regime.json"
    runs = [
        ["detect", "--key-file", key_file, marked],
        ["detect", "--key-file", key_file, "--json", marked],
        ["detect", "--key-file", key_file, "--fail-on-detect", marked],
        ["detect", "--key-file", key_file, marked, empty],
        ["detect", "--key-file", key_file, "--tokenizer", "broken/tokenizer", marked],
        ["detect", "--key-file", key_file, "--S", "0", marked],
        ["regime", "--key-file", key_file, "--S", "5", "--alpha", "0.01", "--out", regime],
        ["detect", "--regime", regime, "--key-file", key_file, marked],
        ["keygen", "--out", key_file],
        ["keygen", "--out", tmp_path / "d.key", "--from-master", key_file, "--context", "ctx"],
    ]
    seen = []
    for argv in runs:
        code, out, err = run(capsys, *argv)
        seen.append(out + err)
    monkeypatch.setenv(_KEY_ENV, KEY.hex())
    seen.append("".join(run(capsys, "detect", "--json", marked)[1:]))
    monkeypatch.setenv(_KEY_ENV, "not-hex-" + KEY.hex())
    seen.append("".join(run(capsys, "detect", marked)[1:]))
    blob = "\n".join(seen) + regime.read_text()
    assert_no_key(KEY, blob)
    assert_no_key(derive_key(KEY, "ctx"), blob)
    assert key_fingerprint(KEY) in blob  # identification happens by fingerprint


# ---------------------------------------------------------------------------
# the installed console script, with the real tokenizer
# ---------------------------------------------------------------------------
def _script() -> str:
    exe = Path(sys.executable).with_name("chainmark")
    if exe.exists():
        return str(exe)
    found = shutil.which("chainmark")
    if not found:
        pytest.skip("the chainmark console script is not installed (pip install -e .)")
    return found


def test_console_script_help():
    proc = subprocess.run([_script(), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "examples:" in proc.stdout


@pytest.mark.slow
def test_console_script_end_to_end_with_real_tokenizer(tmp_path):
    """detect through the installed script with the embedded tokenizer."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop(_KEY_ENV, None)
    env.pop(KEY_FILE_ENV, None)
    script = _script()
    key_path = tmp_path / "k.key"
    key = write_key_file(key_path)
    # a text written to walk the cycle under this key, with the real tokenizer's ids
    tok = real_load_tokenizer()
    table = state_table(key, len(tok), 5)
    words = [i for i in range(1000, 6000) if tok.decode([i]).strip().isalpha() and tok.decode([i]).startswith(" ")]
    by_state = {s: [w for w in words if table[w] == s] for s in range(5)}
    ids, state = [by_state[0][0]], 0
    for j in range(120):
        state = (state + 1) % 5
        ids.append(by_state[state][j % len(by_state[state])])
    (tmp_path / "marked.txt").write_text(tok.decode(ids))
    (tmp_path / "plain.txt").write_text("The committee met on Tuesday to review the annual budget "
                                        "and agreed to postpone the decision until the spring.")
    proc = subprocess.run([script, "detect", "--key-file", str(key_path), "--json", "--fail-on-detect",
                           str(tmp_path / "marked.txt"), str(tmp_path / "plain.txt")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == EXIT_DETECTED, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert rows[0]["is_watermarked"] and rows[0]["z"] > 8
    assert not rows[1]["is_watermarked"]
    for form in key_forms(key):
        assert form not in proc.stdout + proc.stderr


def test_a_regime_pins_the_tokenizer_revision_and_detect_loads_it(capsys, tmp_path, key_file, fake_tokenizer):
    """`regime --tokenizer-revision` publishes the Hub revision; `detect --regime` loads the tokenizer
    at that revision; a tokenizer named on the command line does not inherit the regime's revision."""
    regime = tmp_path / "regime.json"
    code, _, err = run(capsys, "regime", "--key-file", key_file, "--S", "5", "--alpha", "0.01",
                       "--tokenizer", "org/tok", "--tokenizer-revision", "0123abcd", "--out", regime)
    assert code == 0, err
    doc = json.loads(regime.read_text())
    assert doc["tokenizer"] == "org/tok" and doc["tokenizer_revision"] == "0123abcd"
    assert _regime_problems(doc) == []
    marked = write(tmp_path, "marked.txt", watermarked_text(KEY))
    fake_tokenizer.clear()
    code, _, err = run(capsys, "detect", "--regime", regime, "--key-file", key_file, marked)
    assert code == 0, err
    assert ("revision", "org/tok", "0123abcd") in fake_tokenizer
    fake_tokenizer.clear()
    code, _, _ = run(capsys, "detect", "--regime", regime, "--key-file", key_file, "--tokenizer", "org/tok", marked)
    assert not any(isinstance(x, tuple) for x in fake_tokenizer)
    doc["tokenizer_revision"] = 5
    assert any("tokenizer_revision" in p for p in _regime_problems(doc))



def test_detect_segments_finds_a_pasted_passage(capsys, tmp_path, key_file):
    """--segments: the span of a watermarked passage inside plain text, in tokens and characters."""
    before, passage, after = plain_text(600, seed=2), watermarked_text(KEY, length=120), plain_text(500, seed=3)
    doc = write(tmp_path, "essay.txt", before + passage + after)
    plain = write(tmp_path, "plain.txt", plain_text(800, seed=4))
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--segments", "--json", doc, plain)
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["file"] for r in rows] == [str(doc), str(plain)]
    (span,) = rows[0]["segments"]
    assert abs(span["start"] - 600) <= 8 and abs(span["end"] - 720) <= 8, span
    assert span["char_start"] is None  # the byte tokenizer gives no offsets; the embedded one does
    assert rows[0]["p_value"] <= 0.01 and rows[0]["key_fingerprint"] == key_fingerprint(KEY)
    assert rows[1]["segments"] == [] and not rows[1]["is_watermarked"]
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--segments", doc, "--fail-on-detect")
    assert code == EXIT_DETECTED and "1 watermarked span(s)" in out
    import re
    start, end = map(int, re.search(r"tokens (\d+)-(\d+) \(", out).groups())
    assert (start, end) == (span["start"], span["end"])  # the table prints the span --json gives
    code, _, err = run(capsys, "detect", "--key-file", key_file, "--segments", "--draws", "99", "--alpha", "0.001",
                       doc)
    assert code == EXIT_USAGE and "at least 999" in err


# ---------------------------------------------------------------------------
# detect over a set of keys (several --key-file)
# ---------------------------------------------------------------------------


def test_detect_over_a_key_set_names_the_key_that_watermarked(capsys, tmp_path, key_file):
    others = []
    for i in range(3):
        others.append(tmp_path / f"account{i}.key")
        write_key_file(others[-1], derive_key(KEY, f"account {i}"))
    marked, plain = write(tmp_path, "marked.txt", watermarked_text()), write(tmp_path, "plain.txt", plain_text())
    keys = [a for path in [others[0], key_file, others[1], others[2]] for a in ("--key-file", path)]
    code, out, err = run(capsys, "detect", *keys, "--json", "--fail-on-detect", marked, plain)
    assert code == EXIT_DETECTED, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[0]["is_watermarked"] and rows[0]["key_fingerprint"] == key_fingerprint(KEY)
    assert rows[0]["n_keys"] == 4 and rows[0]["per_key_alpha"] == pytest.approx(0.01 / 4)
    assert not rows[1]["is_watermarked"] and rows[1]["key_fingerprint"] is None
    assert rows[0]["adjusted_p_value"] == pytest.approx(min(1.0, 4 * min(rows[0]["p_values"].values())))
    assert KEY.hex() not in out + err
    code, out, err = run(capsys, "detect", *keys, marked, plain)
    assert code == EXIT_OK and f"watermarked, key {key_fingerprint(KEY)}" in out and "over 4 keys" in out


@pytest.mark.parametrize("extra, words", [(["--segments"], "--segments"), (["--anytime"], "--anytime"),
                                          (["--threshold", "3"], "--threshold")])
def test_a_key_set_refuses_what_it_cannot_combine(capsys, tmp_path, key_file, extra, words):
    other = tmp_path / "other.key"
    write_key_file(other, derive_key(KEY, "other"))
    text = write(tmp_path, "t.txt", plain_text())
    code, out, err = run(capsys, "detect", "--key-file", key_file, "--key-file", other, *extra, text)
    assert code == EXIT_USAGE and words in err and "several --key-file" in err
    code, out, err = run(capsys, "detect", "--key-file", key_file, "--key-file", key_file, text)
    assert code == EXIT_USAGE and "the same key is given twice" in err
