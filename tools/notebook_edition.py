"""Write the notebook edition: the chapters as Colab, JupyterLab and GitHub show them, with no extension.

    python tools/notebook_edition.py [OUT_DIR] [--executed DIR] [--zip FILE]

The chapters are written for the site: MyST roles and directives (``{glue:text}``, ``{doc}``,
``{exercise}``, ...) and cell tags that the site's build reads. A notebook viewer renders Markdown cells as
plain Markdown, where all of that shows as raw markup, the numbers glued into the sentences appear nowhere,
and the bookkeeping cells the site hides are in plain view. Colab loads no Jupyter extension, so no renderer
can fix it there; this generator writes each chapter again in what every viewer renders
(default ``_build/edition/``):

- **Sentences with numbers.** A Markdown cell that cites a glued value becomes a cell whose code is hidden
  (Colab's form view, JupyterLab's ``source_hidden``) and whose output is the paragraph with the value in its
  sentence (:func:`cmlab.teaching.edition.show_paragraph`). The edition ships with the outputs of the build that
  wrote it (``--executed``: the executed chapters, the book's configuration), so it reads whole before it
  runs; a reader who runs it reads their own run's numbers, and a sentence their run does not bear out gets
  the claim's note under it. We chose hidden display cells over fixed prose with the numbers beside it: the
  sentence reads as the site's does, and the value is in it, on every machine.
- **Cross-references** become links to the site's page (``{doc}``, ``{ref}``, ``{numref}``); figure captions
  are kept, numbered as on the site, as a line under the figure; exercises become numbered headings;
  solutions become collapsed ``<details>`` blocks, their code cells collapsed; other admonitions become quotes.
  A directive or role without a rule here is refused, so new markup never reaches a reader raw.
- **The site's hidden cells** stay out of the reader's way: a cell the site removes is kept (the run needs its
  values and checks) with its code and output collapsed and its output dropped; a cell whose input the site
  hides keeps its output with its code collapsed; the settings cell is six short lines whose output is
  one plain line (``Settings.line``).

``--zip`` also writes the notebooks into one zip (the build puts it in the site, beside the participant
edition's).
"""
from __future__ import annotations

import argparse
import copy
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from book_pipeline import toc_entries  # noqa: E402  (the tools' one reader of _toc.yml)
from notebooks import BADGE_MARK, INSTALL_MARK, SETTINGS_MARK  # noqa: E402  (the chapters' header conventions)

ROOT = Path(__file__).resolve().parents[1]
GLUE_MIME = "application/papermill.record/"   # myst-nb's prefix for a value glued without display
EDITION_ZIP = "chainmark-notebook-edition.zip"  # inside _build/html, beside the participant edition

#: The edition's settings cell: what the book's settings cell says, in six short lines (chapter 0 explains each).
SETTINGS_CELL = """\
# Settings (chapter 0 explains each; None keeps the book's default). Change one, then run the chapter from the top.
from cmlab.harness import use_settings
from cmlab.teaching.edition import notebook_edition, show_paragraph

notebook_edition()  # the paragraphs below show this run's numbers
settings = use_settings(model=None, scale=None, key_file=None, runs_dir=None)
print(settings.line())"""

ADMONITIONS = {"note": "Note", "tip": "Tip", "hint": "Hint", "important": "Important", "warning": "Warning",
               "caution": "Caution", "attention": "Attention", "danger": "Danger", "error": "Error",
               "seealso": "See also", "admonition": None}
DIRECTIVE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<arg>.*)$")
OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$")
ROLE = re.compile(r"\{(?P<name>[a-z][\w:-]*)\}`(?P<body>[^`]*)`")
EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)
TITLE_MARK = "#@title"
PARAGRAPH = "show_paragraph"  # what a paragraph's cell calls (the settings cell imports it); no chapter may bind it


class EditionError(ValueError):
    """A chapter holds markup the edition has no rule for (or its executed copy does not match it)."""


