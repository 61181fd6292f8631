"""Text in transit: the regime's text preparation, what the command line does with it, and the measured table.

The preparation must equal itself whether a text arrives whole or in pieces, undo exactly what it claims to undo
(CRLF line endings, NFD, HTML entities) and nothing it cannot (NFKC, collapsed whitespace); the published regime
must carry it and an older document must mean "as given"; ``chainmark detect`` and ``chainmark audit`` must apply
it. The real embedded tokenizer and the reference run's own replies are used throughout (no model).
"""
from __future__ import annotations

import json
import random
import unicodedata

import pytest

from chainmark import ChainMarkConfig, cli, detect
from chainmark.auditor import AS_GIVEN, TextPreparation, load_tokenizer
from chainmark.auditor.corpus import read_audit, run_audit
from chainmark.auditor.corpus_input import CorpusReading
from chainmark.auditor.keyfiles import write_key_file
from chainmark.auditor.regime import Regime, RegimeError, _regime_digest, published_regime_problems, regime_document
from cmlab.comparison.transit import _TRANSIT as TRANSIT, transit_table
from cmlab.harness import reference

#: Characters that meet at piece boundaries in the hard ways: CR before LF, combining marks after their base,
#: Hangul jamo that compose, entities, compatibility characters, spaces and tabs.
_PIECES = ["a", "e", "\u0301", "\u0327", " ", "\n", "\r", "\r\n", "&amp;", "&#8217;", "&lt", "é", "ﬁ", "①", "가",
           "\u1100", "\u1161", "\u11a8", "x", "  ", "\t", "…"]
_PREPARATIONS = [TextPreparation(), TextPreparation("NFKC", "lf", True), TextPreparation("NFD", "keep", True),
                 TextPreparation(None, "lf", False), AS_GIVEN]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


@pytest.fixture(scope="module")
def replies():
    """A few of the reference run's ChainMark replies (with line breaks), and the key they were written with."""
    texts = [r["output"] for r in reference.load_texts("head_to_head") if r["method"] == "chainmark"]
    chosen = [t for t in texts if "\n" in t][:12]
    assert len(chosen) == 12
    return chosen


@pytest.fixture(scope="module")
def config():
    return ChainMarkConfig(reference.reference_key(), S=reference.PROTOCOL.S)


@pytest.mark.parametrize("prep", _PREPARATIONS, ids=str)
def test_a_text_prepared_in_pieces_equals_the_text_prepared_whole(prep):
    rng = random.Random(f"pieces/{prep}")
    for _ in range(1500):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 40)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 6))))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        assert "".join(prep.apply_chunks(pieces)) == prep.apply(text), (prep, text, pieces)


def test_a_stream_without_line_breaks_or_spaces_is_refused_not_held_whole():
    with pytest.raises(ValueError, match="no line break or space"):
        list(TextPreparation().apply_chunks(iter(["x" * (1 << 19)] * 3)))
    assert list(AS_GIVEN.apply_chunks(["x" * 10, "y"])) == ["x" * 10, "y"]  # as given: passed through untouched


def test_the_default_undoes_crlf_and_nfd_and_the_html_step_undoes_entities(replies):
    prep, with_html = TextPreparation(), TextPreparation(html_entities=True)
    for text in replies:
        assert prep.apply(TRANSIT["CRLF line endings (saved on Windows)"](text)) == text
        assert prep.apply(TRANSIT["NFD (macOS file names, some editors)"](text)) == text
        assert with_html.apply(TRANSIT["HTML source (entities)"](text)) == text
    assert prep.apply("a\rb\r\nc") == "a\nb\nc"  # a lone CR too


def test_what_discards_information_is_not_undone():
    text = "Wait\u2026  the \ufb01le\n\n    indented"
    prep = TextPreparation(html_entities=True)
    assert prep.apply(TRANSIT["NFKC (compatibility folding)"](text)) != text
    assert prep.apply(TRANSIT["all whitespace collapsed"](text)) == "Wait\u2026 the \ufb01le indented"
    assert prep.apply(TRANSIT["copied from a web page"](text)) == "Wait\u2026 the \ufb01le\n\nindented"
    assert unicodedata.is_normalized("NFC", prep.apply("e\u0301"))


