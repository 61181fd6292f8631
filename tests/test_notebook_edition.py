"""The notebook edition (tools/notebook_edition.py, cmlab.teaching.edition): the chapters as Colab, JupyterLab
and GitHub render them, with no extension and with the run's numbers in the sentences.

The unit tests convert small chapters written here; the tests marked ``built`` read the edition the build wrote
(``_build/edition``) beside the site (``_build/html``): every notebook rendered as plain CommonMark (what Colab
and GitHub show) holds no raw MyST and no visible bookkeeping, and every number the site pasted into a sentence
of a page is in the same page's edition, formatted the same way.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import pytest

import notebook_edition as ne
from cmlab.teaching import edition, glue

ROOT = Path(__file__).resolve().parents[1]

EDITION = ROOT / "_build" / "edition"
SITE = ROOT / "_build" / "html"
RAW_MYST = ("{glue", "{doc}", "{ref}", "{numref}", "```{", "{exercise}", "{solution")
BOOKKEEPING = ("glue(", "claim(", "banner(")


def md(text: str):
    cell = nbformat.v4.new_markdown_cell(text)
    cell.pop("id", None)
    return cell


def code(text: str, tags=(), outputs=()):
    cell = nbformat.v4.new_code_cell(text)
    cell.pop("id", None)
    if tags:
        cell.metadata["tags"] = list(tags)
    cell.outputs = list(outputs)
    return cell


def glued(name: str, plain: str):
    """An output as myst-nb's glue(name, value, display=False) leaves it in an executed notebook."""
    return nbformat.v4.new_output("display_data", data={ne.GLUE_MIME + "text/plain": plain},
                                  metadata={"scrapbook": {"name": name, "mime_prefix": ne.GLUE_MIME}})


@pytest.fixture(scope="module")
def index():
    return ne.book_index()


def page(index, docname="book/04_embedding"):
    return ne._Page(docname, index, index.prefixes[docname])


# --- the kernel side -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0.123456, 1200, 3, -2.5, 1e-7, "kgw", True, 0.0])
@pytest.mark.parametrize("spec", ["", ".2f", ",", ".1%", ".3g", "d", "s", ".0f", ",.0f", ".2e"])
def test_a_glued_value_is_formatted_as_the_site_formats_it(value, spec):
    from IPython.core.formatters import format_display_data
    from myst_nb.core.variables import format_plain_text

    plain = format_display_data(value)[0]["text/plain"]
    role = "{glue:text}`v" + (f":{spec}" if spec else "") + "`"
    try:
        expected = format_plain_text(plain, spec or "s")
    except (ValueError, TypeError) as exc:
        with pytest.raises(type(exc)):
            edition.fill(role, {"v": plain})
        return
    assert edition.fill(role, {"v": plain}) == expected


def test_a_paragraph_shows_its_numbers_and_the_note_of_a_claim_its_run_did_not_bear_out(monkeypatch):
    import IPython.display

    from cmlab.teaching import claim

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    monkeypatch.setenv("CHAINMARK_CLAIMS", "soft")
    edition.notebook_edition()
    try:
        edition.show_paragraph("nothing pending")
        shown.clear()
        glue("edition_test_rate", 0.25)
        with claim("the rate is below a tenth"):
            assert edition._glued["edition_test_rate"] == "0.1"
        with claim("the rate is positive"):
            assert 0.25 > 0
        edition.show_paragraph("The rate is {glue:text}`edition_test_rate:.0%`.")
    finally:
        edition.notebook_edition(False)
    markdown, note = shown
    assert markdown.data == "The rate is 25%."
    assert "This run differs from the text" in note.data and "below a tenth" in note.data
    assert "positive" not in note.data


