"""What an executed chapter shows a reader, checked: teaching code and its output, no bookkeeping.

A visible code cell of the built page shows teaching code and what it displays.
This lint reads an executed notebook (``_build/jupyter_execute/book/*.ipynb``)
and reports, cell by cell:

- a displayed result that is a bare scalar, a bare ``dict`` or a string repr
  (``1.6252739128878808``, ``{'tpr': ...}``, ``'1.1% [0.6, 1.8]'``);
- a pandas ``dtype: ...`` footer (a Series printed instead of shown as a table);
- a ``glue(...)`` call in a visible cell (handing a number to the prose is
  bookkeeping: it belongs in a hidden cell);
- ``claim(`` in a visible cell (claims are checked in hidden cells);
- a cell that mixes ``print()`` with rich output (HTML or an image): the book
  merges a cell's streams into one block above its displays, so a printed label
  ends up apart from the panel it names; the label goes into the figure or the HTML;
- an absolute path of the machine that built the page (``/tmp/...``, ``/home/...``);
- a figure cell (``mystnb.figure`` metadata) that shows more than its image:
  MyST-NB would wrap every output of the cell in the same numbered figure.

Figures are checked on the built site (:func:`figure_problems`): every image a
chapter's code draws sits in a numbered figure with a caption and alt text that
describes it (not its file path).

    .venv/bin/python tests/output_hygiene.py _build/jupyter_execute/book/*.ipynb
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import nbformat

#: Tags that hide a cell's code from the page (its output may still show).
CODE_HIDDEN = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
#: Tags that keep a cell's output off the page.
OUTPUT_HIDDEN = {"remove-cell", "remove-output"}
RICH = ("text/html", "image/png", "image/svg+xml", "image/jpeg", "text/markdown", "text/latex")

_SCALAR = re.compile(r"^\(?-?(np\.\w+\()?[-+]?(\d[\d_,]*\.?\d*(e[-+]?\d+)?|nan|inf|True|False|None)\)?,?\)?$", re.I)
_DTYPE = re.compile(r"^(Name: .*, )?(Length: \d+, )?dtype: \w+", re.M)
_MAGIC = re.compile(r"^\s*[%!]")
#: An absolute path on the machine that built the page (a reader's machine has other ones).
_BUILDER_PATH = re.compile(r"(?<![\w.])/(tmp|home|root|work|Users|var/folders)/[\w.-]+")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def bare_result(text: str) -> str | None:
    """Why a plain-text result is raw output (a scalar, a dict, a string repr), or None."""
    t = text.strip()
    if not t:
        return None
    if _SCALAR.match(t):
        return "a bare scalar"
    if t[0] == "{" and t[-1] == "}":
        return "a bare dict"
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return "a string repr"
    try:
        value = ast.literal_eval(t)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, tuple):
        return "a bare tuple"
    if isinstance(value, list):
        return "a bare list"
    return None


def glue_calls(source: str) -> int:
    """How many ``glue(...)`` calls a cell's code makes (imports of ``glue`` do not count)."""
    code = "\n".join("" if _MAGIC.match(line) else line for line in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return 0
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Call)
               and getattr(node.func, "id", getattr(node.func, "attr", "")) == "glue")


def problems(nb: nbformat.NotebookNode) -> list[str]:
    """Every hygiene problem of an executed notebook, as 'cell N: what'."""
    found: list[str] = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = _tags(cell)
        if "remove-cell" in tags:
            continue
        if not tags & CODE_HIDDEN:
            if glue_calls(cell.source):
                found.append(f"cell {index}: glue() in a visible cell")
            if re.search(r"\bclaim\(", cell.source):
                found.append(f"cell {index}: claim( in a visible cell")
        if tags & OUTPUT_HIDDEN:
            continue
        outputs = cell.get("outputs", [])
        printed = any(o.get("output_type") == "stream" and o.get("name") == "stdout" and _text(o.get("text")).strip()
                      for o in outputs)
        rich = any(o.get("output_type") in ("display_data", "execute_result")
                   and any(m in o.get("data", {}) for m in RICH) for o in outputs)
        if printed and rich:
            found.append(f"cell {index}: print() beside rich output (the label ends up apart from its panel)")
        if cell.get("metadata", {}).get("mystnb", {}).get("figure"):
            shown = [o for o in outputs if o.get("output_type") in ("display_data", "execute_result", "stream")]
            if len(shown) != 1 or "image/png" not in shown[0].get("data", {}):
                found.append(f"cell {index}: a figure cell must show its one image and nothing else "
                             f"(every output of the cell would take the figure's caption)")
        # stderr never reaches the page (_config.yml: stderr_output: remove-warn)
        shown_text = " ".join(_text(o.get("text")) + _text(o.get("data", {}).get("text/html"))
                              + _text(o.get("data", {}).get("text/plain"))
                              for o in outputs if o.get("name") != "stderr")
        path = _BUILDER_PATH.search(shown_text)
        if path:
            found.append(f"cell {index}: the builder's path {path.group(0)!r} on the page")
        for o in outputs:
            if o.get("output_type") == "stream":
                if _DTYPE.search(_text(o.get("text"))):
                    found.append(f"cell {index}: a pandas dtype footer in printed output")
            elif o.get("output_type") == "execute_result":
                data = o.get("data", {})
                if any(m in data for m in RICH):
                    continue
                plain = _text(data.get("text/plain"))
                why = bare_result(plain)
                if why:
                    found.append(f"cell {index}: {why} as the cell's result ({plain.strip()[:60]!r})")
                elif _DTYPE.search(plain):
                    found.append(f"cell {index}: a pandas dtype footer ({plain.strip().splitlines()[-1][:60]!r})")
    return found


def figure_problems(page_html: str) -> list[str]:
    """Images drawn by code (``_images/...``) that lack a numbered caption or real alt text."""
    from bs4 import BeautifulSoup

    found = []
    for img in BeautifulSoup(page_html, "html.parser").find_all("img"):
        src = img.get("src", "")
        if img.find_parent(class_="cell_output") is None:
            continue  # drawn by no code cell: a badge or a logo, not a figure
        alt = (img.get("alt") or "").strip()
        figure = img.find_parent("figure")
        number = figure.find(class_="caption-number") if figure else None
        text = figure.find(class_="caption-text") if figure else None
        name = src.rsplit("/", 1)[-1][:16]
        if number is None or text is None or not text.get_text(strip=True):
            found.append(f"{name}: not a numbered figure with a caption")
        if not alt or "_images/" in alt or re.search(r"\.(png|svg|jpe?g)$", alt, re.I) or len(alt.split()) < 4:
            found.append(f"{name}: alt text {alt[:40]!r} does not describe the image")
    return found


def main(paths: list[str]) -> int:
    bad = 0
    for p in paths:
        found = problems(nbformat.read(p, as_version=4))
        bad += len(found)
        print(f"{p}: {len(found)} problem(s)")
        for line in found:
            print("   " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or sorted(str(p) for p in Path("_build/jupyter_execute/book").glob("*.ipynb"))))
