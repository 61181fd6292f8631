"""Every chapter runs to its end on a model that is not the embedded one (the README's "The same book on every machine": any causal LM).

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
sys.path.insert(0, str(ROOT / "tests"))

import claims_robustness  # noqa: E402
import foreign_model  # noqa: E402

CHAPTERS = claims_robustness.toc_notebooks()


#: Calls that start a chapter's long steps: a forecast must be printed before the first of them.
LONG_STEPS = ("generate(", "generate_once(", "generate_resumable(", "run_grid(", "embedding_grid(")
#: Chapters whose long steps get a forecast (the others generate a reply or two at most).
FORECAST_CHAPTERS = {"book/03_gates.ipynb", "book/04_embedding.ipynb", "book/04b_cost.ipynb",
                     "book/05_detection.ipynb", "book/05a_false_positives.ipynb", "book/05b_lr_detector.ipynb",
                     "book/06b_real_text.ipynb", "book/07_robustness.ipynb",
                     "book/07b_attacks.ipynb", "book/08_head_to_head.ipynb", "book/08b_kregular.ipynb",
                     "book/09_audit.ipynb", "book/09a_recalibration.ipynb", "book/10_explorers.ipynb",
                     "book/00_first_run.ipynb"}


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        for kind in ("text/plain", "text/html"):
            parts.append("".join(out.get("data", {}).get(kind, "")))
    return "\n".join(parts)


def check_settings_and_forecast(nb, folder: Path, chapter: str) -> None:
    """The settings cell shows the model in use; a forecast of time and memory comes before the long steps."""
    cells = nb.cells
    assert cells[2].source.startswith("# Settings: the same cell in every chapter.")
    assert str(folder) in _text(cells[2]), "the settings cell does not show the model this run uses"
    if chapter not in FORECAST_CHAPTERS:
        return
    forecasts = [i for i, c in enumerate(cells) if c.cell_type == "code" and "expected on this machine" in _text(c)]
    assert forecasts, f"{chapter}: no forecast of time and memory was printed"
    assert str(folder) in _text(cells[forecasts[0]]) and "peak memory" in _text(cells[forecasts[0]])
    long_steps = [i for i, c in enumerate(cells) if c.cell_type == "code" and i > 2
                  and any(call in c.source for call in LONG_STEPS) and "expect_generation" not in c.source]
    assert not long_steps or forecasts[0] < long_steps[0], (chapter, forecasts, long_steps)


# the fixtures `foreign` (the model's folder) and `foreign_runs` (every chapter executed on it) live in
# conftest.py: the participant edition's tests reuse both


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_chapter_runs_to_its_end_on_another_model(chapter, foreign, foreign_runs):
    result = foreign_runs[chapter]
    check_settings_and_forecast(result["notebook"], foreign, chapter)
    for f in result["failed"]:
        print(f"differs on the foreign model ({f['tier']}): {f['says']} -- {f['shows']}")
    assert result["completed"], f"{chapter} stopped on another model: {result['error']}"
    reference_failed = [f for f in result["failed"] if f["tier"] == "reference"]
    assert not reference_failed, f"{chapter}: a reference section did not read the embedded model's run: {reference_failed}"


@pytest.mark.slow
def test_a_model_too_large_for_the_device_is_refused_before_loading_in_a_chapter(foreign, tmp_path, monkeypatch):
    """Chapter 0 on the small foreign model, with the device's free memory simulated below what it needs: the
    chapter stops at load_model with the refusal and its advice, before any weight is read."""
    from chainmark.auditor.keyfiles import write_key_file

    monkeypatch.setenv("CHAINMARK_MODEL", str(foreign))
    monkeypatch.setenv("CHAINMARK_DEVICE_MEMORY_GB", "0.3")
    key_file = tmp_path / "k.key"
    write_key_file(key_file)
    result = claims_robustness.execute("book/00_first_run.ipynb", key_file, tmp_path / "claims.jsonl",
                                       tmp_path / "runs", timeout=300, keep_notebook=True)
    assert not result["completed"]
    assert "ModelTooLargeError" in result["error"] and "does not fit, so it was not loaded" in result["error"]
    assert "free memory first" in result["error"], result["error"]
    cells = result["notebook"].cells
    assert str(foreign) in _text(cells[2])  # the settings cell ran and showed the model