def test_fill_puts_each_value_in_its_sentence_and_names_what_is_missing():
    text = "On {glue:text}`n:,` texts z = {glue:text}`z:.2f`; the method is {glue:text}`m`, at {glue:text}`gone:.1%`."
    out = edition.fill(text, {"n": "1200", "z": "2.3263478740408408", "m": "'kgw'"})
    assert out.startswith("On 1,200 texts z = 2.33; the method is kgw, at ")
    assert "gone" in out and "run the cells above" in out and "{glue" not in out


def test_glue_remembers_for_the_paragraphs_and_is_silent_in_the_edition(capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_myst_nb(name, *args, **kwargs):  # as in Colab, where myst-nb is not installed
        if name.startswith("myst_nb"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_myst_nb)
    try:
        glue("edition_test_a", 0.5)
        assert "edition_test_a = 0.5" in capsys.readouterr().out      # the plain chapter prints the value
        edition.notebook_edition()
        glue("edition_test_b", 7)
        assert capsys.readouterr().out == ""                           # the edition shows it in the sentence
    finally:
        edition.notebook_edition(False)
    assert edition._glued["edition_test_a"] == "0.5" and edition._glued["edition_test_b"] == "7"


# --- Markdown ------------------------------------------------------------------------------------------------

def test_cross_references_become_links_to_the_sites_pages(index):
    out = ne.convert_markdown("See {doc}`04b_cost`, {doc}`the tour <00b_tour>` and {numref}`Figure %s "
                              "<fig-corpus-pvalues>`, and {ref}`ex-kreg-length`.", page(index))
    site = ne.site_url()
    assert f"[{index.titles['book/04b_cost']}]({site}/book/04b_cost.html)" in out
    assert f"[the tour]({site}/book/00b_tour.html)" in out
    assert f"[Figure 9.3]({site}/book/09b_corpus_audit.html#fig-corpus-pvalues)" in out
    assert f"({site}/book/08b_kregular.html#ex-kreg-length)" in out and "Exercise 8." in out
    assert not any(raw in out for raw in RAW_MYST)


def test_exercises_become_numbered_headings_and_solutions_collapse_across_cells(index):
    p = page(index)
    first = ne.convert_markdown("## Exercises\n\n```{exercise} Try it\n:label: ex-x\n\nDo $x$.\n```\n\n"
                                "````{solution-start} ex-x\n:class: dropdown\n````\n\nThe answer is:", p)
    assert "#### Exercise 4.1: Try it" in first and "Do $x$." in first
    assert "<details>" in first and first.rstrip().endswith("</details>") and "<summary>" in first
    assert p.solution is not None                       # the solution goes on after this cell
    more = ne.convert_markdown("So it holds.\n\n````{solution-end}\n````\n\n```{exercise} Again\n```", p)
    assert more.startswith("<details>") and "(continued)" in more and "#### Exercise 4.2: Again" in more
    assert p.solution is None
    p.solution = "Exercise 4.2"
    assert ne.convert_markdown("````{solution-end}\n````", p) == ""   # a reopening that holds nothing is dropped


def test_admonitions_become_quotes_and_unknown_markup_is_refused(index):
    out = ne.convert_markdown("```{note}\nMind the gap.\n```", page(index))
    assert out.startswith("> **Note.**") and "> Mind the gap." in out
    with pytest.raises(ne.EditionError, match="margin"):
        ne.convert_markdown("```{margin}\nA side note.\n```", page(index))
    with pytest.raises(ne.EditionError, match="term"):
        ne.convert_markdown("A {term}`watermark`.", page(index))
    with pytest.raises(ne.EditionError, match="unknown page"):
        ne.convert_markdown("{doc}`no_such_page`", page(index))
    with pytest.raises(ne.EditionError, match="not closed"):
        ne.convert_markdown("```{exercise} Open\nforever", page(index))


# --- one chapter ---------------------------------------------------------------------------------------------

def small_chapter():
    from notebooks import INSTALL_MARK, SETTINGS_MARK

    source = nbformat.v4.new_notebook()
    source.nbformat_minor = 4  # the chapters are nbformat 4.4, without cell ids
    source.cells = [
        md("# A chapter\n\n[![Open in Colab](images/open-in-colab.svg)](https://colab.example)\n\nIntro."),
        code(INSTALL_MARK + "\nimport sys", tags=["hide-input"]),
        code(SETTINGS_MARK + "\nsettings = 1\nsettings"),
        code("z = 2.5\nglue('z', z)\nwith claim('z is big'):\n    assert z > 2", tags=["remove-cell"]),
        md("The score is {glue:text}`z:.1f`, see {doc}`05_detection`."),
        code("plot()", tags=["remove-input"]),
        code("x = 1\nx"),
    ]
    source.cells[5].metadata["mystnb"] = {"figure": {"caption": "A plot of $z$.", "name": "fig-small"}}
    executed = nbformat.from_dict(nbformat.reader.reads(nbformat.writes(source)))
    executed.cells[2].outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "a\nlong\ntable"})]
    executed.cells[3].outputs = [glued("z", "2.5")]
    executed.cells[5].outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBOR"})]
    executed.cells[6].outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "1"},
                                                        execution_count=7)]
    return source, executed


