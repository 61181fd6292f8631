"""Every chapter is a lesson: objectives, a summary, and at least two exercises whose solutions execute.

Structure is checked on the committed notebooks (fast). That the solutions
*execute* is checked on the executed copies the book build leaves in
``_build/jupyter_execute`` (the build already fails on any cell error; this
also catches a solution that is only prose, or one whose cells never ran).
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

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
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    out: list[str] = []

    def walk(entries):
        for entry in entries or []:
            if "file" in entry and (ROOT / f"{entry['file']}.ipynb").exists():
                out.append(f"{entry['file']}.ipynb")
            walk(entry.get("sections"))

    walk(toc.get("chapters"))
    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    return out


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


CHAPTERS = chapters()


def test_the_toc_lists_chapters():
    assert CHAPTERS, "no notebook in _toc.yml"


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
    assert len(labels) >= MIN_EXERCISES, f"{chapter}: {len(labels)} exercises, at least {MIN_EXERCISES} expected"
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