# --- the book's index: titles, numbers, labels -------------------------------------------------------------

@dataclass
class BookIndex:
    """What a cross-reference needs: each page's title and number, each label's page, text and number."""

    site: str
    titles: dict[str, str] = field(default_factory=dict)      # docname -> title
    labels: dict[str, tuple[str, str]] = field(default_factory=dict)  # label -> (docname, text shown)
    prefixes: dict[str, str] = field(default_factory=dict)    # docname -> its chapter's "9." (or "")

    def url(self, docname: str, anchor: str = "") -> str:
        return f"{self.site}/{docname}.html" + (f"#{anchor}" if anchor else "")


def site_url(root: Path = ROOT) -> str:
    """The published site's address (``html.baseurl`` in ``_config.yml``), without a trailing slash."""
    config = yaml.safe_load((root / "_config.yml").read_text("utf-8"))
    url = (config.get("html") or {}).get("baseurl", "")
    if not url:
        raise EditionError("_config.yml has no html.baseurl: the edition's links need the site's address")
    return url.rstrip("/")


def _title(path: Path) -> str:
    if path.suffix == ".ipynb":
        first = nbformat.read(path, as_version=4).cells[0].source
    else:
        first = path.read_text("utf-8")
    heading = next((line for line in first.splitlines() if line.startswith("# ")), None)
    if heading is None:
        raise EditionError(f"{path.name} has no '# Title' line")
    return heading[2:].strip()


def book_index(root: Path = ROOT) -> BookIndex:
    """Titles, and every exercise's and figure's label with the number the site gives it.

    The site numbers chapters across its numbered parts and counts figures and exercises within a chapter,
    its sections included (``Fig. 9.3`` is the third figure of chapter 9's pages); pages outside the numbered
    parts number theirs from 1 on their own.
    """
    index = BookIndex(site_url(root))
    chapter = 0
    figures = exercises = 0
    prefix = ""
    for entry in toc_entries(root):
        path = next((p for p in (root / f"{entry.file}.ipynb", root / f"{entry.file}.md") if p.exists()), None)
        if path is None:
            continue
        index.titles[entry.file] = _title(path)
        if entry.depth <= 1:
            figures = exercises = 0
            if entry.numbered and entry.depth == 1:
                chapter += 1
                prefix = f"{chapter}."
            else:
                prefix = ""
        index.prefixes[entry.file] = prefix
        if path.suffix != ".ipynb":
            continue
        for cell in nbformat.read(path, as_version=4).cells:
            figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
            if cell.cell_type == "code" and figure.get("caption"):
                figures += 1
                if figure.get("name"):
                    index.labels[figure["name"]] = (entry.file, f"Figure {prefix}{figures}")
            if cell.cell_type == "markdown":
                for title, label in _exercises(cell.source):
                    exercises += 1
                    if label:
                        index.labels[label] = (entry.file, f"Exercise {prefix}{exercises}" +
                                               (f" ({title})" if title else ""))
    return index


def _exercises(text: str) -> list[tuple[str, str]]:
    """(title, label) of every exercise directive in a Markdown cell, in order."""
    found, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        m = DIRECTIVE.match(line)
        if m and m["name"] == "exercise":
            label = ""
            for option in lines[i + 1:]:
                o = OPTION.match(option)
                if not o:
                    break
                if o["key"] == "label":
                    label = o["value"].strip()
            found.append((m["arg"].strip(), label))
    return found


# --- MyST to Markdown --------------------------------------------------------------------------------------

@dataclass
class _Page:
    """Conversion state along one chapter: its name, its numbering and whether a solution is open."""

    docname: str
    index: BookIndex
    prefix: str = ""
    exercises: int = 0
    figures: int = 0
    solution: str | None = None     # the exercise whose solution is open (solutions span cells)
    solution_parts: int = 0
    solutions: bool = True          # False: leave every solution out (the participant edition)


