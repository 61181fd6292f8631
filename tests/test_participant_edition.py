"""The participant edition (tools/participant_edition.py): skeletons, no solutions, and it runs both ways.

Every chapter with a Build it is executed from its participant copy with the skeletons unfilled (every
check says "not written yet" and the chapter runs to its end on the package's versions), on the small
foreign model (see ``participant_runs``), and so is chapter 1's copy with a deliberately broken
partition. With the book's code put back, a copy is the book's chapter less its solutions: its checks are
read from the book's chapter executed on the same model (see the last test). The other chapters differ from the book only by their
removed solutions and the edition's switch; a static check shows that nothing a later cell uses was
defined inside a removed solution.
"""
from __future__ import annotations

import ast
import builtins
import copy
import os
import re
import zipfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
import participant_edition as edition  # noqa: E402

CHAPTERS = [ROOT / nb for nb in edition.toc_notebooks()]
BUILD_CHAPTERS = [p for p in CHAPTERS if edition.build_sections(nbformat.read(p, as_version=4))]


def read(path: Path):
    return nbformat.read(path, as_version=4)


def tags(cell) -> set[str]:
    return set(cell.metadata.get("tags", []))


def is_prose(cell) -> bool:
    """A paragraph of the edition shown with its numbers (a cell whose code is hidden)."""
    return cell.metadata.get("chainmark", {}).get("edition") == "prose"


def book_code_of(cell) -> str:
    """A code cell's source as the book has it: without the Colab title line the edition puts on a hidden cell."""
    first, _, rest = cell.source.partition("\n")
    return rest if first.startswith(edition.notebook_edition.TITLE_MARK) else cell.source


def code_of(source: str) -> str:
    """A cell's Python, without IPython's magics and shell lines."""
    return "\n".join(l[:len(l) - len(l.lstrip())] + "pass  # magic" if l.lstrip().startswith(("%", "!")) else l
                     for l in source.splitlines())


def test_the_book_has_build_its_and_the_teaching_page_counts_the_same_ones():
    names = {p.stem for p in BUILD_CHAPTERS}
    assert len(names) >= 9 and {"01_partition", "04_embedding", "05_detection"} <= names
    teaching = (ROOT / "book" / "teaching.md").read_text("utf-8")
    build_min = ast.literal_eval(re.search(r"^BUILD_MIN = (\{.*?\})$", teaching, re.M | re.S).group(1))
    assert {k.removeprefix("book/") for k in build_min} == names


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_each_participant_copy_has_skeletons_no_solutions_and_the_switch(path):
    book, copy_ = read(path), edition.participant_notebook(read(path), path.name)
    book_text = "\n".join(c.source for c in book.cells if c.cell_type == "markdown")
    text = "\n".join(c.source if c.cell_type == "markdown" else c.outputs[0]["data"]["text/markdown"]
                     for c in copy_.cells if c.cell_type == "markdown" or is_prose(c))
    assert "Solution to" not in text and "<details>" not in text
    assert len(re.findall(r"^#### Exercise ", text, re.M)) == book_text.count("{exercise}")  # each a heading
    assert edition.BADGE_MARK not in text
    assert sum(c.source == edition.MODE_CELL for c in copy_.cells) == 1
    settings = next(i for i, c in enumerate(copy_.cells) if c.source == edition.notebook_edition.SETTINGS_CELL)
    assert copy_.cells[settings + 1].source == edition.MODE_CELL
    builds = [c for c in copy_.cells if edition.BUILD_TAG in tags(c)]
    assert len(builds) == sum(edition.BUILD_TAG in tags(c) for c in book.cells)
    for cell in builds:
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert ast.get_docstring(node), node.name
                body = node.body[1:]  # after the docstring: only the raise, and the hint above it
                assert len(body) == 1 and isinstance(body[0], ast.Raise), node.name
                assert body[0].exc.func.id == "NotImplementedError", node.name
        assert "# Build it: " in cell.source
    kept = [c for c in copy_.cells if c.cell_type == "code" and not is_prose(c)
            and c.source not in (edition.MODE_CELL, edition.notebook_edition.SETTINGS_CELL)
            and edition.BUILD_TAG not in tags(c)]
    book_sources = {c.source for c in book.cells}
    assert all(book_code_of(c) in book_sources for c in kept)  # the rest is the book's (its edition's form)
    assert all(not c.outputs for c in kept)


@pytest.mark.parametrize("path", BUILD_CHAPTERS, ids=lambda p: p.stem)
def test_a_check_shows_its_sentence_and_nothing_of_its_bookkeeping(path):
    """A check cell never ends on a bare check_build(...) call, whose result object would print below it."""
    for cell in read(path).cells:
        if edition.CHECK_TAG in tags(cell):
            last = ast.parse(cell.source).body[-1]
            assert not (isinstance(last, ast.Expr) and "check_build" in ast.unparse(last)), cell.source[-200:]