def test_a_chapter_edition_shows_its_sentences_with_their_numbers_and_hides_the_bookkeeping(index):
    source, executed = small_chapter()
    nb = ne.edition_notebook(source, executed, "book/04b_cost", index, settings_line="the settings, one line")
    cells = nb.cells
    assert "Open in Colab" not in cells[0].source and "read this page on the site" in cells[0].source
    install, settings, hidden, prose, figure_cell, caption, visible = cells[1:8]
    assert install.source.startswith(ne.TITLE_MARK) and install.metadata["jupyter"]["source_hidden"]
    assert settings.source == ne.SETTINGS_CELL and len(settings.source.splitlines()) <= 8
    assert settings.outputs[0]["text"] == "the settings, one line\n"
    assert hidden.metadata["jupyter"] == {"source_hidden": True, "outputs_hidden": True}
    assert hidden.metadata["cellView"] == "form" and hidden.outputs == []
    assert prose.cell_type == "code" and prose.metadata["jupyter"]["source_hidden"]
    shown = prose.outputs[0]["data"]["text/markdown"]
    assert shown.startswith("The score is 2.5, see [") and "05_detection.html" in shown
    assert figure_cell.metadata["jupyter"]["source_hidden"] and figure_cell.outputs[0]["data"]["image/png"]
    assert caption.cell_type == "markdown" and caption.source.startswith("**Figure 4.")
    assert visible.source == "x = 1\nx" and visible.outputs[0]["data"]["text/plain"] == "1"
    namespace: dict = {ne.PARAGRAPH: lambda text: text}
    assert eval(prose.source.split("\n", 1)[1], namespace) == "The score is {glue:text}`z:.1f`, see " \
        f"[{index.titles['book/05_detection']}]({ne.site_url()}/book/05_detection.html)."


def test_a_chapter_that_binds_the_paragraphs_function_is_refused(index):
    source, executed = small_chapter()
    source.cells[6].source = executed.cells[6].source = f"{ne.PARAGRAPH} = ['a list']"
    with pytest.raises(ne.EditionError, match=ne.PARAGRAPH):
        ne.edition_notebook(source, executed, "book/04b_cost", index, settings_line="")


def test_a_sentence_whose_value_the_run_never_glued_is_refused(index):
    source, executed = small_chapter()
    executed.cells[3].outputs = []
    with pytest.raises(ne.EditionError, match="no value for z"):
        ne.edition_notebook(source, executed, "book/04b_cost", index, settings_line="")
    executed.cells.pop()
    with pytest.raises(ne.EditionError, match="build the book again"):
        ne.edition_notebook(source, executed, "book/04b_cost", index, settings_line="")


# --- the built edition ---------------------------------------------------------------------------------------