@pytest.mark.parametrize("spec, expected", [("nfc,lf", TextPreparation()), ("none", AS_GIVEN),
                                             (" LF , html ", TextPreparation(None, "lf", True)),
                                             ("nfkd", TextPreparation("NFKD", "keep", False))])
def test_the_command_line_spelling_round_trips(spec, expected):
    assert TextPreparation.parse(spec) == expected
    assert TextPreparation.parse(str(expected)) == expected


@pytest.mark.parametrize("spec, words", [("", "use 'none'"), ("nfc,crlf", "not understood: crlf"),
                                          ("nfc,nfkc", "names 2 normal forms")])
def test_a_bad_spelling_says_what_is_allowed(spec, words):
    with pytest.raises(ValueError, match=words):
        TextPreparation.parse(spec)


def test_bad_fields_are_refused_by_name():
    with pytest.raises(ValueError, match="unicode must be one of"):
        TextPreparation(unicode="nfc")
    with pytest.raises(ValueError, match="newlines must be"):
        TextPreparation(newlines="crlf")
    with pytest.raises(TypeError, match="text must be a str"):
        TextPreparation().apply(b"bytes")


def test_the_published_regime_carries_the_preparation_and_an_older_one_means_as_given():
    key = b"k" * 32
    doc = regime_document(key, Regime(S=5, test="exact", text_preparation=TextPreparation(html_entities=True)),
                          tokenizer=load_tokenizer())
    assert doc["text_preparation"] == {"unicode": "NFC", "newlines": "lf", "html_entities": True}
    assert published_regime_problems(doc) == []
    assert Regime.from_document(doc).text_preparation == TextPreparation(html_entities=True)
    older = {k: v for k, v in doc.items() if k != "text_preparation"}
    assert Regime.from_document(older).text_preparation == AS_GIVEN
    assert Regime().text_preparation == TextPreparation()  # no document: the default
    for broken, words in (({"unicode": "NFC", "newlines": "lf"}, 'exactly "unicode", "newlines" and "html_entities"'),
                          ({"unicode": "NFC", "newlines": "crlf", "html_entities": False}, "newlines must be 'lf'")):
        with pytest.raises(RegimeError, match=f'"text_preparation" must be a JSON object.*{words}'):
            Regime.from_document({**doc, "text_preparation": broken})
    assert Regime.resolve(doc, text_preparation=AS_GIVEN).text_preparation == AS_GIVEN  # the option wins
    with pytest.raises(RegimeError, match="must be a TextPreparation"):
        Regime(text_preparation="nfc,lf")


def _detect(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.strip()], err


def test_detect_applies_the_preparation_and_reports_it(capsys, tmp_path, replies, config, tokenizer):
    key_file = tmp_path / "reference.key"
    write_key_file(key_file, reference.reference_key())
    text = replies[0]
    lf, crlf = tmp_path / "lf.txt", tmp_path / "crlf.txt"
    lf.write_text(text, encoding="utf-8", newline="")
    crlf.write_bytes(text.replace("\n", "\r\n").encode("utf-8"))
    common = ["detect", "--json", "--key-file", key_file, "--S", config.S]
    code, rows, _ = _detect(capsys, *common, lf, crlf)
    assert code == 0 and rows[0]["text_preparation"] == "nfc,lf"
    assert {k: v for k, v in rows[0].items() if k != "file"} == {k: v for k, v in rows[1].items() if k != "file"}
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert rows[0]["p_value"] == detect(ids, config, test="exact").p_value  # the text as generated
    code, raw, _ = _detect(capsys, *common, "--text-preparation", "none", crlf)
    assert raw[0]["text_preparation"] == "none" and raw[0]["n_tokens"] != rows[1]["n_tokens"]
    code, seg, _ = _detect(capsys, *common, "--segments", "--draws", 99, crlf)
    assert code == 0 and seg[0]["n_tokens"] == rows[0]["n_tokens"]  # the whole-text path prepares too
    code, _, err = _detect(capsys, *common, "--text-preparation", "nfc,utf8", lf)
    assert code == 2 and "not understood: utf8" in err