def test_a_skeleton_keeps_imports_constants_signatures_and_docstrings():
    source = '''import math
S = 5  # states


def f(a: int, b=2) -> int:
    """Add."""
    return a + b


class P:
    """A processor."""

    scale = 2

    def __call__(self, x):
        """Scale x."""
        y = x * self.scale
        return y
'''
    out = edition.skeleton(source, {"f": "a plus b", "P.__call__": "multiply"})
    assert out.splitlines()[:2] == ["import math", "S = 5  # states"]
    assert 'def f(a: int, b=2) -> int:\n    """Add."""\n    # Build it: a plus b\n    raise NotImplementedError("f is not written yet")' in out
    assert '    scale = 2' in out and '        # Build it: multiply\n        raise NotImplementedError("P.__call__ is not written yet")' in out
    namespace: dict = {}
    exec(compile(out, "skeleton", "exec"), namespace)
    with pytest.raises(NotImplementedError, match="f is not written yet"):
        namespace["f"](1)
    assert edition.DEFAULT_HINT in edition.skeleton('def g():\n    """G."""\n    return 1\n')


def test_a_build_it_without_its_tags_or_docstrings_is_refused():
    nb = read(ROOT / "book" / "01_partition.ipynb")
    for tag in (edition.BUILD_TAG, edition.CHECK_TAG):
        broken = copy.deepcopy(nb)
        for cell in broken.cells:
            cell.metadata["tags"] = [t for t in cell.metadata.get("tags", []) if t != tag]
        with pytest.raises(edition.EditionError, match=f"no (code )?cell tagged '{tag}'"):
            edition.participant_notebook(broken, "01_partition")
    undocumented = copy.deepcopy(nb)
    cell = next(c for c in undocumented.cells if edition.BUILD_TAG in tags(c))
    cell.source = re.sub(r'\n    """[^\n]*"""', "", cell.source, count=1)
    with pytest.raises(edition.EditionError, match="needs a docstring"):
        edition.participant_notebook(undocumented, "01_partition")
    stray = copy.deepcopy(nb)
    stray.cells[2].metadata["tags"] = [edition.CHECK_TAG]
    with pytest.raises(edition.EditionError, match="outside"):
        edition.participant_notebook(stray, "01_partition")


def _assigned(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):  # a function's or lambda's own argument
            names.add(node.arg)
    return names