def convert_roles(text: str, page: _Page) -> str:
    """Cross-references as links to the site's pages; ``{glue:text}`` roles stay for the paragraphs (:func:`prose_cell`)."""
    def one(match: re.Match) -> str:
        name, body = match["name"], match["body"]
        if name == "glue:text":
            return match.group(0)
        explicit = EXPLICIT.match(body)
        text_, target = (explicit["text"], explicit["target"].strip()) if explicit else ("", body.strip())
        if name == "doc":
            docname = target if "/" in target else f"{page.docname.rsplit('/', 1)[0]}/{target}"
            docname = docname.removesuffix(".ipynb").removesuffix(".md")
            if docname not in page.index.titles:
                raise EditionError(f"{page.docname}: {{doc}} to an unknown page {target!r}")
            return f"[{text_ or page.index.titles[docname]}]({page.index.url(docname)})"
        if name in ("ref", "numref"):
            if target not in page.index.labels:
                raise EditionError(f"{page.docname}: {{{name}}} to an unknown label {target!r}")
            docname, shown = page.index.labels[target]
            if name == "numref" and text_:
                number = shown.split(" ", 1)[1].split(" ", 1)[0]
                shown = " ".join(text_.replace("%s", number).split())
            elif text_:
                shown = " ".join(text_.split())
            return f"[{shown}]({page.index.url(docname, target)})"
        raise EditionError(f"{page.docname}: the role {{{name}}} has no rule in the notebook edition")

    return ROLE.sub(one, text)


def _open_solution(page: _Page) -> str:
    page.solution_parts += 1
    more = " (continued)" if page.solution_parts > 1 else ""
    return f"<details>\n<summary><b>Solution to {page.solution}{more}</b></summary>\n"


def convert_markdown(text: str, page: _Page) -> str:
    """One Markdown cell of a chapter in plain Jupyter Markdown (see the module's docstring for the rules)."""
    lines, out, i = text.splitlines(), [], 0
    opened_at = None                    # where this cell reopened a solution begun in an earlier cell
    began = 0                           # where the open solution's text begins in this cell
    if page.solution is not None and page.solutions:
        out.append(_open_solution(page))
        opened_at = len(out)

    def close() -> None:                # close the open solution (or drop a reopening that holds nothing)
        if not page.solutions:
            del out[began:]
        elif opened_at is not None and not "".join(out[opened_at:]).strip():
            del out[opened_at - 1:]
            page.solution_parts -= 1
        else:
            out.extend(["", "</details>"])
    while i < len(lines):
        m = DIRECTIVE.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        fence, name, arg = m["fence"], m["name"], m["arg"].strip()
        options, i = {}, i + 1
        while i < len(lines) and OPTION.match(lines[i]):
            o = OPTION.match(lines[i])
            options[o["key"]] = o["value"].strip()
            i += 1
        body = []
        while i < len(lines) and not (lines[i].strip() and set(lines[i].strip()) == {fence[0]}
                                      and len(lines[i].strip()) >= len(fence)):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise EditionError(f"{page.docname}: the {{{name}}} directive is not closed")
        i += 1
        inner = convert_markdown("\n".join(body), _Page(page.docname, page.index, page.prefix)) if body else ""
        if name == "exercise":
            page.exercises += 1
            title = f": {arg}" if arg else ""
            out += [f"#### Exercise {page.prefix}{page.exercises}{title}", "", inner.strip(), ""]
        elif name == "solution-start":
            label = arg.split()[0] if arg else ""
            shown = page.index.labels.get(label, (page.docname, "the exercise"))[1].split(" (")[0]
            page.solution, page.solution_parts = shown, 0
            began, opened_at = len(out), None
            if page.solutions:
                out.append(_open_solution(page))
        elif name == "solution-end":
            if page.solution is None:
                raise EditionError(f"{page.docname}: a solution-end without its solution-start")
            close()
            page.solution, opened_at = None, None
        elif name in ADMONITIONS:
            heading = ADMONITIONS[name] or arg or "Note"
            quoted = [f"> **{heading}.**", ">"] + [f"> {line}".rstrip() for line in inner.strip().splitlines()]
            out += quoted + [""]
        else:
            raise EditionError(f"{page.docname}: the directive {{{name}}} has no rule in the notebook edition")
    if page.solution is not None:
        close()
    return convert_roles("\n".join(out).strip("\n"), page)


