"""The auditor's tokenizer (chainmark.auditor.tokenizer): the tokenizers library alone, same ids as transformers."""
from __future__ import annotations

import json

import pytest

from chainmark.auditor.tokenizer import DEFAULT_MODEL, EMBEDDED_TOKENIZER, AuditTokenizer, TokenizerLoadError, load_tokenizer

ODD_TEXTS = ["", " ", "\x00\x01 control", "🙂" * 40, "naïve café\u2028next", "<|im_start|>user\nhi<|im_end|>",
             "\t\n  spaced  \r\n", "def f(x):\n    return x ** 2\n", "Zürich, 東京, القاهرة"]


def transformers_tokenizer():
    """The embedded tokenizer as transformers loads it for generation (what load_model hands the chapters)."""
    from transformers import AutoTokenizer

    from chainmark.auditor.tokenizer import EMBEDDED_TOKENIZER

    return AutoTokenizer.from_pretrained(str(EMBEDDED_TOKENIZER), local_files_only=True)


def test_the_embedded_tokenizer_agrees_with_transformers_on_every_reference_text():
    from cmlab.harness.reference.read import load_texts

    core, full = load_tokenizer(), transformers_tokenizer()
    assert isinstance(core, AuditTokenizer)
    assert len(core) == len(full) == 49152
    assert core.get_vocab() == full.get_vocab()
    texts = [r["output"] for name in ("head_to_head", "null") for r in load_texts(name)] + ODD_TEXTS
    assert len(texts) > 2000
    differ = [t for t in texts if core(t, add_special_tokens=False)["input_ids"]
              != full(t, add_special_tokens=False)["input_ids"]]
    assert differ == []


def test_the_regime_fingerprint_is_the_same_under_both_tokenizers():
    from chainmark.auditor.regime import tokenizer_fingerprint

    assert tokenizer_fingerprint(load_tokenizer()) == tokenizer_fingerprint(transformers_tokenizer())


def test_a_local_folder_loads_and_one_without_tokenizer_json_is_refused(tmp_path):
    from chainmark.auditor.tokenizer import EMBEDDED_TOKENIZER

    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text((EMBEDDED_TOKENIZER / "tokenizer.json").read_text("utf-8"))
    tok = load_tokenizer(str(tmp_path / "tok"))
    assert tok("hello world", add_special_tokens=False)["input_ids"] == \
        load_tokenizer()("hello world", add_special_tokens=False)["input_ids"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerLoadError, match="no tokenizer.json"):
        load_tokenizer(str(tmp_path / "empty"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tokenizer.json").write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(TokenizerLoadError, match="Could not load the tokenizer"):
        load_tokenizer(str(tmp_path / "bad"))


def test_a_revision_goes_to_the_hub_and_is_refused_for_local_files(monkeypatch, tmp_path):
    import tokenizers

    seen = {}

    def fake_from_pretrained(name, **kwargs):
        seen.update(name=name, **kwargs)
        return tokenizers.Tokenizer.from_file(str(EMBEDDED_TOKENIZER
                                                  / "tokenizer.json"))

    monkeypatch.setattr(tokenizers.Tokenizer, "from_pretrained", staticmethod(fake_from_pretrained))
    tok = load_tokenizer("org/tok", revision="0123abcd")
    assert seen == {"name": "org/tok", "revision": "0123abcd"} and len(tok) == 49152
    with pytest.raises(TokenizerLoadError, match="embedded model"):
        load_tokenizer(DEFAULT_MODEL, revision="0123abcd")
    with pytest.raises(TokenizerLoadError, match="local folder"):
        load_tokenizer(str(tmp_path), revision="0123abcd")
    with pytest.raises(TokenizerLoadError, match="non-empty string"):
        load_tokenizer("org/tok", revision="  ")


def test_the_default_follows_chainmark_model(monkeypatch, tmp_path):
    monkeypatch.setenv("CHAINMARK_MODEL", str(tmp_path))
    with pytest.raises(TokenizerLoadError, match="no tokenizer.json"):
        load_tokenizer()
    monkeypatch.delenv("CHAINMARK_MODEL")
    assert len(load_tokenizer()) == 49152


def test_text_must_be_a_string():
    with pytest.raises(TypeError, match="text must be a str"):
        load_tokenizer()(b"bytes")