def _loaded(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def leaked_names(book, kept) -> set[str]:
    """Names a kept code cell uses that only a removed cell (a solution's) defined."""
    kept_sources = [c.source for c in kept.cells if c.cell_type == "code"]
    defined_in_kept = set().union(*(_assigned(ast.parse(code_of(s))) for s in kept_sources))
    removed = [c.source for c in book.cells if c.cell_type == "code" and c.source not in kept_sources]
    only_removed = set().union(set(), *(_assigned(ast.parse(code_of(s))) for s in removed)) - defined_in_kept
    used = set().union(*(_loaded(ast.parse(code_of(s))) for s in kept_sources))
    return (only_removed & used) - set(dir(builtins))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_cell_left_in_a_participant_copy_uses_a_name_only_a_removed_solution_defined(path):
    book = read(path)
    assert not leaked_names(book, edition.participant_notebook(book, path.name, restore=True))


def test_the_leak_check_finds_a_leak():
    book = read(ROOT / "book" / "01_partition.ipynb")
    solution_code = next(c for c in book.cells if c.cell_type == "code" and "from fractions import Fraction" in c.source)
    book.cells.append(nbformat.v4.new_code_cell("print(Fraction(1, 3))"))  # a later cell using the solution's import
    assert leaked_names(book, edition.participant_notebook(book, "01_partition", restore=True)) == {"Fraction"}
    assert solution_code.source not in {c.source for c in edition.participant_notebook(book, "x").cells}


def test_the_zip_holds_every_chapter_and_a_readme(tmp_path):
    written = edition.write_edition(tmp_path / "out", zip_path=tmp_path / "p.zip")
    assert [p.name for p in written] == [p.name for p in CHAPTERS]
    names = zipfile.ZipFile(tmp_path / "p.zip").namelist()
    assert sorted(names) == sorted([f"chainmark-participant/{p.name}" for p in CHAPTERS]
                                   + ["chainmark-participant/README.txt"])


# --- executing the participant notebooks -------------------------------------------------------------------

def check_outputs(nb) -> list[str]:
    return ["".join(o.get("text", "") for o in c.outputs if o.get("output_type") == "stream")
            for c in nb.cells if edition.CHECK_TAG in tags(c)]


def broken_partition(book) -> object:
    """Chapter 1's participant copy with the book's Build it code put back and an off-by-one in the hashed id."""
    nb = edition.participant_notebook(book, "01_partition.ipynb")
    build = next(i for i, c in enumerate(nb.cells) if edition.BUILD_TAG in tags(c))
    book_cell = next(c for c in book.cells if edition.BUILD_TAG in tags(c))
    nb.cells[build].source = book_cell.source.replace('token_id.to_bytes(8, "big")', '(token_id + 1).to_bytes(8, "big")')
    assert nb.cells[build].source != book_cell.source
    return nb


@pytest.fixture(scope="module")
def participant_runs(foreign, tmp_path_factory) -> dict[str, dict]:
    """Every participant copy with a Build it executed to its end with its skeletons unfilled, and chapter 1's
    copy with a deliberately broken partition.

    They run on the small foreign model of tests/foreign_model.py (random weights, its own tokenizer), two
    kernels of one thread at a time, in soft claim mode: what is tested is the edition's code path (the
    skeletons, the checks, the package's versions taking over), which is the same on any model, and a
    chapter costs seconds instead of minutes."""
    from conftest import execute_on_foreign_model

    work = tmp_path_factory.mktemp("participant")
    jobs = {f"{p.stem}-unfilled": edition.participant_notebook(read(p), p.name) for p in BUILD_CHAPTERS}
    jobs["01_partition-broken"] = broken_partition(read(ROOT / "book" / "01_partition.ipynb"))
    paths = {}
    for name, nb in jobs.items():
        (work / name).mkdir()
        nbformat.write(nb, work / name / "chapter.ipynb")
        paths[name] = str(work / name / "chapter.ipynb")
    return execute_on_foreign_model(paths, foreign, work)


@pytest.mark.slow
def test_a_deliberately_broken_partition_is_explained_in_one_sentence(participant_runs):
    """Chapter 1's copy with an off-by-one in the id it hashes: its check says where the tables differ and why,
    in one sentence, and the chapter goes on to its end with the package's table."""
    result = participant_runs["01_partition-broken"]
    assert result["completed"], result["error"]
    out = check_outputs(result["notebook"])[0].strip()
    explanation = out.split(". Look at ")[0]
    assert re.fullmatch(r"✗ my_state_table differs from the package: at token id \d+ yours gives state \d and the "
                        r"package \d \([\d,]+ of [\d,]+ differ\); your state at every token id t is the package's at "
                        r"t \+ 1: an off-by-one in what you use for t", explanation), explanation
    assert out.endswith("The chapter goes on with the package's version.")


@pytest.mark.slow
@pytest.mark.parametrize("path", BUILD_CHAPTERS, ids=lambda p: p.stem)
def test_the_participant_copy_runs_to_its_end_unfilled(path, participant_runs):
    result = participant_runs[f"{path.stem}-unfilled"]
    assert result["completed"], f"{path.name} (unfilled) stopped: {result['error']}"
    outputs = check_outputs(result["notebook"])
    assert outputs and all(o.strip() for o in outputs)
    for out in outputs:
        lines = [l for l in out.splitlines() if l.startswith(("✓", "✗"))]
        assert lines and all(l.startswith("✗") and "is not written yet." in l for l in lines), out


@pytest.mark.slow
@pytest.mark.parametrize("path", BUILD_CHAPTERS, ids=lambda p: p.stem)
def test_the_participant_copy_with_the_book_code_put_back_passes_every_check(path, foreign_runs):
    """With the book's Build it code, a participant copy is the book's chapter less its solutions, which come
    after every check, plus the switch, which changes what a check does only when it fails (tested above:
    the rest is the book's, and no kept cell needs a solution). So its checks print what the book's checks
    print, and the book's chapter has just been executed on the foreign model (conftest.foreign_runs, for
    tests/test_foreign_model.py): every check there agrees with the package."""
    book = read(path)
    restored = edition.participant_notebook(book, path.name, restore=True)
    # the settings cell is the edition's own, and the edition's paragraphs are no code of the book's
    book_code = [c for c in book.cells if c.cell_type == "code" and not c.source.startswith(edition.SETTINGS_MARK)]
    kept = [book_code_of(c) for c in restored.cells if c.cell_type == "code" and not is_prose(c)
            and c.source not in (edition.MODE_CELL, edition.notebook_edition.SETTINGS_CELL)]
    removed, j = [], 0
    for i, cell in enumerate(book_code):  # the copy's code cells are the book's, in order, some left out
        if j < len(kept) and cell.source == kept[j]:
            j += 1
        else:
            removed.append(i)
    assert j == len(kept) and removed
    last_check = max(i for i, c in enumerate(book_code) if edition.CHECK_TAG in tags(c))
    assert all(i > last_check for i in removed), (removed, last_check)  # only solutions, after every check
    result = foreign_runs[f"book/{path.name}"]
    assert result["completed"], f"{path.name} stopped on the foreign model: {result['error']}"
    outputs = check_outputs(result["notebook"])
    assert len(outputs) == sum(edition.CHECK_TAG in tags(c) for c in restored.cells)
    for out in outputs:
        lines = [l for l in out.splitlines() if l.startswith(("✓", "✗"))]
        assert lines and all(l.startswith("✓") and "agrees with the package" in l for l in lines), out