# --- cells -------------------------------------------------------------------------------------------------

def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _hide(cell, *, source: bool = True, outputs: bool = False, title: str = "") -> None:
    """Collapse a code cell's source (and outputs) in JupyterLab and Colab; a Colab form title names it."""
    jupyter = cell.metadata.setdefault("jupyter", {})
    if source:
        jupyter["source_hidden"] = True
        if not cell.source.startswith("%%"):   # a cell magic must stay the first line
            cell.source = f"{TITLE_MARK} {title}".rstrip() + "\n" + cell.source
            cell.metadata["cellView"] = "form"
    if outputs:
        jupyter["outputs_hidden"] = True


def _glued_values(executed) -> dict[str, str]:
    """Every value the executed chapter glued: name -> its ``text/plain``."""
    values = {}
    for cell in executed.cells:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None:
                data = output.get("data", {})
                values[name] = data.get(GLUE_MIME + "text/plain", data.get("text/plain", ""))
    return values


def _without_glue_records(outputs: list) -> list:
    return [o for o in outputs if "scrapbook" not in o.get("metadata", {})]


def prose_cell(markdown: str, values: dict[str, str]):
    """A paragraph with glued numbers as a display cell: hidden code, the paragraph filled as its output."""
    from cmlab.teaching.edition import fill

    cell = nbformat.v4.new_code_cell(f"{PARAGRAPH}({markdown!r})")
    cell.pop("id", None)
    _hide(cell, title="")
    cell.metadata["chainmark"] = {"edition": "prose"}
    filled = fill(markdown, values)
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": filled, "text/plain": filled})]
    return cell


def _markdown_cell(text: str, values: dict[str, str], page: _Page, strict: bool = True):
    from cmlab.teaching.edition import GLUE_ROLE

    if GLUE_ROLE.search(text):
        missing = sorted({m.group(1) for m in GLUE_ROLE.finditer(text)} - set(values))
        if missing and strict:
            raise EditionError(f"{page.docname}: the executed chapter glued no value for {', '.join(missing)}")
        return prose_cell(text, values)
    cell = nbformat.v4.new_markdown_cell(text)
    cell.pop("id", None)
    return cell


def _settings_line() -> str:
    from cmlab.harness.settings import get_settings

    return get_settings().line()


