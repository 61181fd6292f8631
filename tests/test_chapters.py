"""Every chapter is a lesson: objectives, a summary, and at least two exercises whose solutions execute.

Structure is checked on the committed notebooks (fast). That the solutions
*execute* is checked on the executed copies the book build leaves in
``_build/jupyter_execute`` (the build already fails on any cell error; this
also catches a solution that is only prose, or one whose cells never ran).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from book_pipeline import toc_entries, toc_notebooks

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = ROOT / "_build" / "jupyter_execute"
MIN_EXERCISES = 2

EXERCISE = re.compile(r"^`{3,}\{exercise\}[^\n]*\n(?::[^\n]*\n)*?:label:\s*(\S+)", re.M)
SOLUTION_START = re.compile(r"^`{3,}\{solution-start\}\s+(\S+)", re.M)
SOLUTION_END = re.compile(r"^`{3,}\{solution-end\}", re.M)
OBJECTIVES = re.compile(r"(what you will learn|learning objectives)", re.I)
SUMMARY = re.compile(r"^#{2,3}\s+Summary\b", re.M | re.I)


def chapters() -> list[str]:
    """The notebooks listed in _toc.yml, in order (pages written in Markdown are not chapters)."""
    return toc_notebooks()


def solutions(nb: nbformat.NotebookNode) -> dict[str, list[int]]:
    """Exercise label -> indices of the code cells between its solution-start and solution-end."""
    spans: dict[str, list[int]] = {}
    current: str | None = None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            # a markdown cell may close one solution and open the next
            for m in sorted([*SOLUTION_START.finditer(cell.source), *SOLUTION_END.finditer(cell.source)],
                            key=lambda m: m.start()):
                if m.re is SOLUTION_START:
                    assert current is None, f"solution {m.group(1)} starts inside solution {current}"
                    current = m.group(1)
                    spans[current] = []
                else:
                    assert current is not None, "a solution-end without a solution-start"
                    current = None
        elif cell.cell_type == "code" and current is not None:
            spans[current].append(i)
    assert current is None, f"solution {current} is never closed"
    return spans


def exercises(nb: nbformat.NotebookNode) -> list[str]:
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return EXERCISE.findall(text)


def section_pages() -> set[str]:
    """Pages that continue a chapter (``sections:`` in _toc.yml) or sit in the appendix: they state their own
    objectives and summary, but the chapter they belong to carries its exercises."""
    return {f"{e.file}.ipynb" for e in toc_entries() if e.notebook() is not None
            and (e.is_section or (e.depth == 1 and str(e.part or "").lower().startswith("appendix")))}


CHAPTERS = chapters()
SECTIONS = section_pages()


def test_the_toc_lists_chapters():
    assert CHAPTERS, "no notebook in _toc.yml"
    assert SECTIONS < set(CHAPTERS) and "book/05b_lr_detector.ipynb" in SECTIONS
    assert "book/05_detection.ipynb" not in SECTIONS and "book/appendix_paper.ipynb" in SECTIONS


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_has_objectives_and_summary(chapter):
    nb = nbformat.read(ROOT / chapter, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and OBJECTIVES.search(first.source), \
        f"{chapter}: the first cell should state the learning objectives ('What you will learn')"
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert SUMMARY.search(text), f"{chapter}: no '## Summary' section"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_has_exercises_with_executable_solutions(chapter):
    nb = nbformat.read(ROOT / chapter, as_version=4)
    labels = exercises(nb)
    spans = solutions(nb)
    least = 0 if chapter in SECTIONS else MIN_EXERCISES
    assert len(labels) >= least, f"{chapter}: {len(labels)} exercises, at least {least} expected"
    assert len(set(labels)) == len(labels), f"{chapter}: duplicate exercise labels"
    for label in labels:
        assert label in spans, f"{chapter}: exercise {label} has no solution"
        assert spans[label], f"{chapter}: the solution of {label} has no code cell to execute"
    assert set(spans) <= set(labels), f"{chapter}: solutions without an exercise: {set(spans) - set(labels)}"


def test_exercise_labels_are_unique_across_the_book():
    seen: dict[str, str] = {}
    for chapter in CHAPTERS:
        for label in exercises(nbformat.read(ROOT / chapter, as_version=4)):
            assert label not in seen, f"exercise label {label} is used in {seen[label]} and {chapter}"
            seen[label] = chapter


@pytest.mark.built
@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solutions_ran_in_the_build(chapter):
    executed = EXECUTED / chapter
    if not executed.exists():
        pytest.skip(f"no executed copy of {chapter}: build the book first (make test does)")
    source = nbformat.read(ROOT / chapter, as_version=4)
    nb = nbformat.read(executed, as_version=4)
    assert len(nb.cells) == len(source.cells), f"{executed} is stale: rebuild the book"
    for label, cells in solutions(nb).items():
        for i in cells:
            cell = nb.cells[i]
            assert cell.get("execution_count") is not None, f"{chapter}: solution {label} (cell {i}) did not run"
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            assert not errors, f"{chapter}: solution {label} (cell {i}) raised {errors[0].get('ename')}"


_PRIVATE_SOURCE = re.compile(r"show_source\((?:[\w.]*\.)?_(?!_)\w*\)")


@pytest.mark.parametrize("chapter", chapters())
def test_private_source_is_only_under_the_hood(chapter):
    """`show_source` in the main flow is for the public function a chapter is about; a private
    helper's source (a name starting with one underscore) sits in a collapsed cell."""
    nb = nbformat.read(ROOT / chapter, as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and _PRIVATE_SOURCE.search(cell.source):
            tags = set(cell.metadata.get("tags", []))
            assert tags & {"hide-cell", "hide-output", "remove-cell"}, (
                f"{chapter} cell {index} shows a private name's source in the main flow: {cell.source.strip()}")


# ---------------------------------------------------------------------------
# prose is written, numbers are computed; core chapters build before they import
# ---------------------------------------------------------------------------
import sys  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from chapter_lint import MAGIC, MAX_PROSE_SHARE, measure, prose_lines  # noqa: E402

#: The chapters that build a component of the scheme, and so need a "Build it" section.
BUILD_CHAPTERS = [f"book/{stem}.ipynb" for stem in ("01_partition", "02_topology", "03_gates", "04_embedding",
                                                    "05_detection", "06_calibration", "06c_exact_test",
                                                    "07_robustness",
                                                    "09b_corpus_audit", "09c_segments", "09d_anytime",
                                                    "09e_stealing", "09f_context_keyed", "09g_serving")]
_HIDDEN = {"remove-cell", "remove-input", "hide-input", "hide-cell"}


def test_the_prose_measure_counts_templates_and_spares_labels():
    """The measure behind the next test: a Markdown template and a sentence in an f-string count,
    a plot label, an assert message and a docstring do not."""
    assert prose_lines('display(Markdown(\n    f"The share is {x:.2f}, which is what chance predicts here."\n))') == {1, 2, 3}
    assert prose_lines('note = f"the two tables agree on {n} of {V} ids, as the hash predicts"') == {1}
    assert prose_lines('ax.set_title(f"Class sizes for S = {S} and V = {V} across all the states")') == set()
    assert prose_lines('assert ok, "the package and the reader disagree on at least one of the ids"') == set()
    assert prose_lines('def f():\n    """Return the state of one token under the key, as the paper says."""\n') == set()
    assert prose_lines('print(f"V = {V:,}")') == set()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_prose_is_written_not_assembled(chapter):
    """Sentences live in Markdown cells; code that pastes prose together from f-strings is at
    most 5% of a chapter's code lines (tests/chapter_lint.py lists where it is)."""
    m = measure(ROOT / chapter)
    assert m["share"] <= MAX_PROSE_SHARE, (
        f"{chapter}: {m['prose']} of {m['code']} code lines build prose ({m['share']:.1%} > "
        f"{MAX_PROSE_SHARE:.0%}); cells: {[(i, first) for i, _, first in m['where']]}")


def _build_section(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """The cells from the '## Build it' heading to the next heading of the same or a higher level."""
    out: list[nbformat.NotebookNode] = []
    inside = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            heading = re.match(r"^(#{1,2})\s+(.*)", cell.source)
            if heading and heading.group(2).lower().startswith("build it"):
                inside = True
                continue
            if inside and heading:
                break
        if inside:
            out.append(cell)
    return out


@pytest.mark.parametrize("chapter", BUILD_CHAPTERS)
def test_core_chapter_builds_its_component_before_importing_it(chapter):
    """A '## Build it' section where the reader's own code (a def or a class, shown, not hidden, in a cell
    tagged build-it) is checked against the package in a visible cell tagged build-check that calls
    cmlab.teaching.workshop.check_build (strict in the book, explanatory in the participant edition)."""
    nb = nbformat.read(ROOT / chapter, as_version=4)
    section = _build_section(nb)
    assert section, f"{chapter} has no '## Build it' section"
    shown = [c for c in section if c.cell_type == "code" and not set(c.metadata.get("tags", [])) & _HIDDEN]
    assert any(re.search(r"^\s*(def|class) \w+", c.source, re.M) for c in shown), (
        f"{chapter}: the Build it section has no visible function or class written by the reader")
    assert any("build-it" in c.metadata.get("tags", []) and re.search(r"^\s*(def|class) \w+", c.source, re.M)
               for c in shown), f"{chapter}: the reader's function or class is not in a cell tagged build-it"
    assert any("build-check" in c.metadata.get("tags", []) and re.search(r"\bcheck_build\(", c.source)
               for c in shown), (
        f"{chapter}: the Build it section never checks the reader's code against the package (no visible "
        "check_build in a cell tagged build-check)")


@pytest.mark.built
@pytest.mark.parametrize("chapter", BUILD_CHAPTERS)
def test_build_it_ran_in_the_build(chapter):
    executed = EXECUTED / chapter
    if not executed.exists():
        pytest.skip(f"no executed copy of {chapter}: build the book first (make test does)")
    nb = nbformat.read(executed, as_version=4)
    cells = [c for c in _build_section(nb) if c.cell_type == "code"]
    assert cells and all(c.get("execution_count") is not None for c in cells), (
        f"{chapter}: a cell of the Build it section did not run (or the executed copy is stale)")


#: Chapters whose tables report rates from runs: every rate there carries its interval.
RATE_CHAPTERS = [f"book/{stem}.ipynb" for stem in ("05_detection", "05a_false_positives", "05b_lr_detector",
                                                   "06b_real_text",
                                                   "06c_exact_test", "07_robustness", "07b_attacks",
                                                   "08_head_to_head", "08a_reference", "08b_kregular",
                                                   "09_audit", "09a_recalibration",
                                                   "09b_corpus_audit", "09c_segments", "09d_anytime",
                                                   "09e_stealing", "09f_context_keyed", "09g_serving")]
_RATE_HEADER = re.compile(r"\b(TPR|FPR|power|flagged|detected|detection rate|false.positive)\b", re.I)
#: Columns of rates that are computed from a formula, not measured on texts (no sampling error).
_COMPUTED = re.compile(r"gaussian|exact|predicted|prediction|bound|hoeffding|analytic|theor|closed|formula|paper|"
                       r"nominal|target|expected", re.I)
_INTERVAL = re.compile(r"\[\s*-?[\d.]+\s*%?\s*,\s*-?[\d.]+\s*%?\s*\]|CI|interval|low|high|±", re.I)


def bare_rates(nb: nbformat.NotebookNode) -> list[str]:
    """Table cells under a rate heading (TPR, FPR, power, flagged...) that carry no interval,
    in tables that have no interval columns either; and printed lines with a bare rate."""
    from bs4 import BeautifulSoup

    bare = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            html = data.get("text/html", "")
            html = "".join(html) if isinstance(html, list) else html
            for table in BeautifulSoup(html, "html.parser").find_all("table") if "<table" in html else []:
                rows = [[c.get_text(" ", strip=True) for c in tr.find_all(["th", "td"])] for tr in table.find_all("tr")]
                header = next((r for r in rows if r), [])
                if any(_INTERVAL.search(h) for r in rows[:2] for h in r):
                    continue  # the table carries its intervals in columns of their own
                for col, name in enumerate(header):
                    if not _RATE_HEADER.search(name) or _COMPUTED.search(name):
                        continue
                    for r in rows[1:]:
                        value = r[col] if col < len(r) else ""
                        if re.search(r"\d", value) and not _INTERVAL.search(value):
                            bare.append(f"cell {index}: column {name!r} holds {value!r}")
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            for line in ("".join(text) if isinstance(text, list) else text).splitlines():
                if (_RATE_HEADER.search(line) and re.search(r"\d\s*%", line) and not _INTERVAL.search(line)
                        and not _COMPUTED.search(line)):
                    bare.append(f"cell {index}: printed {line.strip()[:100]!r}")
    return bare


@pytest.mark.built
@pytest.mark.parametrize("chapter", RATE_CHAPTERS)
def test_no_rate_without_its_interval(chapter):
    executed = EXECUTED / chapter
    if not executed.exists():
        pytest.skip(f"no executed copy of {chapter}: build the book first (make test does)")
    bare = bare_rates(nbformat.read(executed, as_version=4))
    assert not bare, f"{chapter}: rates shown without a 95% interval: {bare[:8]}"


def test_the_bare_rate_check_can_fail():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html":
                    "<table><tr><th>method</th><th>TPR (%)</th></tr><tr><td>kgw</td><td>96.0</td></tr></table>"}),
                    nbformat.v4.new_output("stream", name="stdout", text="FPR at z_alpha: 2.1%\n")]
    nb.cells = [cell]
    assert len(bare_rates(nb)) == 2
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html":
                    "<table><tr><th>method</th><th>TPR (%)</th></tr><tr><td>kgw</td><td>96.0 [90.1, 98.9]</td></tr></table>"})]
    assert bare_rates(nb) == []


