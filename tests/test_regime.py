"""Tests of the detection regime object (chainmark.auditor.regime.Regime): its document, settings and decision.

The command line's use of it (``chainmark regime``, ``chainmark detect --regime``) is tested in
test_cli.py and test_hard_edges.py; here the object itself, without a tokenizer or a model.
"""
from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from chainmark.calibrate import z_alpha
from chainmark.detection import detect
from chainmark.keys import key_fingerprint
from chainmark.auditor.transit import AS_GIVEN
from chainmark.auditor.regime import (_REGIME_FORMAT, Regime, RegimeError, published_regime_problems, _regime_digest,
                                      regime_document, _regime_problems, tokenizer_fingerprint)
from chainmark.topology import TOPOLOGY_K
from chainmark.topology import Topology, cycle_topology, resolve_topology
from chainmark.verdict import Verdict

KEY = b"regime-test-key-0123456789abcdef"


class _Vocab:
    """The two things a regime asks of a tokenizer: its vocabulary and its length."""

    def get_vocab(self):
        return {"a": 0, "b": 1, "c": 2}

    def __len__(self):
        return 3


def _verdict(z: float = 0.0, p: float = 0.5, n_tokens: int = 100, n_scored: int = 99) -> Verdict:
    return Verdict(phi=0.5, z=z, p_value=p, is_watermarked=False, n_tokens=n_tokens, n_scored=n_scored,
                   n_hits=n_scored // 2, p0=0.2, alpha=0.01)


# ---------------------------------------------------------------- the document


def test_a_published_document_round_trips_through_its_json():
    settings = Regime(S=3, topology="soft_cycle", alpha=0.001, threshold=3.5, n_min=200, tokenizer="org/tok",
                      tokenizer_revision="0123abcd", rho=0.5, gate="high_entropy", test="distinct",
                      recalibration={"method": "sd", "n_null": 500})
    doc = regime_document(KEY, settings, _Vocab())
    regime = Regime.from_document(doc)
    back = Regime.from_document(json.loads(json.dumps(doc, indent=2, allow_nan=False)))
    assert back == regime and back.to_document() == doc
    assert list(regime.to_document()) == list(doc)  # the format is the document, key for key
    assert (back.S, back.topology, back.topo.k, back.alpha, back.threshold, back.distinct_pairs, back.n_min) == \
           (3, "soft_cycle", 2, 0.001, 3.5, True, 200)
    assert back.key_fingerprint == key_fingerprint(KEY)
    assert back.tokenizer_fingerprint == tokenizer_fingerprint(_Vocab())
    assert "key" not in doc and _regime_problems(doc) == []


def test_the_regime_carries_the_whole_configuration_but_the_key():
    """``Regime.from_config`` publishes the gate's threshold with rho and the gate, the document keeps it, and the
    configuration the regime gives back with the key is the deployer's, threshold and all; a threshold without
    its gate is refused."""
    from chainmark.config import ChainMarkConfig
    from chainmark.gates import Gate

    config = ChainMarkConfig(KEY, S=6, rho=0.25, gate="top2_gap").with_gate(Gate("top2_gap", 0.125, rho=0.25))
    regime = Regime.from_config(config, test="exact")
    doc = regime_document(KEY, regime, _Vocab())
    assert doc["tau"] == 0.125 and (doc["gate"], doc["rho"]) == ("top2_gap", 0.25)
    assert Regime.from_document(json.loads(json.dumps(doc))).config(KEY) == config
    assert Regime.from_config(ChainMarkConfig(KEY, rho=1.0)).tau is None  # tau = -inf: every position, exactly
    with pytest.raises(RegimeError, match='"tau" is the threshold of a gate'):
        Regime(tau=0.5, rho=0.5)
    with pytest.raises(RegimeError, match='"rho" must be 1'):
        Regime(gate="all", rho=0.5)
    with pytest.raises(RegimeError, match='"tau" must be a finite number'):
        Regime(tau=float("inf"), rho=0.5, gate="high_entropy")


def test_a_regime_without_a_threshold_publishes_z_alpha():
    doc = regime_document(KEY, Regime(S=5, alpha=0.01))
    assert doc["threshold"] == doc["z_alpha"] == z_alpha(0.01)
    assert list(doc) == ["format", "scheme", "S", "topology", "k", "p0", "alpha", "z_alpha", "threshold",
                         "distinct_pairs", "tokenizer", "key_fingerprint", "guarantee", "tokenizer_fingerprint",
                         "vocab_size", "text_preparation", "digest"]  # without a tokenizer object, the named (here: embedded) one is loaded
    # the document says what its test's alpha promises, and a reader cannot make it promise more
    exact_promise = regime_document(KEY, Regime(S=5, alpha=0.01, test="exact"), _Vocab())["guarantee"]
    assert "normal approximation" in doc["guarantee"] and doc["guarantee"] != exact_promise
    inflated = {**doc, "guarantee": exact_promise}
    inflated["digest"] = _regime_digest(inflated)
    assert any('"guarantee"' in p for p in published_regime_problems(inflated))
    assert "over a uniformly random key" in exact_promise and "key audit" in exact_promise
    assert Regime(alpha=0.01).operating_threshold == z_alpha(0.01)
    with pytest.raises(RegimeError, match='"key_fingerprint" is null'):  # not a regime anyone can publish
        Regime(alpha=0.01).to_document()
    assert Regime.from_document(doc).to_document() == doc


def test_older_and_sparser_documents_still_read():
    """Fields a document leaves out, or sets to null, take the defaults (the text preparation: none, as such a
    document was audited before the field existed); derived ones are recomputed."""
    regime = Regime.from_document({"format": _REGIME_FORMAT, "S": 4, "threshold": None, "tokenizer": None})
    assert regime == Regime(S=4, text_preparation=AS_GIVEN)  # written before the field: texts as given
    assert (regime.topology, regime.alpha, regime.threshold, regime.n_min, regime.topo.k) == \
           ("clockwork", 0.01, None, None, 1)
    assert regime.topo.p0 == 0.25 and regime.operating_threshold == z_alpha(0.01)


def test_the_test_has_one_spelling_and_distinct_pairs_is_derived_from_it():
    """``test`` chooses the test; ``distinct_pairs`` is read-only, and in a document it is derived like k and p0."""
    with pytest.raises(TypeError, match="distinct_pairs"):
        Regime(distinct_pairs=True)
    with pytest.raises(TypeError, match="distinct_pairs"):
        Regime().replace(distinct_pairs=True)
    assert Regime(test="distinct").distinct_pairs and not Regime().distinct_pairs
    assert not Regime(test="exact").distinct_pairs and not Regime(test="z").distinct_pairs
    for test in ("z", "distinct", "exact"):
        doc = regime_document(KEY, Regime(S=5, alpha=0.01, test=test), _Vocab())
        assert doc["distinct_pairs"] is (test == "distinct") and doc["test"] == test
        assert Regime.from_document(doc).effective_test == test
        flipped = {**doc, "distinct_pairs": test != "distinct"}
        flipped["digest"] = _regime_digest(flipped)  # even a recomputed digest cannot make the two disagree
        with pytest.raises(RegimeError, match='"distinct_pairs" follows from "test"'):
            Regime.from_document(flipped)
        assert any('"distinct_pairs" follows from "test"' in p for p in published_regime_problems(flipped))


def test_an_older_document_that_says_only_distinct_pairs_means_the_distinct_test():
    """Documents written before ``test`` existed say ``"distinct_pairs": true`` and name no test: still the distinct
    test, checked against the distinct test's guarantee, and re-scored the same."""
    z_doc = regime_document(KEY, Regime(S=5, alpha=0.01), _Vocab())
    assert "test" not in z_doc and z_doc["distinct_pairs"] is False
    old = {key: value for key, value in z_doc.items() if key != "digest"}
    old.update(distinct_pairs=True, guarantee=regime_document(KEY, Regime(S=5, alpha=0.01, test="distinct"),
                                                              _Vocab())["guarantee"])
    old["digest"] = _regime_digest(old)
    assert published_regime_problems(old) == []
    regime = Regime.from_document(old)
    assert regime.test == "distinct" and regime.effective_test == "distinct" and regime.distinct_pairs
    assert Regime.resolve(old).effective_test == "distinct"
    assert Regime.resolve(old, test="z").effective_test == "z"  # a test named on top replaces the document's
    assert Regime.from_document(z_doc).test is None  # a document naming no test (and no distinct pairs): the z-test


def test_bad_documents_are_refused_by_name():
    good = regime_document(KEY, Regime(S=5, alpha=0.01))
    with pytest.raises(RegimeError, match='"k" is 2, but the clockwork topology has k = 1'):
        Regime.from_document({**good, "k": 2})
    with pytest.raises(RegimeError, match=r'"threshold" must be a finite number or null.*"distinct_pairs"'):
        Regime.from_document({**good, "threshold": float("nan"), "distinct_pairs": 1})
    with pytest.raises(RegimeError, match="unknown field"):
        Regime.from_document({**good, "thresold": 3.0})
    with pytest.raises(RegimeError, match=_REGIME_FORMAT):
        Regime.from_document({"S": 5})
    assert issubclass(RegimeError, ValueError)


def test_a_regime_checks_its_settings():
    for kwargs, word in [({"S": 1}, '"S"'), ({"topology": "spiral"}, '"topology"'), ({"alpha": 1.0}, '"alpha"'),
                         ({"threshold": float("inf")}, '"threshold"'), ({"test": "distinct_pairs"}, '"test"'),
                         ({"n_min": -1}, '"n_min"'), ({"gate": "x"}, '"gate"'), ({"rho": 2.0}, '"rho"')]:
        with pytest.raises(RegimeError, match=word):
            Regime(**kwargs)
    with pytest.raises(ValueError, match="soft_cycle needs S >= 3"):  # S and the topology do not fit
        Regime(S=2, topology="soft_cycle").topo
    with pytest.raises(RegimeError, match="n_min"):  # an audit's floor of 0 or 1 is not a publishable n_min
        Regime(n_min=1).to_document()
    with pytest.raises(dataclasses.FrozenInstanceError):
        Regime().S = 7


# ---------------------------------------------------------------- the decision


def test_without_a_threshold_a_regime_flags_when_p_is_below_alpha():
    regime = Regime(alpha=0.01)
    assert not regime.decide(_verdict(z=9.0, p=0.01))  # p = alpha: not flagged
    assert regime.decide(_verdict(z=0.0, p=float(np.nextafter(0.01, 0.0))))
    assert regime.label(_verdict(p=0.001)) == "WATERMARKED" and regime.label(_verdict(p=0.5)) == "not detected"


def test_with_a_threshold_a_regime_flags_when_z_exceeds_it():
    regime = Regime(alpha=0.01, threshold=2.5)
    assert not regime.decide(_verdict(z=2.5, p=0.0))  # z = threshold: not flagged, whatever p says
    assert regime.decide(_verdict(z=float(np.nextafter(2.5, 3.0)), p=0.9))


def test_a_text_below_the_length_floor_is_not_judged():
    regime = Regime(threshold=1.0, n_min=50)
    assert regime.decide(_verdict(z=5.0, n_tokens=50)) and not regime.too_short(_verdict(n_tokens=50))
    short = _verdict(z=5.0, n_tokens=49)
    assert regime.too_short(short) and not regime.decide(short) and regime.label(short) == "too short"
    nothing = _verdict(z=5.0, p=0.0, n_tokens=1, n_scored=0)  # no transition: never judged, even with no floor
    assert Regime().label(nothing) == "too short" and not Regime().decide(nothing)


def test_the_regime_and_the_detector_agree_where_no_threshold_is_set():
    rng = np.random.default_rng(0)
    regime = Regime(S=3, alpha=0.2)
    for ids in rng.integers(0, 1000, (30, 25)):
        res = detect(ids, regime.config(KEY), alpha=regime.alpha, test=regime.effective_test)
        assert regime.decide(res) == res.is_watermarked


# ---------------------------------------------------------------- an audit's settings


def test_explicit_options_win_over_the_document_and_the_document_over_the_defaults():
    doc = regime_document(KEY, Regime(S=3, topology="soft_cycle", alpha=0.05, threshold=1.8, n_min=40,
                                      tokenizer="org/tok", tokenizer_revision="abc", test="distinct"), _Vocab())
    assert Regime.resolve() == Regime()
    assert Regime.resolve(None, S=7, threshold=None) == Regime(S=7)
    from_doc = Regime.resolve(doc)
    assert (from_doc.S, from_doc.topology, from_doc.threshold, from_doc.n_min) == (3, "soft_cycle", 1.8, 40)
    assert Regime.resolve(doc, n_min=0, S=4).n_min == 0 and Regime.resolve(doc, S=4).S == 4
    # another alpha drops the threshold published for the document's alpha; the same alpha keeps it
    assert Regime.resolve(doc, alpha=0.01).threshold is None
    assert Regime.resolve(doc, alpha=0.05).threshold == 1.8
    assert Regime.resolve(doc, alpha=0.01, threshold=2.0).threshold == 2.0
    # another tokenizer named without a revision does not inherit the document's revision
    assert Regime.resolve(doc, tokenizer="other/tok").tokenizer_revision is None
    assert Regime.resolve(doc, tokenizer="other/tok", tokenizer_revision="def").tokenizer_revision == "def"
    with pytest.raises(TypeError, match="unknown regime option"):
        Regime.resolve(doc, min_tokens=3)


def test_a_regime_checks_the_key_and_the_tokenizer():
    regime = Regime.from_document(regime_document(KEY, Regime(S=5, alpha=0.01), _Vocab()))
    regime.check_key(KEY)
    regime.check_tokenizer(_Vocab())
    with pytest.raises(RegimeError, match="does not match the regime's"):
        regime.check_key(b"another key entirely")

    class Other(_Vocab):
        def get_vocab(self):
            return {"a": 1, "b": 0, "c": 2}

    with pytest.raises(RegimeError, match="tokenizer mismatch"):
        regime.check_tokenizer(Other())
    Regime().check_key(b"any key")  # a regime that names no fingerprint accepts any key and tokenizer
    Regime().check_tokenizer(Other())


def test_named_topologies_and_the_reference_resolve_through_one_function():
    from cmlab.harness.reference.protocol import topology_for

    for name, k in TOPOLOGY_K.items():
        assert resolve_topology(name, 7) == cycle_topology(7, k) == topology_for(7, k)
        assert resolve_topology(name, 7).name == name == cycle_topology(7, k).name
        assert Regime(S=7, topology=name).topo.k == k == resolve_topology(name, 7).k
    assert cycle_topology(7, 3) == Topology.from_offsets(7, (1, 2, 3)) == topology_for(7, 3)


# ---------------------------------------------------------------- a published regime cannot flip a verdict


def _published(**kw):
    return regime_document(KEY, Regime(S=5, alpha=0.01, **kw), _Vocab())


def test_a_published_regime_refuses_every_silent_edit():
    from chainmark.auditor.regime import published_regime_problems, _regime_digest

    doc = _published()
    assert published_regime_problems(doc) == [] and doc["digest"] == _regime_digest(doc)

    def problems_after(**edits):
        bad = {**doc, **edits}
        return " ".join(published_regime_problems(bad))

    assert "lies below z_alpha" in problems_after(threshold=-10)
    assert '"digest" does not match' in problems_after(threshold=3.0)  # a valid value, but not what was signed
    assert '"key_fingerprint" is null' in problems_after(key_fingerprint=None)
    assert '"tokenizer_fingerprint" is missing' in " ".join(
        published_regime_problems({k: v for k, v in doc.items() if k != "tokenizer_fingerprint"}))
    assert '"p0" is 0.5' in problems_after(p0=0.5)
    assert '"z_alpha" is 1.0' in problems_after(z_alpha=1.0)
    assert "missing" in " ".join(published_regime_problems({"format": _REGIME_FORMAT}))
    # a lower threshold is published only when the regime says so, and then it is signed like the rest
    traded = _published(threshold=1.5, trades_fpr_for_power=True)
    assert traded["trades_fpr_for_power"] is True and published_regime_problems(traded) == []
    with pytest.raises(RegimeError, match="trades_fpr_for_power"):
        _published(threshold=1.5)
    # a threshold fitted on a null corpus may lie below z_alpha (a narrow null): it is published with its record
    fitted = _published(threshold=2.1, recalibration={"method": "quantile", "n_null": 400})
    assert published_regime_problems(fitted) == [] and fitted["recalibration"]["n_null"] == 400
    exact = _published(test="exact")
    assert exact["threshold"] is None and published_regime_problems(exact) == []
    assert "must be null for the exact test" in " ".join(
        published_regime_problems({**exact, "threshold": 3.0, "digest": _regime_digest({**exact, "threshold": 3.0})}))


def test_a_regime_file_with_a_field_twice_or_nested_deep_is_refused():
    from chainmark.auditor.regime import parse_regime_text

    text = json.dumps(_published())
    with pytest.raises(ValueError, match='"threshold" appears twice'):
        parse_regime_text(text[:-1] + ', "threshold": -10}')
    with pytest.raises(ValueError, match="nested more than 32 levels"):
        parse_regime_text("[" * 10_000 + "]" * 10_000)
    with pytest.raises(ValueError, match="not JSON"):
        parse_regime_text("{not json")


def _certificate(**changes):
    """A key-audit certificate for KEY, _Vocab, S = 5, clockwork, the exact test at alpha = 1%, re-sealed after
    ``changes``."""
    from chainmark.auditor.keyaudit import CertificationTarget, audit_key, seal
    from chainmark.config import ChainMarkConfig

    texts = [np.random.default_rng(i).integers(0, 3, 60) for i in range(30)]
    cert = audit_key(ChainMarkConfig(KEY, S=5), texts, CertificationTarget(alpha=0.01), vocab_size=3)
    return seal({**cert, "tokenizer": None, "tokenizer_fingerprint": tokenizer_fingerprint(_Vocab()),
                 "package_version": "0", **changes})


def test_a_regime_refuses_a_certificate_below_95_percent_or_of_an_older_format():
    good = _certificate()
    doc = _published(test="exact", key_audit=good)
    assert doc["key_audit"] == good and Regime.from_document(doc).check_certificate(KEY, _Vocab()) == []
    low = _certificate(level=0.5)
    old = _certificate(format="chainmark-key-audit/2")
    for bad, says in ((low, "the certificate's level is 0.5, but a certificate states its bound at a confidence "
                            "of at least 0.95"),
                      (old, "a chainmark-key-audit/2 certificate, an older format than chainmark-key-audit/5")):
        with pytest.raises(RegimeError, match=re.escape("certificate does not fit this audit: " + says)):
            _published(test="exact", key_audit=bad)  # publishing it
        regime = Regime.from_document(doc).replace(key_audit=bad)
        for strict in (True, False):  # applying it, whatever test the auditor chose
            with pytest.raises(RegimeError, match=re.escape(says)):
                regime.check_certificate(KEY, _Vocab(), strict_test=strict)


# ---------------------------------------------------------------- k successors among S states: k < S


def test_k_not_below_S_is_refused_in_plain_words(tmp_path, capsys):
    """k = S (or more) would make every transition legal (p0 = 1): the document check says k must be below S,
    not a later "p0 must lie in (0, 1)" from deep inside."""
    from chainmark import cli
    from chainmark.cli.common import EXIT_USAGE
    from chainmark.auditor.keyfiles import write_key_file
    from chainmark.auditor.regime import published_regime_problems, _regime_digest

    base = {"format": _REGIME_FORMAT, "scheme": "chainmark"}
    for doc, says in [({**base, "S": 3, "k": 3}, '"k" is 3, but k must be below S = 3'),
                      ({**base, "S": 5, "k": 9}, '"k" is 9, but k must be below S = 5'),
                      ({**base, "S": 2, "topology": "soft_cycle"}, "soft_cycle topology has k = 2, which must be "
                                                                  "below S = 2"),
                      ({**base, "S": 2, "topology": "soft_cycle", "k": 2}, '"k" is 2, but k must be below S = 2')]:
        problems = _regime_problems(doc)
        assert len(problems) == 1 and says in problems[0] and "1 <= k <= S - 1" in problems[0], problems
        assert "p0 must lie" not in problems[0]
        with pytest.raises(RegimeError, match="must be below S"):
            Regime.from_document(doc)
    assert _regime_problems({**base, "S": 4, "k": 3}) == []
    assert _regime_problems({**base, "S": 3, "topology": "soft_cycle"}) == []
    # a published document edited to k = S (digest recomputed) names the rule too
    doc = regime_document(KEY, Regime(S=3, alpha=0.01, topology="soft_cycle"), _Vocab())
    edited = {**doc, "S": 2, "p0": 0.5}
    edited["digest"] = _regime_digest(edited)
    assert "k must be below S = 2" in " ".join(published_regime_problems(edited))
    # and the command line refuses such a regime file with exit 2, saying so
    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    (tmp_path / "r.json").write_text(json.dumps(edited), "utf-8")
    (tmp_path / "t.txt").write_text("hello there", "utf-8")
    code = cli.main(["detect", "--key-file", str(key), "--regime", str(tmp_path / "r.json"), str(tmp_path / "t.txt")])
    assert code == EXIT_USAGE and "k must be below S = 2" in capsys.readouterr().err


def test_every_entry_point_taking_k_and_S_apart_says_k_must_be_below_S():
    from chainmark.calibrate import _null_p0, predicted_z
    from cmlab.comparison.quality import kl_bound
    from cmlab.harness.reference.protocol import topology_for

    for call in (lambda: cycle_topology(3, 3), lambda: cycle_topology(4, 7), lambda: topology_for(5, 5),
                 lambda: cycle_topology(5, 0)):
        with pytest.raises(ValueError, match=r"k \(successors per state\) must lie in \[1, S - 1\]"):
            call()
    with pytest.raises(TypeError, match="k"):
        cycle_topology(5, 1.0)
    for call in (lambda: _null_p0(4, 4), lambda: predicted_z(100, 0.5, 3, k=3)):
        with pytest.raises(ValueError, match=r"k \(successors per state\) must lie in \[1, S - 1\]"):
            call()
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, S-1\]"):
        kl_bound(0.5, 3, 3)
    with pytest.raises(ValueError, match="soft_cycle needs S >= 3"):  # k = 2 = S: the named topology's message
        cycle_topology(2, 2)
    assert cycle_topology(4, 3) == Topology.from_offsets(4, (1, 2, 3))
