"""What the built pages show: no bookkeeping or raw output under a cell, and every figure numbered and described.

The lint (tests/output_hygiene.py) reads the executed chapters the book build
leaves in ``_build/jupyter_execute``; the figure check reads the built site.
Both skip when the book has not been built (``make test`` builds it first).
"""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from output_hygiene import figure_problems, problems, widget_problems  # noqa: E402
from test_book import toc_files  # noqa: E402
from test_chapters import CHAPTERS, EXECUTED  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"


def _cell(source: str, outputs: list, tags: tuple[str, ...] = ()) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = outputs
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def _result(text: str, html: str | None = None) -> nbformat.NotebookNode:
    data = {"text/plain": text}
    if html:
        data["text/html"] = html
    return nbformat.v4.new_output("execute_result", data=data, execution_count=1)


def _stdout(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def _image() -> nbformat.NotebookNode:
    return nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})


def _figure_cell(outputs: list) -> nbformat.NotebookNode:
    cell = _cell("plt.show()", outputs)
    cell.metadata["mystnb"] = {"figure": {"caption": "A plot.", "name": "fig-x"}, "image": {"alt": "a line plot"}}
    return cell


def test_the_lint_finds_each_kind_of_problem_and_spares_teaching_output():
    nb = nbformat.v4.new_notebook()
    panel = nbformat.v4.new_output("display_data", data={"text/html": "<div>tiles</div>", "text/plain": "<HTML>"})
    nb.cells = [
        _cell("x", [_result("1.6252739128878808")]),
        _cell("d", [_result("{'tpr': 0.9}")]),
        _cell("s", [_result("'1.1% [0.6, 1.8]'")]),
        _cell('sh("calibrate")', [_result("(0, 'targets: n = 30, rho = 0.5', '')")]),
        _cell("series", [_result("a    1\nb    2\ndtype: int64")]),
        _cell("print(series)", [_stdout("a    1\nName: x, dtype: float64\n")]),
        _cell('share = hits / n\nglue("share", share)', []),
        _cell('with claim("it holds"):\n    assert True', []),
        _cell('print("S = 5")\ndisplay(panel)', [_stdout("S = 5\n"), panel]),
        _figure_cell([_image(), _result("   a\n0  1", html="<table></table>")]),
        _cell('print(workdir)', [_stdout("wrote /tmp/chainmark-corpus-lqg15bv9/audit.parquet\n")]),
        # what a page may show: a table, printed text alone, a panel, bookkeeping in a removed cell
        _cell("table", [_result("   a\n0  1", html="<table></table>")]),
        _cell('print(text)', [_stdout("Photosynthesis is how plants make sugar.\n")]),
        _cell("show_tokens(...)", [panel]),
        _figure_cell([_image()]),
        _cell('glue("a", 1)\nwith claim("x"):\n    assert True', [_result("3")], tags=("remove-cell",)),
        _cell('glue("a", 1)', [], tags=("remove-input",)),
        _cell("from cmlab.teaching import set_theme, show_source", []),
        _cell("from cmlab.teaching import banner, claim, claims_report, glue\n\nbanner()", [],
              tags=("remove-input",)),
    ]
    found = problems(nb)
    assert [line.split(":")[0] for line in found] == [f"cell {i}" for i in range(11)], found
    assert "bare scalar" in found[0] and "bare dict" in found[1] and "string repr" in found[2]
    assert "bare tuple" in found[3]
    assert "dtype" in found[4] and "dtype" in found[5] and "glue" in found[6] and "claim" in found[7]
    assert "print()" in found[8] and "figure cell" in found[9] and "builder's path" in found[10]


def _widget(text: str, model_id: str = "m1") -> nbformat.NotebookNode:
    return nbformat.v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": model_id, "version_major": 2, "version_minor": 0},
        "text/plain": text})


