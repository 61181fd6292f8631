"""Auditing a key before deployment (chainmark.keyaudit and `chainmark key audit`)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from chainmark import cli
from chainmark.keyaudit import (CERTIFICATE_FORMAT, audit_key, certificate_problems, corpus_fingerprint,
                                format_audit, read_certificate)
from chainmark.keys import KEY_ENV, KEY_FILE_ENV, key_fingerprint

KEY = b"key-audit-test-key-0123456789abcdef"


def repetitive_corpus(texts: int = 300, seed: int = 0) -> list[np.ndarray]:
    """Unwatermarked 'texts' that loop over a few phrases, as code and templated prose do."""
    rng = np.random.default_rng(seed)
    corpus = []
    for _ in range(texts):
        phrases = [rng.integers(0, 400, int(rng.integers(3, 7))) for _ in range(4)]
        corpus.append(np.concatenate([phrases[int(i)] for i in rng.integers(0, 4, 40)]))
    return corpus


def test_an_audit_reports_every_test_with_its_interval_and_a_threshold():
    cert = audit_key(KEY, repetitive_corpus(), S=5, alpha=0.01, vocab_size=400)
    assert cert["format"] == CERTIFICATE_FORMAT and cert["key_fingerprint"] == key_fingerprint(KEY)
    assert set(cert["tests"]) == {"z", "distinct", "exact"}
    for test, row in cert["tests"].items():
        assert row["texts"] == 300 and 0 <= row["ci_low"] <= row["fpr"] <= row["ci_high"] <= 1
        assert row["holds_alpha"] == (row["ci_low"] <= 0.01)
    # on text this repetitive the z-test's rate lies far above alpha; the exact test's does not
    assert not cert["tests"]["z"]["holds_alpha"] and cert["tests"]["exact"]["holds_alpha"]
    assert cert["tests"]["z"]["z_threshold"] > 2.326 and cert["tests"]["exact"]["p_threshold"] is not None
    assert cert["verdict"] == "pass" and cert["deploy_test"] == "exact"
    assert audit_key(KEY, repetitive_corpus(), S=5, deploy_test="z", vocab_size=400)["verdict"] == "fail"
    assert "verdict for the exact test: PASS" in format_audit(cert)


def test_the_corpus_fingerprint_follows_content_and_order():
    a, b = [1, 2, 3], [4, 5]
    assert corpus_fingerprint([a, b]) == corpus_fingerprint([np.array(a), np.array(b)])
    assert corpus_fingerprint([a, b]) != corpus_fingerprint([b, a]) != corpus_fingerprint([a + b])


def test_certificate_problems_name_every_mismatch():
    cert = audit_key(KEY, repetitive_corpus(30), S=5, vocab_size=400)
    cert.update(tokenizer="t", tokenizer_fingerprint="tf", package_version="0")
    assert certificate_problems(cert, key_fingerprint=key_fingerprint(KEY), tokenizer_fingerprint="tf", S=5,
                                topology="clockwork") == []
    problems = certificate_problems(cert, key_fingerprint="other", tokenizer_fingerprint="x", S=7,
                                    topology="soft_cycle")
    assert len(problems) == 4 and any("key_fingerprint" in p for p in problems)
    assert certificate_problems({"format": "other"}) == [f"not a {CERTIFICATE_FORMAT} certificate"]
    assert "lacks" in certificate_problems({"format": CERTIFICATE_FORMAT})[0]
    with pytest.raises(ValueError, match="nothing to audit"):
        audit_key(KEY, [[1]], S=5)


@pytest.fixture
def keys(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    paths = {}
    for name in ("a", "b"):
        paths[name] = tmp_path / f"{name}.key"
        assert cli.main(["keygen", "--out", str(paths[name])]) == 0
    capsys.readouterr()
    return paths


def test_key_audit_writes_a_certificate_that_regime_and_detect_check(tmp_path, keys, capsys):
    cert_path, regime, text = tmp_path / "a.audit.json", tmp_path / "r.json", tmp_path / "t.txt"
    text.write_text("A short text to audit. " * 10, "utf-8")
    code = cli.main(["key", "audit", "--key-file", str(keys["a"]), "--S", "5", "--out", str(cert_path)])
    out = capsys.readouterr().out
    cert = read_certificate(str(cert_path))
    assert code == (0 if cert["verdict"] == "pass" else 1)
    assert cert["corpus"]["texts"] > 1200 and "reference null" in cert["corpus"]["name"]
    assert cert["tokenizer_fingerprint"] and "FPR [95% CI]" in out
    assert key_fingerprint(keys["a"].read_bytes()) == cert["key_fingerprint"]
    assert keys["a"].read_bytes().hex() not in cert_path.read_text("utf-8")  # never the key
    # an existing certificate is never overwritten
    assert cli.main(["key", "audit", "--key-file", str(keys["a"]), "--S", "5", "--out", str(cert_path)]) == 2
    # published inside the regime, checked by detect
    assert cli.main(["regime", "--key-file", str(keys["a"]), "--S", "5", "--alpha", "0.01", "--test", "exact",
                     "--certificate", str(cert_path), "--out", str(regime)]) == 0
    assert json.loads(regime.read_text("utf-8"))["key_audit"]["key_fingerprint"] == cert["key_fingerprint"]
    assert cli.main(["detect", "--key-file", str(keys["a"]), "--regime", str(regime), str(text)]) == 0
    capsys.readouterr()
    # a certificate for another test or alpha than the regime's is refused: it does not speak for it
    assert cli.main(["regime", "--key-file", str(keys["a"]), "--S", "5", "--alpha", "0.01", "--test", "z",
                     "--certificate", str(cert_path)]) == 2  # the regime's test is the z-test
    assert "deploy_test" in capsys.readouterr().err
    assert cli.main(["regime", "--key-file", str(keys["a"]), "--S", "5", "--alpha", "0.05", "--test", "exact",
                     "--certificate", str(cert_path)]) == 2
    assert "alpha" in capsys.readouterr().err
    # a certificate that says the key failed can be published, and every audit then says so
    failed = dict(cert, verdict="fail")
    (tmp_path / "failed.json").write_text(json.dumps(failed), "utf-8")
    assert cli.main(["detect", "--key-file", str(keys["a"]), "--S", "5", "--test", "exact", "--certificate",
                     str(tmp_path / "failed.json"), str(text)]) == 0
    assert "failed its audit for the exact test" in capsys.readouterr().err
    # an auditor who applies another test than the certificate's is told the rate is not certified
    assert cli.main(["detect", "--key-file", str(keys["a"]), "--regime", str(regime), "--test", "z", str(text)]) == 0
    assert "not certified" in capsys.readouterr().err
    # a certificate for another key, S or topology is refused (exit 2)
    assert cli.main(["regime", "--key-file", str(keys["b"]), "--S", "5", "--alpha", "0.01",
                     "--certificate", str(cert_path)]) == 2
    assert cli.main(["regime", "--key-file", str(keys["a"]), "--S", "7", "--alpha", "0.01",
                     "--certificate", str(cert_path)]) == 2
    assert cli.main(["detect", "--key-file", str(keys["a"]), "--S", "6", "--certificate", str(cert_path),
                     str(text)]) == 2
    doc = json.loads(regime.read_text("utf-8"))
    doc["key_audit"]["tokenizer_fingerprint"] = "0" * 16
    (tmp_path / "tampered.json").write_text(json.dumps(doc), "utf-8")
    assert cli.main(["detect", "--key-file", str(keys["a"]), "--regime", str(tmp_path / "tampered.json"),
                     str(text)]) == 2
    assert "certificate does not fit" in capsys.readouterr().err


def test_key_audit_on_the_deployers_own_corpus_and_its_errors(tmp_path, keys, capsys):
    corpus = tmp_path / "posts.jsonl"
    corpus.write_text("\n".join(json.dumps({"body": f"Post number {i}: the weather was fine and the"
                                                    f" train left on time, as it did on day {i}."})
                                for i in range(120)) + "\n", "utf-8")
    args = ["key", "audit", "--key-file", str(keys["a"]), "--S", "5", "--json"]
    assert cli.main(args + ["--corpus", str(corpus), "--text-field", "body"]) in (0, 1)
    cert = json.loads(capsys.readouterr().out)
    assert cert["corpus"]["texts"] == 120 and cert["corpus"]["name"].startswith("120 text(s)")
    assert cli.main(args + ["--corpus", str(corpus)]) == 2  # no field "text"
    assert "no text field 'text'" in capsys.readouterr().err
    assert cli.main(args + ["--corpus", str(tmp_path / "missing.txt")]) == 2
    (tmp_path / "bad.jsonl").write_text("{not json\n", "utf-8")
    assert cli.main(args + ["--corpus", str(tmp_path / "bad.jsonl")]) == 2
    assert cli.main(["key"]) == 2  # the group alone prints its help


def test_fpr_across_keys_gives_one_row_per_key_and_test():
    from chainmark.keyaudit import fpr_across_keys

    keys = [b"first-key-0123456789abcdef", b"second-key-0123456789abcde"]
    rows = fpr_across_keys(repetitive_corpus(60), keys, S=5, vocab_size=400)
    assert [(r["key"], r["test"]) for r in rows] == [(key_fingerprint(k), t) for k in keys
                                                    for t in ("z", "distinct", "exact")]
    for row in rows:
        assert row["texts"] == 60 and row["ci_low"] <= row["fpr"] <= row["ci_high"]
    one = audit_key(keys[0], repetitive_corpus(60), S=5, vocab_size=400)
    assert rows[0]["flagged"] == one["tests"]["z"]["flagged"]  # the same scores as the audit
    with pytest.raises(ValueError, match="at least one text"):
        fpr_across_keys([], keys)
