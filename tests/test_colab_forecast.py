"""The Colab forecast (cmlab.teaching.colab): every chapter has its long steps at both scales, the forecast
follows the chapters' own forecast model, and the table the book prints from it is complete."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cmlab.harness.models import memory_needed
from cmlab.teaching.colab import (CHAPTER_WORK, COLAB_GPUS, FORECAST_MODELS, _READ_BACK, chapter_timings,
                                  chapter_titles, _colab_forecast, colab_forecast_table, gpu_table)
from cmlab.teaching.forecast import Step, step_seconds

ROOT = Path(__file__).resolve().parents[1]


def toc_chapters() -> list[str]:
    """The table of contents' chapters as ``book/NAME`` (the one walk over _toc.yml the tools share)."""
    from book_pipeline import toc_notebooks

    return [nb.removesuffix(".ipynb") for nb in toc_notebooks()]


def test_every_chapter_has_its_long_steps_at_both_scales():
    assert set(CHAPTER_WORK) == set(toc_chapters())
    for chapter, work in CHAPTER_WORK.items():
        assert set(work) == {"smoke", "full"}, chapter
        source = "\n".join("".join(c["source"]) for c in json.loads((ROOT / f"{chapter}.ipynb").read_text())["cells"]
                           if c["cell_type"] == "code")
        forecasts = bool(re.search(r"expect_generation\(model", source))
        # a chapter that prints a forecast line before its long steps has those steps here, and the full
        # scale never does less than the smoke scale
        assert not forecasts or (work["smoke"].steps and work["full"].steps), chapter
        texts = {scale: sum(s.texts * s.new_tokens for s in w.steps) for scale, w in work.items()}
        assert texts["full"] >= texts["smoke"], chapter


def test_the_timings_cover_the_table_of_contents():
    timings = chapter_timings(ROOT)
    assert set(timings) == set(toc_chapters())
    assert chapter_timings(ROOT / "no-such-folder") == {}


def test_step_seconds_is_the_forecast_lines_model():
    # one prompt pass and one step per token for each batch, ten percent on top; a scoring pass costs the
    # prompt's pass per token of prompt and text
    assert step_seconds(Step("g", 10, 100), 4, 0.5, 0.02, 64) == pytest.approx(3 * (0.5 + 2.0) * 1.1)
    assert step_seconds(Step("s", 8, 64, "score"), 8, 0.5, 0.02, 64) == pytest.approx(1.0 * 1.1)
    assert step_seconds(Step("none", 0, 100), 4, 0.5, 0.02) == 0.0


def test_the_forecast_is_complete_and_says_what_does_not_fit():
    timings = chapter_timings(ROOT)
    rows = _colab_forecast(timings)
    assert len(rows) == len(timings) * len(FORECAST_MODELS) * len(COLAB_GPUS) * 2
    fits = {(m.label, g.name): memory_needed(2 * m.params) <= g.memory_gb * 1e9
            for m in FORECAST_MODELS for g in COLAB_GPUS}
    # what the pages say: the 7B model does not fit a T4's 15 GB, and fits an L4 and an A100; the others fit all
    assert [k for k, ok in fits.items() if not ok] == [("Qwen2.5-7B-Instruct", "T4")]
    by = {(r["chapter"], r["model"], r["gpu"], r["scale"]): r["seconds"] for r in rows}
    for (chapter, model, gpu, scale), seconds in by.items():
        assert (seconds is None) == (not fits[(model, gpu)])
        if seconds is not None:
            assert seconds > 0
            assert by[(chapter, model, gpu, "full")] >= by[(chapter, model, gpu, "smoke")]
    embedded = FORECAST_MODELS[0].label
    # a GPU runs the embedded model's smoke scale no slower than the measuring CPU ran it; a chapter that read an
    # earlier chapter's texts back (READ_BACK: 5.1 reads chapter 5's) is compared with the CPU model's time for
    # generating them, as its Colab notebook, starting on its own, does
    cpu = {r["chapter"]: r["cpu_seconds"] for r in rows}
    for chapter, measured in timings.items():
        assert cpu[chapter] == measured if chapter not in _READ_BACK else cpu[chapter] >= measured
        assert by[(chapter, embedded, "T4", "smoke")] <= cpu[chapter] * 1.01, chapter
    read_back = _colab_forecast({"book/05a_false_positives": 1.0})  # one second: its texts were read back
    assert all(r["cpu_seconds"] > 1.0 for r in read_back)

    # a larger model is never forecast faster on the same GPU, and the A100 is never slower than the T4
    for chapter in timings:
        assert by[(chapter, "Qwen2.5-1.5B-Instruct", "T4", "full")] >= by[(chapter, embedded, "T4", "full")]
        assert by[(chapter, embedded, "A100", "full")] <= by[(chapter, embedded, "T4", "full")]
    with pytest.raises(ValueError, match="CHAPTER_WORK"):
        _colab_forecast({"book/99_new_chapter": 10.0})