def edition_notebook(source, executed, docname: str, index: BookIndex, settings_line: str | None = None,
                     solutions: bool = True):
    """The edition of one chapter from its source notebook and its executed copy (the same cells, run).

    ``executed`` None writes the edition without outputs (a paragraph then says which of its values the
    reader's run has not computed yet); ``solutions=False`` leaves every exercise's solution out, its prose
    and its code (the participant edition)."""
    if executed is None:
        executed = copy.deepcopy(source)
        for cell in executed.cells:
            cell["outputs"] = []
    if len(source.cells) != len(executed.cells):
        raise EditionError(f"{docname}: the executed copy has {len(executed.cells)} cells, the chapter "
                           f"{len(source.cells)}: build the book again")
    bound = [c for c in source.cells if c.cell_type == "code" and re.search(rf"\b{PARAGRAPH}\b", c.source)]
    if bound:
        raise EditionError(f"{docname}: a code cell names {PARAGRAPH}, which the edition's paragraphs call")
    page = _Page(docname, index, index.prefixes.get(docname, ""), solutions=solutions)
    values = _glued_values(executed)
    strict = any(cell.get("outputs") for cell in executed.cells)   # a run's copy must have glued every value
    cells = []
    for number, (cell, run) in enumerate(zip(source.cells, executed.cells)):
        if cell.cell_type == "markdown":
            text = cell.source
            if number == 0:
                text = "\n".join(line for line in text.splitlines() if BADGE_MARK not in line)
                title, _, rest = text.partition("\n")
                text = (f"{title}\n\n*The notebook edition of the ChainMark book: "
                        f"[read this page on the site]({index.url(docname)}).*\n\n{rest.strip()}").strip()
            converted = convert_markdown(text, page)
            if converted.strip():
                cells.append(_markdown_cell(converted, values, page, strict))
            continue
        if cell.cell_type != "code":
            cells.append(copy.deepcopy(cell))
            continue
        out = copy.deepcopy(cell)
        out.pop("id", None)
        out.outputs = _without_glue_records(run.get("outputs", []))
        out.execution_count = run.get("execution_count")
        tags = _tags(cell)
        if cell.source.startswith(SETTINGS_MARK):
            out.source = SETTINGS_CELL
            line = settings_line if settings_line is not None else _settings_line()
            out.outputs = [nbformat.v4.new_output("stream", name="stdout", text=line + "\n")]
            out.metadata.pop("tags", None)
        elif cell.source.startswith(INSTALL_MARK):
            out.outputs = []
            _hide(out, title="Colab only: install the chainmark package")
        elif page.solution is not None:
            if not solutions:
                continue
            _hide(out, outputs=True, title=f"Solution to {page.solution} (code)")
        elif "remove-cell" in tags:
            out.outputs = []
            _hide(out, outputs=True, title="Hidden on the site: it computes and checks what the text says")
        elif "hide-cell" in tags:
            _hide(out, outputs=True)
        elif "remove-output" in tags:
            out.outputs = []
            _hide(out, source=False, outputs=True)
        elif tags & {"remove-input", "hide-input"}:
            _hide(out)
        cells.append(out)
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
        if figure.get("caption"):
            page.figures += 1
            caption = convert_roles(figure["caption"], page)
            cells.append(_markdown_cell(f"**Figure {page.prefix}{page.figures}.** {caption}", values, page, strict))
    nb = copy.deepcopy(source)
    nb.cells = cells
    nb.metadata["chainmark"] = {"edition": "notebook"}
    nb.metadata["colab"] = {"name": Path(docname).name + ".ipynb", "toc_visible": True}
    return nb


# --- the edition -------------------------------------------------------------------------------------------

def write_edition(out_dir: Path, executed: Path, zip_path: Path | None = None, root: Path = ROOT) -> list[Path]:
    """Write the edition of every chapter into ``out_dir`` (and into ``zip_path``); their paths."""
    index = book_index(root)
    line = _settings_line()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for entry in toc_entries(root):
        path = entry.notebook(root)
        if path is None:
            continue
        run_path = executed / f"{entry.file}.ipynb"
        if not run_path.exists():
            raise EditionError(f"no executed copy of {entry.file} in {executed}: build the book first")
        nb = edition_notebook(nbformat.read(path, as_version=4), nbformat.read(run_path, as_version=4),
                              entry.file, index, settings_line=line)
        target = out_dir / path.name
        nbformat.write(nb, target)
        written.append(target)
    if zip_path is not None:
        zip_path.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
            for target in written:
                z.write(target, f"chainmark-notebooks/{target.name}")
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", nargs="?", type=Path, default=ROOT / "_build" / "edition")
    parser.add_argument("--executed", type=Path, default=ROOT / "_build" / "jupyter_execute",
                        help="the executed chapters (the site's build writes them here)")
    parser.add_argument("--zip", type=Path, default=None, help="also write the notebooks into this zip file")
    args = parser.parse_args()
    try:
        written = write_edition(args.out_dir, args.executed, zip_path=args.zip)
    except EditionError as exc:
        print(f"notebook_edition: {exc}", file=sys.stderr)
        return 1
    print(f"notebook_edition: {len(written)} notebooks in {args.out_dir}" + (f", zipped into {args.zip}"
                                                                               if args.zip else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
