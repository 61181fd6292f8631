"""Every chapter runs to its end on a model that is not the embedded one (DESIGN.md: any causal LM).

The model is built here (tests/foreign_model.py): a random-weight two-layer
Llama with its own byte-level BPE tokenizer of about 2,200 ids, no chat
template, another end-of-text token. Each chapter executes against it in soft
claim mode at the smoke scale: no cell may raise, the claims that differ are
listed (the output of the test), and the reference sections still show the
embedded model's committed reference run, so every reference claim holds.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))

import claims_robustness  # noqa: E402
import foreign_model  # noqa: E402

CHAPTERS = claims_robustness.toc_chapters()


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    folder = foreign_model.build(tmp_path_factory.mktemp("foreign-model"))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    assert len(tok) != 49_152 and not tok.chat_template
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_chapter_runs_to_its_end_on_another_model(chapter, foreign, tmp_path, monkeypatch):
    from chainmark.keys import write_key_file

    monkeypatch.setenv("CHAINMARK_MODEL", str(foreign))
    monkeypatch.setenv("CHAINMARK_SCALE", "smoke")
    key_file = tmp_path / "teaching-or-not.key"
    write_key_file(key_file)
    result = claims_robustness.execute(chapter, key_file, tmp_path / "claims.jsonl", tmp_path / "runs", timeout=900)
    for f in result["failed"]:
        print(f"differs on the foreign model ({f['tier']}): {f['says']} -- {f['shows']}")
    assert result["completed"], f"{chapter} stopped on another model: {result['error']}"
    reference_failed = [f for f in result["failed"] if f["tier"] == "reference"]
    assert not reference_failed, f"{chapter}: a reference section did not read the embedded model's run: {reference_failed}"
