"""Auditing a key before deployment (chainmark.auditor.keyaudit and `chainmark key audit`)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from chainmark import cli
from chainmark.auditor.rates import clopper_pearson, clopper_pearson_upper
from chainmark.detection import detect
from chainmark.auditor.keyaudit import (_CERTIFICATE_FORMAT, _CERTIFICATE_LEVEL, _KEYS_TRIED_NOTE, _SCOPE,
                                       _SCOPE_4, CertificationTarget,
                                       KeySelection, audit_key, certificate_problems, certify, _corpus_fingerprint,
                                       format_audit, _minimum_documents, read_certificate, recheck_certificate, seal)
from chainmark.auditor.keyfiles import _KEY_ENV, KEY_FILE_ENV
from chainmark.auditor.keyplan import plan_certification
from chainmark.config import ChainMarkConfig
from chainmark.keys import key_fingerprint

KEY = b"key-audit-test-key-0123456789abcdef"
CONFIG = ChainMarkConfig(KEY, S=5)  # the watermark's settings the audits here certify the key for


def repetitive_corpus(texts: int = 300, seed: int = 0) -> list[np.ndarray]:
    """Unwatermarked 'texts' that loop over a few phrases, as code and templated prose do."""
    rng = np.random.default_rng(seed)
    corpus = []
    for _ in range(texts):
        phrases = [rng.integers(0, 400, int(rng.integers(3, 7))) for _ in range(4)]
        corpus.append(np.concatenate([phrases[int(i)] for i in rng.integers(0, 4, 40)]))
    return corpus


def test_an_audit_reports_every_test_with_its_interval_and_a_threshold():
    cert = audit_key(CONFIG, repetitive_corpus(), CertificationTarget(alpha=0.01), vocab_size=400)
    assert cert["format"] == _CERTIFICATE_FORMAT and cert["key_fingerprint"] == key_fingerprint(KEY)
    assert set(cert["tests"]) == {"z", "distinct", "exact"}
    for test, row in cert["tests"].items():
        assert row["texts"] == row["documents"] == 300
        assert 0 <= row["ci_low"] <= row["fpr"] <= row["upper_bound"] <= row["ci_high"] <= 1
        assert row["certified"] == (row["upper_bound"] <= 0.01)
    # on text this repetitive the z-test's rate lies far above alpha; the exact test's does not
    assert cert["tests"]["z"]["ci_low"] > 0.01 and cert["tests"]["exact"]["fpr"] <= 0.01
    assert cert["tests"]["z"]["z_threshold"] > 2.326 and cert["tests"]["exact"]["p_threshold"] is not None
    assert cert["deploy_test"] == "exact" and cert["minimum_documents"] == 299
    assert cert["verdict"] == certify(cert["tests"]["exact"]["flagged"], 300, 0.01)
    assert audit_key(CONFIG, repetitive_corpus(), CertificationTarget(test="z"),
                     vocab_size=400)["verdict"] == "fail"
    assert f"verdict for the exact test: {cert['verdict'].upper()}" in format_audit(cert)


def test_a_pass_certifies_alpha_by_the_upper_bound_and_needs_about_300_documents():
    assert _minimum_documents(0.01) == 299 and _minimum_documents(0.05) == 59 and _minimum_documents(0.001) == 2995
    assert certify(0, 299, 0.01) == "pass" and certify(0, 298, 0.01) == "inconclusive"
    # the old rule ("not significantly above alpha") passed 3 of 100 at alpha = 1%; a certificate does not
    assert certify(3, 100, 0.01) != "pass" and certify(3, 1000, 0.01) == "pass"
    assert certify(30, 100, 0.01) == "fail" and certify(1, 20, 0.01) == "inconclusive"
    # a key whose true rate is alpha (or 3%) passes with probability at most 5%, the bound's level, at any
    # corpus size; one well below alpha passes on a large enough corpus
    from scipy.stats import binom
    for n in (300, 500, 2000):
        passing = max(x for x in range(n + 1) if certify(x, n, 0.01) == "pass")
        assert binom.cdf(passing, n, 0.01) <= 0.05 and binom.cdf(passing, n, 0.03) <= 0.05
    assert binom.cdf(max(x for x in range(5001) if certify(x, 5000, 0.01) == "pass"), 5000, 0.005) > 0.99
    # too few documents: the audit reports, certifies nothing, and says how many it needs
    small = audit_key(CONFIG, repetitive_corpus(100), vocab_size=400)
    assert small["verdict"] in ("inconclusive", "fail") and not small["tests"]["exact"]["certified"]
    assert "at least 299 documents" in format_audit(small) or small["verdict"] == "fail"


def test_windows_of_one_document_count_once():
    corpus = repetitive_corpus(40)
    docs = [f"doc {i // 4}" for i in range(40)]  # ten documents of four windows each
    cert = audit_key(CONFIG, corpus, CertificationTarget(test="z"), vocab_size=400, documents=docs)
    row = cert["tests"]["z"]
    assert cert["corpus"]["documents"] == row["documents"] == 10 and row["texts"] == 40
    flags = [r for r in audit_key(CONFIG, corpus, CertificationTarget(test="z"),
                                  vocab_size=400)["tests"]["z"].values()]
    per_text = audit_key(CONFIG, corpus, vocab_size=400)["tests"]["z"]
    assert row["texts_flagged"] == per_text["flagged"] and row["flagged"] <= per_text["flagged"]
    expected = len({docs[i] for i in range(40)
                    if detect(corpus[i], CONFIG, 0.01, vocab_size=400, test="z").is_watermarked})
    assert row["flagged"] == expected and flags
    with pytest.raises(ValueError, match="one document per text"):
        audit_key(CONFIG, corpus, documents=docs[:-1])


def test_a_forged_certificate_is_reported_and_a_recheck_recomputes_the_counts():
    corpus = repetitive_corpus(60)
    cert = seal({**audit_key(CONFIG, corpus, vocab_size=400), "tokenizer": "t", "tokenizer_fingerprint": "tf",
                 "package_version": "0"})
    assert certificate_problems(cert) == [] and recheck_certificate(cert, KEY, corpus, vocab_size=400) == []
    # 23 of 23 flagged with a verdict of "pass", sealed again so that the digest cannot give it away
    row = dict(cert["tests"]["exact"], flagged=23, documents=23)
    forged = seal({**cert, "tests": {**cert["tests"], "exact": row}, "verdict": "pass",
                   "corpus": {**cert["corpus"], "documents": 23}})
    problems = certificate_problems(forged)
    assert any("verdict is 'pass'" in p for p in problems) and any("fpr" in p for p in problems)
    # an edited verdict without a new digest is caught by the digest too
    edited = {**cert, "verdict": "pass" if cert["verdict"] != "pass" else "fail"}
    assert any("digest" in p for p in certificate_problems(edited))
    # consistent numbers that are not this corpus's: only the recheck with the key and the corpus sees it
    fewer = cert["tests"]["z"]["flagged"] - 1
    lowered = dict(cert["tests"]["z"], flagged=fewer, texts_flagged=fewer, fpr=fewer / 60)
    low, high = clopper_pearson(fewer, 60)
    lowered.update(ci_low=low, ci_high=high, upper_bound=clopper_pearson_upper(fewer, 60),
                   certified=clopper_pearson_upper(fewer, 60) <= 0.01)
    fake = seal({**cert, "tests": {**cert["tests"], "z": lowered}})
    assert certificate_problems(fake) == []
    assert any("z row's flagged" in p for p in recheck_certificate(fake, KEY, corpus, vocab_size=400))
    assert "not the certified one" in recheck_certificate(cert, KEY, corpus[:-1], vocab_size=400)[0]
    assert "fingerprint" in recheck_certificate(cert, b"another-key-0123456789abcdef", corpus)[0]


def test_choosing_among_keys_is_recorded_and_must_use_another_corpus():
    corpus = repetitive_corpus(30)
    with pytest.raises(ValueError, match="choose on one corpus and certify on another"):
        audit_key(CONFIG, corpus, vocab_size=400, selection=KeySelection(keys_tried=5))
    fingerprint = _corpus_fingerprint([np.asarray(t) for t in corpus])
    with pytest.raises(ValueError, match="choose on one corpus"):
        audit_key(CONFIG, corpus, vocab_size=400,
                  selection=KeySelection(keys_tried=5, selected_on=fingerprint))
    cert = audit_key(CONFIG, corpus, vocab_size=400,
                     selection=KeySelection(keys_tried=5, selected_on="0123456789abcdef"))
    assert cert["selection"] == {"keys_tried": 5, "selected_on": "0123456789abcdef", "note": _KEYS_TRIED_NOTE}
    cert = seal({**cert, "tokenizer": "t", "tokenizer_fingerprint": "tf", "package_version": "0"})
    assert format_audit(cert).splitlines()[-1] == f"chosen among 5 keys on corpus 0123456789abcdef; {_KEYS_TRIED_NOTE}"
    same = seal({**cert, "selection": {"keys_tried": 5, "selected_on": fingerprint}})
    assert any("biased low" in p for p in certificate_problems(same))


def test_the_corpus_fingerprint_follows_content_and_order():
    a, b = [1, 2, 3], [4, 5]
    assert _corpus_fingerprint([a, b]) == _corpus_fingerprint([np.array(a), np.array(b)])
    assert _corpus_fingerprint([a, b]) != _corpus_fingerprint([b, a]) != _corpus_fingerprint([a + b])


def _sealed(cert):
    return seal({**cert, "tokenizer": "t", "tokenizer_fingerprint": "tf", "package_version": "0"})


def test_the_fingerprint_covers_how_the_texts_are_grouped_into_documents():
    corpus = repetitive_corpus(40)
    by_four = [f"doc {i // 4}" for i in range(40)]  # ten documents of four windows each
    by_two = [f"doc {i // 2}" for i in range(40)]  # twenty of two
    fingerprints = {_corpus_fingerprint(corpus), _corpus_fingerprint(corpus, by_four),
                    _corpus_fingerprint(corpus, by_two)}
    assert len(fingerprints) == 3
    # which texts share a document counts, not what the documents are called
    assert _corpus_fingerprint(corpus, [f"other {i // 4}" for i in range(40)]) == _corpus_fingerprint(corpus, by_four)
    assert _corpus_fingerprint(corpus, [str(i) for i in range(40)]) == _corpus_fingerprint(corpus)
    # the same texts, as many documents, grouped otherwise: ten of four consecutive texts, or of every tenth text
    assert _corpus_fingerprint(corpus, [f"doc {i % 10}" for i in range(40)]) != _corpus_fingerprint(corpus, by_four)
    grouped = audit_key(CONFIG, corpus, vocab_size=400, documents=by_four)
    alone = audit_key(CONFIG, corpus, vocab_size=400)
    assert grouped["corpus"]["fingerprint"] != alone["corpus"]["fingerprint"]
    assert grouped["corpus"]["texts_fingerprint"] == alone["corpus"]["texts_fingerprint"] == \
        alone["corpus"]["fingerprint"]
    assert grouped["corpus"]["grouping"] == ("texts with the same document name form one document (40 texts, "
                                             "10 documents)")
    assert alone["corpus"]["grouping"] == "every text is its own document (no document names were given)"
    assert audit_key(CONFIG, corpus, vocab_size=400, documents=by_four,
                     grouping="four windows per licence")["corpus"]["grouping"] == "four windows per licence"
    # a recheck with the certified grouping agrees; with any other it fails, saying why
    cert = _sealed(grouped)
    assert recheck_certificate(cert, KEY, corpus, documents=by_four, vocab_size=400) == []
    for other in (None, by_two, [f"doc {i % 10}" for i in range(40)]):
        problems = recheck_certificate(cert, KEY, corpus, documents=other, vocab_size=400)
        assert len(problems) == 1 and problems[0].startswith("these are the certified texts, but grouped into "
                                                             "documents differently"), problems
        assert "the certificate's 10 (" in problems[0] and "recheck with the certificate's grouping" in problems[0]
    # a key chosen on these texts cannot be certified on them grouped otherwise
    with pytest.raises(ValueError, match="choose on one corpus"):
        audit_key(CONFIG, corpus, vocab_size=400, documents=by_four,
                  selection=KeySelection(keys_tried=3, selected_on=alone["corpus"]["fingerprint"]))


def test_an_older_certificate_is_refused_with_the_advice_to_re_run_the_audit(tmp_path):
    assert _CERTIFICATE_FORMAT == "chainmark-key-audit/5"
    cert = _sealed(audit_key(CONFIG, repetitive_corpus(30), vocab_size=400))
    older = certificate_problems(seal({**cert, "format": "chainmark-key-audit/3"}))
    assert len(older) == 1 and "does not state what it certifies" in older[0] and "public-output budget" in older[0]
    old = seal({**cert, "format": "chainmark-key-audit/2"})
    problems = certificate_problems(old)
    assert len(problems) == 1 and problems[0].startswith("a chainmark-key-audit/2 certificate, an older format")
    assert "does not cover how the texts are grouped into documents" in problems[0]
    assert "re-run the audit (chainmark key audit)" in problems[0]
    path = tmp_path / "old.audit.json"
    path.write_text(json.dumps(old), "utf-8")
    with pytest.raises(ValueError, match="re-run the audit"):
        read_certificate(str(path))
    # a certificate of this format without the new corpus fields is incomplete
    lacking = _sealed({**cert, "corpus": {k: v for k, v in cert["corpus"].items() if k != "grouping"}})
    assert "the certificate's corpus lacks grouping" in certificate_problems(lacking)


def test_a_certificate_says_what_it_does_not_certify_and_the_public_output_budget():
    """Every certificate states its scope (natural text, not an adversary who reads the outputs) and the budget
    of public output the deployer declares; changing either is a problem even when resealed."""
    cert = _sealed(audit_key(CONFIG, repetitive_corpus(30), CertificationTarget(public_output_budget=2_000),
                             vocab_size=400))
    assert certificate_problems(cert) == []
    assert cert["scope"] == _SCOPE and "forgery" in cert["scope"]["does_not_certify"]
    assert cert["public_output_budget"]["tokens"] == 2_000
    assert "public-output budget: 2,000 tokens (declared, not verified)" in format_audit(cert)
    assert "does not certify: that flagged text came from the deployment" in format_audit(cert)
    unstated = _sealed(audit_key(CONFIG, repetitive_corpus(30), vocab_size=400))
    assert unstated["public_output_budget"]["tokens"] is None and "not stated" in format_audit(unstated)
    narrowed = _sealed({**cert, "scope": {"certifies": cert["scope"]["certifies"], "does_not_certify": ""}})
    assert any("scope" in p for p in certificate_problems(narrowed))
    for bad in (0, -5, 2.5, True, "many"):
        changed = _sealed({**cert, "public_output_budget": {**cert["public_output_budget"], "tokens": bad}})
        assert any("public_output_budget" in p for p in certificate_problems(changed)), bad
    with pytest.raises(ValueError):
        CertificationTarget(public_output_budget=0)


def test_a_certificate_states_its_bound_at_95_percent_or_more():
    assert _CERTIFICATE_LEVEL == 0.95
    corpus = repetitive_corpus(30)
    for level in (0.5, 0.9, 1.0, float("nan"), True):
        with pytest.raises(ValueError, match="level must be at least 0.95"):
            audit_key(CONFIG, corpus, CertificationTarget(level=level), vocab_size=400)
    with pytest.raises(ValueError, match="level must be at least 0.95"):
        certify(3, 418, 0.01, level=0.5)
    assert audit_key(CONFIG, corpus, CertificationTarget(level=0.99), vocab_size=400)["level"] == 0.99
    # 3 of 418 documents flagged: inconclusive at 95%; re-sealed at level 0.5 with every bound recomputed, a pass
    from chainmark.auditor.keyaudit import _row

    assert certify(3, 418, 0.01) == "inconclusive" and clopper_pearson_upper(3, 418, 0.5) <= 0.01
    cert = _sealed(audit_key(CONFIG, corpus, vocab_size=400))
    rows = {test: {**row, **_row(np.arange(418) < 3, 418, 0.01, 0.5), "texts_flagged": 3}
            for test, row in cert["tests"].items()}
    resealed = seal({**cert, "level": 0.5, "minimum_documents": _minimum_documents(0.01, 0.5), "tests": rows,
                     "corpus": {**cert["corpus"], "texts": 418, "documents": 418}, "verdict": "pass"})
    assert all(row["certified"] for row in resealed["tests"].values())
    assert certificate_problems(resealed) == [
        "the certificate's level is 0.5, but a certificate states its bound at a confidence of at least 0.95: "
        "at a lower level its verdict passes keys whose rate lies above alpha"]
    assert recheck_certificate(resealed, KEY, corpus, vocab_size=400)[0].startswith("the certificate's level is 0.5")


def test_the_settings_travel_as_a_config_a_target_and_a_selection():
    """The watermark's settings are one ChainMarkConfig, what is certified one CertificationTarget, how the key
    was chosen one KeySelection; each is checked by name."""
    corpus = repetitive_corpus(30)
    with pytest.raises(TypeError, match="config must be a ChainMarkConfig, got bytes"):
        audit_key(KEY, corpus)
    with pytest.raises(TypeError, match="target must be a CertificationTarget, got str"):
        audit_key(CONFIG, corpus, "exact")
    with pytest.raises(TypeError, match="selection must be a KeySelection, got int"):
        audit_key(CONFIG, corpus, selection=5)
    with pytest.raises(ValueError, match="keys_tried must be an integer >= 1, got 0"):
        KeySelection(keys_tried=0)
    with pytest.raises(TypeError, match="selected_on must be a corpus fingerprint"):
        KeySelection(keys_tried=2, selected_on=123)
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\)"):
        CertificationTarget(alpha=1.5)
    with pytest.raises(ValueError, match="test must be one of"):
        CertificationTarget(test="t")
    assert CertificationTarget() == CertificationTarget("exact", 0.01, _CERTIFICATE_LEVEL)
    assert KeySelection() == KeySelection(1, None)


def test_keys_tried_is_recorded_as_declared_and_the_table_says_how_documents_were_formed():
    corpus = repetitive_corpus(40)
    cert = _sealed(audit_key(CONFIG, corpus, vocab_size=400,
                             documents=[f"licence {i // 10}" for i in range(40)],
                             grouping="ten windows of 200 tokens per licence"))
    assert cert["selection"] == {"keys_tried": 1, "selected_on": None, "note": _KEYS_TRIED_NOTE}
    assert _KEYS_TRIED_NOTE.startswith("keys_tried and selected_on are declared by whoever ran the audit, not verified")
    table = format_audit(cert).splitlines()
    assert table[1] == "documents: ten windows of 200 tokens per licence"
    assert table[-1] == f"keys tried: 1; {_KEYS_TRIED_NOTE}"
    # the note is part of what a certificate must say
    silent = _sealed({**cert, "selection": {"keys_tried": 1, "selected_on": None}})
    assert certificate_problems(silent) == [
        "the certificate's selection lacks its note that keys_tried is declared, not verified"]


def test_certificate_problems_name_every_mismatch():
    cert = seal({**audit_key(CONFIG, repetitive_corpus(30), vocab_size=400), "tokenizer": "t",
                 "tokenizer_fingerprint": "tf", "package_version": "0"})
    assert certificate_problems(cert, key_fingerprint=key_fingerprint(KEY), tokenizer_fingerprint="tf", S=5,
                                topology="clockwork") == []
    problems = certificate_problems(cert, key_fingerprint="other", tokenizer_fingerprint="x", S=7,
                                    topology="soft_cycle")
    assert len(problems) == 4 and any("key_fingerprint" in p for p in problems)
    assert certificate_problems({"format": "other"}) == [f"not a {_CERTIFICATE_FORMAT} certificate"]
    assert "lacks" in certificate_problems({"format": _CERTIFICATE_FORMAT})[0]
    with pytest.raises(ValueError, match="nothing to audit"):
        audit_key(CONFIG, [[1]])


@pytest.fixture
def keys(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(_KEY_ENV, raising=False)
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
    # every reply a document; the Language Reference's windows grouped by topic
    assert 1200 < cert["corpus"]["documents"] < cert["corpus"]["texts"] and certificate_problems(cert) == []
    assert cert["corpus"]["unit"] == "document" and cert["corpus"]["grouping"].startswith("each of the ")
    assert "replies of the embedded model is one document; the windows of 200 tokens cut from one topic of " \
        in cert["corpus"]["grouping"]
    assert f"documents: {cert['corpus']['grouping']}\n" in out and _KEYS_TRIED_NOTE in out
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
    # a certificate that does not certify the key can be published, and every audit then says so
    half = cert["corpus"]["documents"] // 2
    row = dict(cert["tests"]["exact"], flagged=half, fpr=half / cert["corpus"]["documents"])
    row.update(zip(("ci_low", "ci_high"), clopper_pearson(row["flagged"], row["documents"])),
               upper_bound=clopper_pearson_upper(row["flagged"], row["documents"]), certified=False)
    failed = seal({**cert, "tests": {**cert["tests"], "exact": row}, "verdict": "fail"})
    assert certificate_problems(failed) == []
    (tmp_path / "failed.json").write_text(json.dumps(failed), "utf-8")
    assert cli.main(["detect", "--key-file", str(keys["a"]), "--S", "5", "--test", "exact", "--certificate",
                     str(tmp_path / "failed.json"), str(text)]) == 0
    assert "not certified for the exact test (its audit says FAIL)" in capsys.readouterr().err
    # a forged verdict is refused by every command that reads the certificate
    (tmp_path / "forged.json").write_text(json.dumps({**failed, "verdict": "pass"}), "utf-8")
    assert cli.main(["detect", "--key-file", str(keys["a"]), "--S", "5", "--test", "exact", "--certificate",
                     str(tmp_path / "forged.json"), str(text)]) == 2
    assert "verdict is 'pass'" in capsys.readouterr().err
    # the auditor with the key recomputes the counts from the corpus
    assert cli.main(["key", "audit", "--key-file", str(keys["a"]), "--S", "5", "--check", str(cert_path)]) == 0
    assert "agree with the certificate" in capsys.readouterr().out
    assert cli.main(["key", "audit", "--key-file", str(keys["b"]), "--S", "5", "--check", str(cert_path)]) == 1
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
    assert cert["corpus"]["texts"] == cert["corpus"]["documents"] == 120
    assert cert["corpus"]["name"].startswith("120 text(s)") and cert["verdict"] != "pass"  # 120 < 299
    assert cert["public_output_budget"]["tokens"] is None and cert["scope"]["does_not_certify"]
    assert cli.main(args + ["--corpus", str(corpus), "--text-field", "body", "--public-output-budget", "5000"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["public_output_budget"]["tokens"] == 5000
    assert cli.main(args + ["--corpus", str(corpus), "--text-field", "body", "--public-output-budget", "0"]) == 2
    assert "--public-output-budget" in capsys.readouterr().err
    assert cert["corpus"]["grouping"] == ("each non-blank line of a .jsonl file is one document (its 'body' "
                                          "field); no two texts share a document; each text prepared as nfc,lf "
                                          "before tokenizing")
    (tmp_path / "a.txt").write_text("One whole file of text, one document. " * 5, "utf-8")
    assert cli.main(args[:-1] + ["--corpus", str(corpus), str(tmp_path / "a.txt"), "--text-field", "body"]) in (0, 1)
    out = capsys.readouterr().out
    assert ("documents: each non-blank line of a .jsonl file is one document (its 'body' field); each other file "
            "is one document (its whole text); no two texts share a document; each text prepared as nfc,lf before "
            "tokenizing\n") in out
    assert "121 documents" in out and f"keys tried: 1; {_KEYS_TRIED_NOTE}" in out
    assert cli.main(args + ["--corpus", str(corpus), "--text-field", "body", "--keys-tried", "3"]) == 2
    assert "choose on one corpus" in capsys.readouterr().err
    assert cli.main(args + ["--corpus", str(corpus)]) == 2  # no field "text"
    assert "no text field 'text'" in capsys.readouterr().err
    assert cli.main(args + ["--corpus", str(tmp_path / "missing.txt")]) == 2
    (tmp_path / "bad.jsonl").write_text("{not json\n", "utf-8")
    assert cli.main(args + ["--corpus", str(tmp_path / "bad.jsonl")]) == 2
    assert cli.main(["key"]) == 2  # the group alone prints its help


def test_the_key_audit_prepares_its_corpus_as_the_detector_will(tmp_path, keys, capsys):
    """``--corpus`` texts are prepared before tokenizing (NFC and LF line endings unless ``--text-preparation``
    says otherwise), as ``chainmark detect`` prepares a text under the regime: a corpus saved with CRLF line
    endings and decomposed accents is audited as the same token ids as its clean copy, and the certificate says
    how its texts were prepared."""
    import unicodedata

    lines = [f"Caf\u00e9 note {i}: the na\u00efve r\u00e9sum\u00e9 was read\nand filed on day {i}." for i in range(40)]
    for name, text in (("clean", "\n\n".join(lines)), ("saved", unicodedata.normalize("NFD", "\r\n\r\n".join(lines)))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "doc.txt").write_bytes(text.encode("utf-8"))
    args = ["key", "audit", "--key-file", str(keys["a"]), "--S", "5", "--json", "--corpus"]
    certs = {}
    for name, extra in (("clean", []), ("saved", []), ("as given", ["--text-preparation", "none"])):
        folder = "clean" if name == "clean" else "saved"
        assert cli.main(args + [str(tmp_path / folder / "doc.txt"), *extra]) in (0, 1)
        certs[name] = json.loads(capsys.readouterr().out)
    assert certs["saved"]["corpus"]["fingerprint"] == certs["clean"]["corpus"]["fingerprint"]
    assert certs["as given"]["corpus"]["fingerprint"] != certs["clean"]["corpus"]["fingerprint"]
    assert certs["as given"]["corpus"]["grouping"].endswith("each text prepared as none before tokenizing")
    assert cli.main(["key", "audit", "--key-file", str(keys["a"]), "--S", "5", "--text-preparation", "nfc"]) == 2
    assert "applies to --corpus files" in capsys.readouterr().err


def test_fpr_across_keys_gives_one_row_per_key_and_test():
    from chainmark.auditor.keyaudit import fpr_across_keys

    keys = [b"first-key-0123456789abcdef", b"second-key-0123456789abcde"]
    rows = fpr_across_keys(repetitive_corpus(60), keys, S=5, vocab_size=400)
    assert [(r["key"], r["test"]) for r in rows] == [(key_fingerprint(k), t) for k in keys
                                                    for t in ("z", "distinct", "exact")]
    for row in rows:
        assert row["texts"] == 60 and row["ci_low"] <= row["fpr"] <= row["ci_high"]
    one = audit_key(ChainMarkConfig(keys[0], S=5), repetitive_corpus(60), vocab_size=400)
    assert rows[0]["flagged"] == one["tests"]["z"]["flagged"]  # the same scores as the audit
    with pytest.raises(ValueError, match="at least one text"):
        fpr_across_keys([], keys)


def test_a_certificate_promises_a_rate_apart_from_the_level_its_test_flags_at():
    """Tested at alpha = 0.4% and certified against a promise of 1%: the rows and the verdict are judged against
    the promise, the regime's alpha is the test's; a format-4 certificate (no promise) promises its alpha."""
    corpus = [np.random.default_rng(i).integers(0, 400, 60) for i in range(700)]
    target = CertificationTarget(alpha=0.004, promise=0.01)
    cert = _sealed(audit_key(CONFIG, corpus, target, vocab_size=400))
    row = cert["tests"]["exact"]
    assert cert["alpha"] == 0.004 and cert["promise"] == 0.01 and cert["minimum_documents"] == 299
    assert row["certified"] == (row["upper_bound"] <= 0.01) and cert["verdict"] == certify(row["flagged"], 700, 0.01)
    assert certificate_problems(cert, alpha=0.004) == []
    assert "made for alpha 0.004, this audit uses 0.01" in certificate_problems(cert, alpha=0.01)[0]
    assert "alpha=0.004 (the test's level), promise=0.01" in format_audit(cert)
    assert "at most 0.01 with 95% confidence" in format_audit(cert) or cert["verdict"] != "pass"
    # the promise is covered by the digest, and a resealed promise no longer fits the verdict
    assert "digest" in " ".join(certificate_problems({**cert, "promise": 0.002}))
    if cert["verdict"] == "pass":
        assert any("verdict" in p for p in certificate_problems(_sealed({**cert, "promise": 0.002})))
    # a format-4 certificate (written before the promise existed) promises its alpha and is still read
    four = {k: v for k, v in audit_key(CONFIG, corpus, CertificationTarget(alpha=0.01), vocab_size=400).items()
            if k != "promise"}
    four = _sealed({**four, "format": "chainmark-key-audit/4", "scope": dict(_SCOPE_4)})
    assert certificate_problems(four) == []
    assert any("lacks promise" in p for p in certificate_problems(_sealed({k: v for k, v in cert.items()
                                                                            if k != "promise"})))
    with pytest.raises(ValueError, match="promise"):
        CertificationTarget(promise=1.5)


def test_a_plan_finds_the_level_at_which_pilot_keys_certify_and_is_reproducible():
    corpus = [np.random.default_rng(i).integers(0, 300, 50) for i in range(500)]
    plan = plan_certification(CONFIG, corpus, 0.05, probability=0.8, pilot_keys=40, vocab_size=300)
    passing = [x for x in range(501) if certify(x, 500, 0.05) == "pass"]
    assert plan.most_flagged == max(passing) and plan.documents == plan.texts == 500
    assert 0 < plan.test_alpha <= 0.05 and plan.pass_share.trials == 40 and plan.pass_share.rate >= 0.8
    assert plan.at_promise.rate <= plan.pass_share.rate
    assert plan == plan_certification(CONFIG, corpus, 0.05, probability=0.8, pilot_keys=40, vocab_size=300)
    assert "deploy the exact test at alpha = " in plan.describe() and "never draw keys" in plan.describe()
    assert "not forgery or scrubbing" in plan.describe() and "--public-output-budget" in plan.describe()
    # the plan's level holds: an audit at it, under keys the plan never saw, passes about as often
    fresh = [audit_key(ChainMarkConfig(KEY + bytes([i]), S=5), corpus,
                       CertificationTarget(alpha=plan.test_alpha, promise=0.05), vocab_size=300)["verdict"] == "pass"
             for i in range(20)]
    assert np.mean(fresh) >= 0.5
    # a stricter probability asks for a stricter level; windows of one document count once
    assert plan_certification(CONFIG, corpus, 0.05, probability=0.95, pilot_keys=40,
                              vocab_size=300).test_alpha <= plan.test_alpha
    grouped = plan_certification(CONFIG, corpus, 0.05, pilot_keys=20, vocab_size=300,
                                 documents=[i // 5 for i in range(500)][:500])
    assert grouped.documents == 100 and grouped.texts == 500


def test_a_plan_refuses_what_cannot_certify():
    corpus = [np.arange(i, i + 20) for i in range(100)]
    with pytest.raises(ValueError, match="100 documents cannot certify 0.01 even with none flagged"):
        plan_certification(CONFIG, corpus, 0.01, vocab_size=400)
    with pytest.raises(ValueError, match="pilot_keys"):
        plan_certification(CONFIG, corpus, 0.05, pilot_keys=5, vocab_size=400)
    with pytest.raises(ValueError, match="probability"):
        plan_certification(CONFIG, corpus, 0.05, probability=1.0, vocab_size=400)


def test_key_audit_plans_before_it_audits(tmp_path, keys, capsys):
    corpus = tmp_path / "posts.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": f"Post {i}: " + " ".join(f"w{(i * 7 + j) % 97}" for j in range(30))})
                                for i in range(400)) + "\n", "utf-8")
    base = ["key", "audit", "--key-file", str(keys["a"]), "--S", "5", "--corpus", str(corpus), "--promise", "0.05"]
    assert cli.main(base + ["--plan", "--probability", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "on 400 documents (400 texts)" in out and "deploy the exact test at alpha = " in out
    assert cli.main(base + ["--plan", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["promise"] == 0.05 and plan["pass_share"]["trials"] == 200 and plan["test_alpha"] <= 0.05
    assert cli.main(base + ["--plan", "--test", "z"]) == 2 and "--plan plans the exact test" in capsys.readouterr().err
    assert cli.main(base + ["--alpha", str(plan["test_alpha"]), "--json"]) in (0, 1)
    cert = json.loads(capsys.readouterr().out)
    assert cert["alpha"] == plan["test_alpha"] and cert["promise"] == 0.05


@pytest.mark.slow
def test_on_the_books_corpus_fresh_keys_certify_as_often_as_the_plan_says():
    """The plan's probability, from pilot keys derived from one key, against 24 fresh keys audited at its level
    on the default corpus (the model's replies and the Language Reference): the fresh keys' share that passes,
    with its 95% interval, holds the planned probability."""
    pytest.importorskip("cmlab")
    from cmlab.harness.corpora import key_audit_corpus

    from chainmark.auditor.tokenizer import load_tokenizer
    from chainmark.auditor.rates import rate_estimate
    from chainmark.keys import derive_key

    tokenizer = load_tokenizer()
    _, _, texts, documents = key_audit_corpus(tokenizer)
    config = ChainMarkConfig(derive_key(KEY, "plan"), S=5)
    plan = plan_certification(config, texts, 0.01, probability=0.9, documents=documents, vocab_size=len(tokenizer))
    assert plan.most_flagged == 6 and plan.test_alpha < 0.01 and plan.at_promise.rate < 0.5
    fresh = rate_estimate([
        audit_key(ChainMarkConfig(derive_key(KEY, f"fresh/{i}"), S=5), texts,
                  CertificationTarget(alpha=plan.test_alpha, promise=0.01), vocab_size=len(tokenizer),
                  documents=documents)["verdict"] == "pass" for i in range(24)])
    assert fresh.low <= plan.probability <= fresh.high, (fresh, plan)
    assert fresh.low <= plan.pass_share.rate <= fresh.high, (fresh, plan)
