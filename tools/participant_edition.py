"""Write the participant edition of the book: every Build it a skeleton, no exercise solutions.

    python tools/participant_edition.py [OUT_DIR] [--zip FILE] [--restore] [--executed DIR]

For a workshop, participants write each chapter's Build it themselves. This generator writes a participant
copy of each chapter (default ``_build/participant/``) from its notebook edition
(``tools/notebook_edition.py``: what JupyterLab and Colab render with no extension, the sentences with the
run's numbers, the site's hidden cells collapsed), with its solutions left out, and then:

- every code cell tagged ``build-it`` becomes a skeleton: imports, constants, each function's signature
  and docstring, and in place of its body a one-line hint and ``raise NotImplementedError``. The hint is
  the cell's metadata ``chainmark.hints[name]`` when the chapter gives one, else a default; a class keeps
  its header and docstring and each of its methods becomes a skeleton the same way;
- exercise solutions (the MyST ``solution-start`` ... ``solution-end`` blocks, prose and code) are left out;
  the exercises stay, as numbered headings;
- a cell right after the settings cell (before the first code cell without one) switches the checks to the participant edition
  (:func:`cmlab.teaching.workshop.participant_edition`): the cell tagged ``build-check`` after each Build it then
  says what differs, or "not written yet", and the chapter goes on with the package's version;
- the outputs are cleared, for the participant's own run, but for the paragraphs' (with ``--executed``, the
  build's executed chapters, they read with the book's numbers until the participant's run replaces them)
  and the settings cell's one line.

Everything else is as in the edition. Chapters mark what to blank with the two tags, so a new Build it needs
no change here; a chapter whose "## Build it" section lacks either tag is refused. ``--restore`` keeps the
book's Build it code (the test suite executes both versions); ``--zip`` also writes the notebooks into
one zip for handing out.
"""
from __future__ import annotations

import argparse
import ast
import sys
import zipfile
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import notebook_edition  # noqa: E402  (the edition the participant copy is made from)
from book_pipeline import toc_notebooks  # noqa: E402  (the tools' one reader of _toc.yml)
from notebooks import BADGE_MARK, SETTINGS_MARK  # noqa: E402  (the book's header conventions, one place)

ROOT = Path(__file__).resolve().parents[1]
BUILD_TAG = "build-it"        # a cell the participant writes (it becomes a skeleton)
CHECK_TAG = "build-check"     # the cell after a Build it that checks it against the package
BUILD_HEADING = "## Build it"
DEFAULT_HINT = "write the body from the docstring and the formulas above"
MODE_CELL = """\
# The participant edition: the check after each Build it says what differs from the package and lets the
# chapter go on with the package's version (in the book the same checks stop the chapter).
from cmlab.teaching.workshop import participant_edition

participant_edition()"""


class EditionError(ValueError):
    """A chapter cannot be turned into a participant copy (a Build it without its tags, ...)."""


def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


# --- skeletons ---------------------------------------------------------------------------------------------

def _stub_ranges(node: ast.AST, name_prefix: str, hints: dict, out: list) -> None:
    """Collect (first line, last line, indent, name, hint) of every body to replace, classes recursively."""
    for child in getattr(node, "body", []):
        if isinstance(child, ast.ClassDef):
            if ast.get_docstring(child) is None:
                raise EditionError(f"class {child.name} in a Build it cell needs a docstring (it stays as the hint)")
            _stub_ranges(child, f"{child.name}.", hints, out)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = name_prefix + child.name
            if ast.get_docstring(child) is None:
                raise EditionError(f"{name} in a Build it cell needs a docstring (it stays as the hint)")
            doc = child.body[0]
            indent = " " * child.body[0].col_offset
            if len(child.body) == 1:
                raise EditionError(f"{name} in a Build it cell has nothing but its docstring")
            out.append((doc.end_lineno + 1, child.end_lineno, indent, name,
                        hints.get(name, hints.get(child.name, DEFAULT_HINT))))


def skeleton(source: str, hints: dict | None = None) -> str:
    """The cell with every function's body replaced by a hint and ``raise NotImplementedError``."""
    tree = ast.parse(source)
    ranges: list = []
    _stub_ranges(tree, "", hints or {}, ranges)
    if not ranges:
        raise EditionError("a Build it cell defines no function or class for the participant to write")
    lines = source.splitlines()
    for first, last, indent, name, hint in sorted(ranges, reverse=True):
        lines[first - 1:last] = [f"{indent}# Build it: {hint}",
                                 f"{indent}raise NotImplementedError(\"{name} is not written yet\")"]
    return "\n".join(lines)


# --- one chapter -------------------------------------------------------------------------------------------

def build_sections(nb) -> list[tuple[str, list[int]]]:
    """Each "## Build it" section: its heading and the indices of its cells (up to the next "## ")."""
    sections: list[tuple[str, list[int]]] = []
    current: list[int] | None = None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            heading = next((l for l in cell.source.splitlines() if l.startswith("## ")), None)
            if heading is not None:
                current = None
                if heading.startswith(BUILD_HEADING):
                    current = []
                    sections.append((heading, current))
        if current is not None:
            current.append(i)
    return sections