def test_a_regime_without_a_preparation_tokenizes_as_given(capsys, tmp_path, replies, config):
    key_file = tmp_path / "reference.key"
    write_key_file(key_file, reference.reference_key())
    doc = regime_document(reference.reference_key(), Regime.from_config(config, test="exact"),
                          tokenizer=load_tokenizer())
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(replies[0].replace("\n", "\r\n").encode("utf-8"))
    regime_file = tmp_path / "regime.json"
    regime_file.write_text(json.dumps(doc), encoding="utf-8")
    _, prepared, _ = _detect(capsys, "detect", "--json", "--key-file", key_file, "--regime", regime_file, crlf)
    older = {k: v for k, v in doc.items() if k != "text_preparation"}
    older["digest"] = _regime_digest(older)
    regime_file.write_text(json.dumps(older), encoding="utf-8")
    _, given, _ = _detect(capsys, "detect", "--json", "--key-file", key_file, "--regime", regime_file, crlf)
    assert prepared[0]["text_preparation"] == "nfc,lf" and given[0]["text_preparation"] == "none"
    assert given[0]["n_tokens"] > prepared[0]["n_tokens"]


def test_the_corpus_audit_prepares_every_document(tmp_path, replies, config):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"{n}/{form}", "text": t.replace("\n", "\r\n") if form else t}) + "\n"
                              for n, t in enumerate(replies[:4]) for form in (0, 1)), encoding="utf-8")
    reading = CorpusReading(id_field="id", batch_docs=3)
    for prep, same in ((TextPreparation(), True), (AS_GIVEN, False)):
        out = tmp_path / f"audit-{prep}.jsonl"
        run_audit(corpus, out, reference.reference_key(), Regime.from_config(config, test="exact",
                                                                           text_preparation=prep), reading)
        rows = {r["doc_id"]: r for r in read_audit(out)}
        assert all((rows[f"{n}/0"]["p_value"] == rows[f"{n}/1"]["p_value"]) == same
                   or (not same and rows[f"{n}/0"]["n_tokens"] != rows[f"{n}/1"]["n_tokens"]) for n in range(4))
        assert all((rows[f"{n}/0"]["n_tokens"] == rows[f"{n}/1"]["n_tokens"]) == same for n in range(4))


def test_the_transit_table_measures_each_change_under_each_preparation(replies, config, tokenizer):
    table = transit_table(replies, tokenizer, config, {"none": AS_GIVEN, "nfc,lf": TextPreparation()}).set_index(
        ["transit", "preparation"])
    assert len(table) == 2 * len(TRANSIT)
    crlf = "CRLF line endings (saved on Windows)"
    assert table.loc[(crlf, "none"), "ids_kept"].hits == 0  # every chosen reply has a line break
    assert table.loc[(crlf, "nfc,lf"), "ids_kept"].hits == len(replies)
    assert table.loc[("as generated", "none"), "lost_rate"].hits == 0
    assert table.loc[("all whitespace collapsed", "nfc,lf"), "ids_kept"].hits < len(replies)
    with pytest.raises(ValueError, match="texts is empty"):
        transit_table([], tokenizer, config, {"none": AS_GIVEN})


def test_chainmark_regime_publishes_the_preparation_it_is_given(capsys, tmp_path):
    key_file = tmp_path / "deploy.key"
    write_key_file(key_file, bytes(range(32)))
    docs = {}
    for steps in (None, "nfc,lf,html"):
        code = cli.main(["regime", "--key-file", str(key_file), "--S", "5", "--alpha", "0.01"]
                        + (["--text-preparation", steps] if steps else []))
        assert code == 0
        docs[steps] = json.loads(capsys.readouterr().out)
    assert docs[None]["text_preparation"] == TextPreparation().to_document()
    assert docs["nfc,lf,html"]["text_preparation"] == TextPreparation(html_entities=True).to_document()
    assert Regime.from_document(docs["nfc,lf,html"]).text_preparation == TextPreparation(html_entities=True)