def _html(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output("display_data", data={"text/html": text, "text/plain": "<HTML>"})


def test_the_lint_finds_bookkeeping_imports_widget_residue_and_banner_words():
    """The three kinds of bookkeeping the reader must never see, each planted once, and their harmless twins."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"version_major": 2, "state": {
        "box": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_bar", "IPY_MODEL_label"]}},
        "bar": {"model_name": "FloatProgressModel", "state": {"max": 272}},
        "label": {"model_name": "HTMLModel", "state": {"value": "Loading weights"}},
        "slider": {"model_name": "IntSliderModel", "state": {"value": 3}}}}}
    old_banner = ("<div><b>model</b>: SmolLM2 · <b>key</b>: 7bed3cf33e6cb5cb (the public teaching key) · "
                  "<b>claims</b>: strict</div>")
    nb.cells = [
        _cell("import numpy as np\nfrom cmlab.teaching import claim, claims_report, glue, set_theme", []),
        _cell("from cmlab.teaching.plots import banner", []),
        _cell("model, tok = load_model()", [_widget("Loading weights:  40%|####      | 109/272 [00:01<00:02]")]),
        _cell("run()", [_widget("unwatermarked: 0it [00:00, ?it/s]", model_id="box")]),
        _cell("run()", [_widget("0/0", model_id="gone")]),
        _cell("run()", [_widget("", model_id="gone")]),
        _cell("banner()", [_html(old_banner)], tags=("remove-input",)),
        _cell("banner()", [_html('<p class="cm-banner">This run uses a GPU, claims soft.</p>')], tags=("remove-input",)),
        # what a page may show: imports of what visible code uses, bookkeeping imported in a hidden cell,
        # a real widget with its state, and a banner line in the reader's terms
        _cell("from cmlab.teaching import set_theme, show_source, show_tokens", []),
        _cell("from cmlab.teaching import banner, claim, glue\nbanner()", [], tags=("remove-input",)),
        _cell("from cmlab.teaching import claim, claims_report", [], tags=("remove-cell",)),
        _cell("slider", [_widget("IntSlider(value=3)", model_id="slider")]),
        _cell("banner()", [_html('<p class="cm-banner">This run uses the full scale, not this page\'s '
                                 "settings.</p>")], tags=("remove-input",)),
    ]
    found = problems(nb)
    assert [line.split(":")[0] for line in found] == [f"cell {i}" for i in range(8)], found
    assert "claim, claims_report, glue" in found[0] and "banner" in found[1]
    assert all("progress bar" in line for line in found[2:5]) and "nothing behind it" in found[5]
    assert "claims" in found[6] and "strict" in found[6] and "claims" in found[7] and "soft" in found[7]


def test_the_site_check_finds_progress_bars_and_empty_widget_views():
    state = ('<script type="application/vnd.jupyter.widget-state+json">{"version_major": 2, "state": {'
             '"box": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_bar"]}}, '
             '"bar": {"model_name": "IntProgressModel", "state": {}}, '
             '"slider": {"model_name": "IntSliderModel", "state": {}}}}</script>')

    def view(model_id: str) -> str:
        return (f'<div class="cell_output"><script type="application/vnd.jupyter.widget-view+json">'
                f'{{"model_id": "{model_id}", "version_major": 2}}</script></div>')

    assert widget_problems(state + view("slider")) == []
    assert len(widget_problems(state + view("box"))) == 1
    assert len(widget_problems(state + view("missing"))) == 1
    bar_text = '<div class="cell_output"><pre>Loading weights: 100%|##########| 272/272 [00:00&lt;00:00]</pre></div>'
    assert len(widget_problems(state + bar_text)) == 1


def test_the_figure_check_wants_a_number_a_caption_and_real_alt_text():
    good = ('<div class="cell_output"><figure id="fig-a"><img alt="Bar chart of class sizes by state" '
            'src="../_images/ab.png"/><figcaption><p><span class="caption-number">Fig. 1.1 </span>'
            '<span class="caption-text">Sizes.</span></p></figcaption></figure></div>'
            '<a href="https://colab.research.google.com"><img alt="Open in Colab" src="../_images/badge.svg"/></a>')
    assert figure_problems(good) == []
    bare = '<div class="cell_output"><img alt="../_images/ab.png" src="../_images/ab.png"/></div>'
    assert len(figure_problems(bare)) == 2


#: Every executed page: the chapters and the pages written in MyST Markdown with code cells (the teaching page).
EXECUTED_PAGES = [f"{entry}.ipynb" for entry in toc_files()
                  if (ROOT / f"{entry}.ipynb").exists() or "{code-cell}" in (ROOT / f"{entry}.md").read_text()]


@pytest.mark.built
@pytest.mark.parametrize("chapter", EXECUTED_PAGES)
def test_the_executed_chapter_shows_no_bookkeeping_or_raw_output(chapter):
    executed = EXECUTED / chapter
    if not executed.exists():
        pytest.skip(f"no executed copy of {chapter}: build the book first (make test does)")
    found = problems(nbformat.read(executed, as_version=4))
    assert not found, f"{chapter}: " + "; ".join(found)


@pytest.mark.built
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_figure_of_the_page_is_numbered_captioned_and_described(chapter):
    page = SITE / chapter.replace(".ipynb", ".html")
    if not page.exists():
        pytest.skip(f"no built page for {chapter}: build the book first (make test does)")
    found = figure_problems(page.read_text(encoding="utf-8"))
    assert not found, f"{chapter}: " + "; ".join(found)


@pytest.mark.built
@pytest.mark.parametrize("chapter", EXECUTED_PAGES)
def test_no_page_keeps_widget_residue(chapter):
    page = SITE / chapter.replace(".ipynb", ".html")
    if not page.exists():
        pytest.skip(f"no built page for {chapter}: build the book first (make test does)")
    found = widget_problems(page.read_text(encoding="utf-8"))
    assert not found, f"{chapter}: " + "; ".join(found)


_GLUE_REF = re.compile(r"\{glue(?::\w*)?\}`([^`:<]+)")


def unglued(nb: nbformat.NotebookNode, glued: set[str]) -> list[str]:
    """Names a page's prose cites with {glue:...} that its run never glued (a sentence with a hole in it)."""
    cited = {m.group(1).strip() for c in nb.cells if c.cell_type == "markdown" for m in _GLUE_REF.finditer(c.source)}
    return sorted(cited - glued)


def test_the_glue_check_finds_a_name_that_was_never_glued():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("z is {glue:text}`ch_z:.2f` and n is {glue:}`ch_n`.")]
    assert unglued(nb, {"ch_z"}) == ["ch_n"]
    assert unglued(nb, {"ch_z", "ch_n"}) == []