def rendered_text(nb) -> str:
    """What a plain CommonMark (GFM tables) renderer shows of a notebook: its Markdown cells, the Markdown and
    text outputs, and the code of every cell whose code is not hidden; as text, tags stripped."""
    from markdown_it import MarkdownIt

    renderer = MarkdownIt("commonmark").enable("table")
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(renderer.render(cell.source))
            continue
        if cell.cell_type != "code":
            continue
        if not cell.metadata.get("jupyter", {}).get("source_hidden"):
            parts.append(html.escape(cell.source))
        for output in cell.get("outputs", []) if not cell.metadata.get("jupyter", {}).get("outputs_hidden") else []:
            data = output.get("data", {})
            if "text/markdown" in data:
                parts.append(renderer.render(data["text/markdown"]))
            elif "text/plain" in data or "text" in output:
                parts.append(html.escape(data.get("text/plain", output.get("text", ""))))
    return html.unescape(re.sub(r"<[^>]+>", " ", "\n".join(parts)))


PARTICIPANT = ROOT / "_build" / "participant"


def edition_notebooks():
    return sorted(EDITION.glob("*.ipynb"))


def rendered_notebooks():
    """Both editions' notebooks as the build wrote them: the notebook edition's and the participant edition's."""
    return edition_notebooks() + sorted(PARTICIPANT.glob("*.ipynb"))


@pytest.mark.built
def test_the_build_wrote_an_edition_of_every_chapter():
    from book_pipeline import toc_notebooks

    assert [p.name for p in edition_notebooks()] == sorted(Path(p).name for p in toc_notebooks())
    assert (SITE / ne.EDITION_ZIP).is_file()


@pytest.mark.built
@pytest.mark.parametrize("path", rendered_notebooks(), ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_an_edition_notebook_rendered_as_commonmark_shows_no_markup_and_no_bookkeeping(path):
    """The notebook edition and the participant edition (its Build its unwritten) alike."""
    nb = nbformat.read(path, as_version=4)
    text = rendered_text(nb)
    for raw in RAW_MYST:
        assert raw not in text, (path.name, raw, text[max(0, text.find(raw) - 200):text.find(raw) + 200])
    for cell in nb.cells:
        if cell.cell_type == "code" and not cell.metadata.get("jupyter", {}).get("source_hidden"):
            assert not any(word in cell.source for word in BOOKKEEPING), (path.name, cell.source[:300])


def site_pasted_numbers(page: Path) -> list[str]:
    """Every value the site pasted into a sentence of the page (myst-nb's ``pasted-text`` spans)."""
    found = re.findall(r'<span class="pasted-text">(.*?)</span>', page.read_text("utf-8"), re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", value)).strip() for value in found]


@pytest.mark.built
@pytest.mark.parametrize("path", edition_notebooks(), ids=lambda p: p.stem)
def test_every_number_the_site_pasted_into_a_sentence_is_in_the_edition(path):
    site_page = SITE / "book" / f"{path.stem}.html"
    numbers = site_pasted_numbers(site_page)
    text = " ".join(rendered_text(nbformat.read(path, as_version=4)).split())
    missing = [n for n in numbers if " ".join(n.split()) not in text]
    assert not missing, (path.name, missing[:10], len(numbers))


@pytest.mark.built
def test_figure_and_exercise_numbers_are_the_sites():
    """The edition numbers figures and exercises as the site does: the site's page holds the same numbers."""
    index = ne.book_index()
    checked = 0
    for label, (docname, shown) in index.labels.items():
        number = shown.split(" ")[1]
        if "." not in number:
            continue
        page_html = (SITE / f"{docname}.html").read_text("utf-8")
        kind = "Fig." if shown.startswith("Figure") else "Exercise"
        assert re.search(rf"{kind}\s*(<[^>]+>\s*)*{re.escape(number)}\b", page_html), (label, shown)
        checked += 1
    assert checked > 40