# ---------------------------------------------------------------------------
# chapters call the package's helpers instead of keeping local copies of them
# ---------------------------------------------------------------------------
#: Names of local copies the chapters once kept of package helpers, and what replaced them:
#: cmlab.harness.runner.generate_resumable; cmlab.comparison.quality.repeated_ngram_share (n=4, and n=2 for pairs);
#: chainmark.detection.first_occurrences; chainmark.auditor.rates.rate_estimate and RateEstimate.format.
RETIRED_COPIES = frozenset({"generate_with_progress", "repeated_share", "repeated_pair_share", "distinct_pair_share",
                            "rate_row", "with_ci", "share_ci", "simulate_walks", "blind_substitution"})


def defined_names(source: str) -> set[str]:
    """Names a code cell defines as functions (``def``, ``async def``, or a name bound to a lambda)."""
    code = "\n".join("" if MAGIC.match(line) else line for line in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_the_retired_copy_check_can_fail():
    assert defined_names("def with_ci(flags):\n    return str(flags)\n") == {"with_ci"}
    assert defined_names("%%time\nshare_ci = lambda flags: str(flags)\n") == {"share_ci"}
    assert defined_names("with_ci(x)\nrate_estimate(x).format(0)\n") == set()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_chapter_keeps_a_local_copy_of_a_package_helper(chapter):
    """A chapter calls the package's helper (rate with interval, repeated-n-gram share, resumable
    generation) rather than defining its own copy under one of the retired names."""
    nb = nbformat.read(ROOT / chapter, as_version=4)
    found = [(index, name) for index, cell in enumerate(nb.cells) if cell.cell_type == "code"
             for name in sorted(defined_names(cell.source) & RETIRED_COPIES)]
    assert not found, f"{chapter} defines local copies of package helpers (cell, name): {found}"


# ---------------------------------------------------------------------------
# pages a reader can finish
# ---------------------------------------------------------------------------
#: The most prose words a page may hold (the README's layout: "each page under 3,500 words of prose"); a longer chapter is split into sections.
MAX_PAGE_WORDS = 3500
_FENCE = re.compile(r"^(`{3,}|~{3,})(?!\{(exercise|solution))[^\n]*\n.*?^\1\s*$", re.M | re.S)


def prose_words(markdown: str) -> int:
    """Words of prose in one Markdown cell or page: code blocks and display math are not prose; an exercise and
    its solution text are."""
    text = re.sub(r"\$\$.*?\$\$", " ", markdown, flags=re.S)
    text = _FENCE.sub(" ", text)
    return len(re.findall(r"[A-Za-z][A-Za-z'’-]*", text))


def test_the_prose_count_skips_code_and_math_but_counts_exercises():
    assert prose_words("One two three.\n\n```python\nfour five six\n```\n\n$$a + b$$\n") == 3
    assert prose_words("```{exercise} Seven eight\n:label: ex-x\n\nNine ten.\n```\n") == 7  # "label", "ex-x" too


from test_book import toc_files  # noqa: E402

PAGES = toc_files()


@pytest.mark.parametrize("page", PAGES)
def test_no_page_is_longer_than_a_reader_can_finish(page):
    path = next(p for p in (ROOT / f"{page}.ipynb", ROOT / f"{page}.md") if p.exists())
    if path.suffix == ".ipynb":
        words = sum(prose_words(c.source) for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    else:
        words = prose_words(path.read_text())
    assert words <= MAX_PAGE_WORDS, f"{page}: {words} words of prose; split it into sections (_toc.yml)"