def test_the_table_has_a_row_per_chapter_and_a_total():
    timings = chapter_timings(ROOT)
    table = colab_forecast_table(timings, titles={"book/00_first_run": "A first run"})
    assert list(table.index) == ["A first run", *[c.removeprefix("book/") for c in list(timings)[1:]], "all chapters"]
    assert table.shape[1] == len(FORECAST_MODELS) * len(COLAB_GPUS)
    cells = table.to_numpy().ravel()
    assert all(c == "does not fit" or re.fullmatch(r"[\d.]+( h)? / [\d.]+( h)?", c) for c in cells), cells
    assert (table[("Qwen2.5-7B-Instruct", "T4")] == "does not fit").all()
    assert list(gpu_table().index) == ["T4", "L4", "A100"]


def test_chapter_titles_are_the_notebooks_first_headings():
    titles = chapter_titles(ROOT)
    assert set(titles) == set(CHAPTER_WORK)
    assert titles["book/05_detection"].startswith("Detection")
    assert chapter_titles(ROOT / "no-such-folder") == {}


#: A forecast line of an executed chapter: "  label: N texts x <= T tokens: time".
_FORECAST_STEP = re.compile(r"^\s+(.+?): (\d+) texts x <= (\d+) tokens:", re.M)


def printed_steps(executed: Path) -> list[tuple[int, int]]:
    """(texts, new tokens) of every step an executed chapter's forecast lines listed, in order."""
    steps = []
    for cell in json.loads(executed.read_text("utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/plain", "") or out.get("text", "")
            text = "".join(text) if isinstance(text, list) else text
            if "expected on this machine" in text:
                steps += [(int(n), int(t)) for _, n, t in _FORECAST_STEP.findall(text)]
    return steps


def uncovered_steps(chapter: str, executed: Path) -> list[tuple[int, int]]:
    """The steps a chapter's executed page forecast that its smoke-scale work in CHAPTER_WORK lacks."""
    listed = [(s.texts, s.new_tokens) for s in CHAPTER_WORK[chapter]["smoke"].steps]
    missing = []
    for step in printed_steps(executed):
        if step in listed:
            listed.remove(step)
        else:
            missing.append(step)
    return missing


def test_a_changed_run_size_is_caught_against_the_executed_page(tmp_path):
    """The check below fails when a chapter's run size changes and CHAPTER_WORK does not follow."""
    chapter = "book/08_head_to_head"
    smoke = CHAPTER_WORK[chapter]["smoke"]
    lines = "".join(f"  {s.label}: {s.texts} texts x <= {s.new_tokens} tokens: 1 s\n" for s in smoke.steps)
    page = {"cells": [{"cell_type": "code", "source": "", "outputs": [
        {"output_type": "execute_result", "data": {"text/plain": f"expected on this machine (x): about 1 s\n{lines}"}}]}]}
    executed = tmp_path / "08_head_to_head.ipynb"
    executed.write_text(json.dumps(page))
    assert printed_steps(executed) and uncovered_steps(chapter, executed) == []
    first = smoke.steps[0]
    executed.write_text(json.dumps(page).replace(f": {first.texts} texts x", f": {first.texts + 1} texts x", 1))
    assert uncovered_steps(chapter, executed) == [(first.texts + 1, first.new_tokens)]


@pytest.mark.built
def test_the_smoke_work_is_what_the_built_chapters_forecast():
    """CHAPTER_WORK is kept by hand: every step a chapter forecast when `make book` executed it (the book's
    configuration: the smoke scale) must be listed with the same texts and tokens, or the Colab table drifts
    from the chapters. Reads the executed pages the build left; the build comes first in `make test`."""
    executed = ROOT / "_build" / "jupyter_execute" / "book"
    if not executed.is_dir():
        pytest.skip("no executed chapters: run `make book` first")
    drift = {chapter: missing for chapter in CHAPTER_WORK
             if (executed / f"{Path(chapter).name}.ipynb").is_file()
             and (missing := uncovered_steps(chapter, executed / f"{Path(chapter).name}.ipynb"))}
    assert not drift, f"forecast steps (texts, tokens) missing from CHAPTER_WORK's smoke scale: {drift}"


def test_the_chapters_that_read_back_follow_the_chapter_they_read_in_their_group():
    """READ_BACK is how the chapters run: each reads stored texts (generate_once or a run folder), and the chapter it
    reads from comes before it in the book and in the same group, so the build's worker runs it first."""
    from execute_parallel import chapter_group

    order = toc_chapters()
    for chapter, source in _READ_BACK.items():
        cells = json.loads((ROOT / f"{chapter}.ipynb").read_text("utf-8"))["cells"]
        code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        assert "generate_once(" in code or "generate_resumable(" in code, chapter
        assert order.index(source) < order.index(chapter) and chapter_group(source) == chapter_group(chapter)