@pytest.mark.built
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_number_the_prose_cites_was_glued_by_the_page(chapter):
    executed = EXECUTED / chapter
    if not executed.exists():
        pytest.skip(f"no executed copy of {chapter}: build the book first (make test does)")
    store = executed.with_suffix(".glue.json")
    glued = set(json.loads(store.read_text())) if store.exists() else set()
    missing = unglued(nbformat.read(executed, as_version=4), glued)
    assert not missing, f"{chapter} cites numbers its run never glued: {missing}"


_GLUE_CALL = re.compile(r"""^\s*glue\(\s*["']([^"']+)["']""", re.M)


def glued_twice(nb: nbformat.NotebookNode) -> list[str]:
    """Names a page's code glues more than once (the build warns, and the prose shows whichever ran last)."""
    names = [m.group(1) for c in nb.cells if c.cell_type == "code" for m in _GLUE_CALL.finditer(c.source)]
    return sorted({n for n in names if names.count(n) > 1})


def test_the_duplicate_glue_check_finds_a_name_glued_twice():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('glue("a", 1)\nglue("b", 2)'), nbformat.v4.new_code_cell('glue("a", 3);')]
    assert glued_twice(nb) == ["a"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_page_glues_a_name_twice(chapter):
    assert glued_twice(nbformat.read(ROOT / chapter, as_version=4)) == []


#: The detectors a chapter calls, and how many positional arguments each takes before the configuration's place is
#: past (detect(ids, config), detect_text(text, tokenizer, config)): one more is a key with S beside it.
_DETECTORS = {"detect": 3, "detect_batch": 3, "detect_segments": 3, "key_randomisation_test": 3, "detect_text": 4}


def loose_detections(source: str) -> list[str]:
    """The calls in a cell's code that give a detector a key with S or the topology beside it, not one
    ChainMarkConfig (one configuration from generation to detection)."""
    if source.lstrip().startswith("%%"):
        return []  # a cell magic: not Python
    code = "\n".join(line[:len(line) - len(line.lstrip())] + "pass  # magic" if line.lstrip().startswith(("%", "!"))
                     else line for line in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return [f"the cell does not parse ({exc.msg}, line {exc.lineno}), so its calls cannot be checked"]
    return [f"line {node.lineno}: {ast.get_source_segment(code, node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and (name := getattr(node.func, "id", getattr(node.func, "attr", None))) in _DETECTORS
            and (len(node.args) >= _DETECTORS[name] or any(kw.arg in ("S", "topology") for kw in node.keywords))]


def test_the_loose_detection_check_finds_a_key_given_with_s_or_a_topology():
    assert loose_detections("r = detect(ids, key, S)") == ["line 1: detect(ids, key, S)"]
    assert len(loose_detections("%pip install -q chainmark\nr = cm.detect_batch(ids, key, S=5)\n"
                                "x = detect(ids, key, S, topo, 0.01)")) == 2
    assert len(loose_detections("if ok:\n    !ls\n    detect_text(text, tok, key, S)")) == 1
    assert len(loose_detections("detect_segments(ids, key, 5)\nkey_randomisation_test(ids, key, topology=t)")) == 2
    assert loose_detections("detect(ids, config, alpha=0.01, test='exact')\ndetect(generation)\n"
                            "detect_batch(rows, ChainMarkConfig(key, S=S_, topology=name), vocab_size=V)\n"
                            "detect_text(text, tok, config)\ndetect_segments(ids, config, draws=99)") == []
    assert loose_detections("detect(ids,") != []


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_detects_with_one_configuration(chapter):
    """The chapters call the package's detectors with one configuration, never a key with S or the topology beside
    it, which could disagree with the configuration the text was generated with. (A bare key in the configuration's
    place is not caught here: the detectors refuse it when the page runs, with a TypeError that says what to pass.)"""
    nb = nbformat.read(ROOT / chapter, as_version=4)
    found = [f"cell {index}, {call}" for index, cell in enumerate(nb.cells) if cell.cell_type == "code"
             for call in loose_detections(cell.source)]
    assert not found, f"{chapter} gives a detector a key with S or the topology beside it: {found}"