def check_tags(nb, name: str = "chapter") -> None:
    """Refuse a chapter whose Build it lacks its tags, or whose tags stray outside a Build it."""
    inside: set[int] = set()
    for heading, cells in build_sections(nb):
        inside.update(cells)
        builds = [i for i in cells if BUILD_TAG in _tags(nb.cells[i])]
        checks = [i for i in cells if CHECK_TAG in _tags(nb.cells[i])]
        if not builds:
            raise EditionError(f"{name}: '{heading}' has no code cell tagged {BUILD_TAG!r} (what participants write)")
        if not checks or max(checks) < max(builds):
            raise EditionError(f"{name}: '{heading}' has no cell tagged {CHECK_TAG!r} after its last {BUILD_TAG!r} "
                               "cell (the check against the package)")
    for i, cell in enumerate(nb.cells):
        if _tags(cell) & {BUILD_TAG, CHECK_TAG} and i not in inside:
            raise EditionError(f"{name}: cell {i} is tagged {sorted(_tags(cell) & {BUILD_TAG, CHECK_TAG})} outside "
                               f"a '{BUILD_HEADING}' section")
        if BUILD_TAG in _tags(cell) and cell.cell_type != "code":
            raise EditionError(f"{name}: cell {i} is tagged {BUILD_TAG!r} but is not a code cell")


def participant_notebook(nb, name: str = "chapter", restore: bool = False, executed=None,
                         index: notebook_edition.BookIndex | None = None, docname: str | None = None):
    """The participant copy of one chapter notebook (``restore``: keep the book's Build it code), made from its
    notebook edition without solutions; ``executed`` is the chapter's executed copy (its paragraphs' numbers),
    ``docname`` its page in the book (default ``book/`` and the name's stem)."""
    check_tags(nb, name)
    docname = docname or f"book/{Path(name).stem}"
    try:
        nb = notebook_edition.edition_notebook(nb, executed, docname, index or notebook_edition.book_index(),
                                               settings_line="", solutions=False)
    except notebook_edition.EditionError as exc:
        raise EditionError(str(exc)) from exc
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if cell.metadata.get("chainmark", {}).get("edition") != "prose":
            cell.outputs, cell.execution_count = [], None
        if BUILD_TAG in _tags(cell) and not restore:
            try:
                cell.source = skeleton(cell.source, cell.metadata.get("chainmark", {}).get("hints", {}))
            except (EditionError, SyntaxError) as exc:
                raise EditionError(f"{name}: {exc}") from exc
    cells = nb.cells
    # the switch goes right after the settings cell (before the first code cell in a notebook without one)
    settings = next((i + 1 for i, c in enumerate(cells) if c.cell_type == "code"
                     and c.source == notebook_edition.SETTINGS_CELL),
                    next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells)))
    switch = nbformat.v4.new_code_cell(MODE_CELL)
    switch.pop("id", None)  # the chapters are nbformat 4.4, without cell ids
    cells.insert(settings, switch)
    nb.metadata["chainmark"] = {"edition": "participant" + (" (Build it restored)" if restore else "")}
    return nb


def write_edition(out_dir: Path, chapters: list[Path] | None = None, restore: bool = False,
                  zip_path: Path | None = None, executed: Path | None = None, root: Path = ROOT) -> list[Path]:
    """Write the participant copy of every chapter of the book at ``root`` into ``out_dir`` (and into
    ``zip_path``); their paths. ``executed``: the folder of the executed chapters (the build's
    ``jupyter_execute``, each at its path in the book), for the paragraphs' numbers."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    index = notebook_edition.book_index(root)
    for path in chapters or [root / nb for nb in toc_notebooks(root)]:
        page = path.resolve().relative_to(root.resolve())
        run = executed / page if executed is not None else None
        if run is not None and not run.exists():
            raise EditionError(f"no executed copy of {page} in {executed}: build the book first")
        nb = participant_notebook(nbformat.read(path, as_version=4), path.name, restore=restore,
                                  executed=nbformat.read(run, as_version=4) if run else None, index=index,
                                  docname=page.with_suffix("").as_posix())
        target = out_dir / path.name
        nbformat.write(nb, target)
        written.append(target)
    if zip_path is not None:
        zip_path.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
            for target in written:
                z.write(target, f"chainmark-participant/{target.name}")
            z.writestr("chainmark-participant/README.txt", _README)
    return written


_README = """\
ChainMark book: the participant edition

One notebook per chapter. Each chapter's "Build it" section leaves the code for you to write: the
functions are there with their signatures and docstrings, and their bodies say "Build it: ..." and raise
NotImplementedError. Write the body, then run the next cell: it checks your code against the chainmark
package and says what differs, or that it agrees. While a Build it is not written, or when it differs,
the chapter goes on with the package's version, so you can always run a chapter to its end.

The exercises are at the end of each chapter; their solutions are in the book.

Install: the book's README, section "A workshop laptop" (a clone of the book's repository, a virtual
environment, pip install, then `cmlab doctor`). Unzip this folder into the clone and open it:

    jupyter lab chainmark-participant/
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", nargs="?", type=Path, default=ROOT / "_build" / "participant")
    parser.add_argument("--zip", type=Path, default=None, help="also write the notebooks into this zip file")
    parser.add_argument("--restore", action="store_true", help="keep the book's Build it code (for testing)")
    parser.add_argument("--executed", type=Path, default=None,
                        help="the executed chapters (the build's _build/jupyter_execute): the paragraphs' numbers")
    args = parser.parse_args()
    try:
        written = write_edition(args.out_dir, restore=args.restore, zip_path=args.zip, executed=args.executed)
    except EditionError as exc:
        print(f"participant_edition: {exc}", file=sys.stderr)
        return 1
    print(f"participant_edition: {len(written)} notebooks in {args.out_dir}"
          + (f", zipped into {args.zip}" if args.zip else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
