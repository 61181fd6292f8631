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
- an import of a bookkeeping helper (``claim``, ``claims_report``, ``glue``,
  ``banner``) in a visible cell: the reader sees only what visible code uses;
- widget residue: a widget view that is a progress bar (tqdm's, transformers')
  or that has no widget behind it; on the static site each is an empty box;
- a banner word a reader cannot act on ("claims: strict", seeds, torch's version):
  the banner names only what differs from the page, in the reader's terms;
- a cell that mixes ``print()`` with rich output (HTML or an image): the book
  merges a cell's streams into one block above its displays, so a printed label
  ends up apart from the panel it names; the label goes into the figure or the HTML;
- an absolute path of the machine that built the page (``/tmp/...``, ``/home/...``);
- a figure cell (``mystnb.figure`` metadata) that shows more than its image:
  MyST-NB would wrap every output of the cell in the same numbered figure.

Figures are checked on the built site (:func:`figure_problems`): every image a
chapter's code draws sits in a numbered figure with a caption and alt text that
describes it (not its file path); :func:`widget_problems` finds progress bars
and empty widget views in a built page's HTML.

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


#: The book's bookkeeping helpers: imported in a hidden cell, never where the reader sees the code.
BOOKKEEPING = {"claim", "claims_report", "glue", "banner"}
#: The widget models of a progress bar (tqdm.auto draws an HBox of an HTML label, a progress and an HTML count).
PROGRESS_MODELS = {"FloatProgressModel", "IntProgressModel"}
#: A progress bar's text: "Loading weights:  40%|####      | 109/272 [00:01<00:02]" or an empty "0/0".
_PROGRESS_TEXT = re.compile(r"\d+%\||\b\d+/\d+ \[|\b0/0\b|it/s\]|s/it\]")
#: Words of a run's banner that a reader cannot act on (the claims machinery, versions, internal seeds).
UNACTIONABLE = ("claims", "strict", "soft", "torch", "dtype", "seeds", "not loaded")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_BANNER = re.compile(r'class="cm-banner"|<b>model</b>:.*<b>key</b>:', re.S)


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


def bookkeeping_imports(source: str) -> list[str]:
    """The bookkeeping helpers (:data:`BOOKKEEPING`) a cell's code imports, in order."""
    code = "\n".join("" if _MAGIC.match(line) else line for line in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            for alias in node.names if alias.name in BOOKKEEPING]


def _is_progress(model_id: str, state: dict) -> bool:
    """Whether the widget ``model_id`` is a progress bar, or a box holding one (tqdm.auto's HBox)."""
    model = state.get(model_id, {})
    if model.get("model_name") in PROGRESS_MODELS:
        return True
    children = model.get("state", {}).get("children", [])
    return any(_is_progress(str(c).removeprefix("IPY_MODEL_"), state) for c in children)


def widget_residue(output: dict, state: dict) -> str | None:
    """Why a cell's output is widget residue (a progress bar, an empty view), or None."""
    view = output.get("data", {}).get(WIDGET_VIEW)
    if view is None:
        return None
    plain = _text(output.get("data", {}).get("text/plain")).strip()
    model_id = str(view.get("model_id", "")) if isinstance(view, dict) else ""
    if _PROGRESS_TEXT.search(plain) or (model_id and _is_progress(model_id, state)):
        return f"a progress bar widget ({plain[:50]!r}): an empty box on the static site"
    if not plain or (state and model_id not in state):
        return "a widget view with nothing behind it: an empty box on the static site"
    return None


def banner_words(shown: str) -> list[str]:
    """The words a run's banner shows that a reader cannot act on (:data:`UNACTIONABLE`); [] if not a banner."""
    if not _BANNER.search(shown):
        return []
    return [w for w in UNACTIONABLE if re.search(rf"\b{w}\b", shown, re.I)]


def problems(nb: nbformat.NotebookNode) -> list[str]:
    """Every hygiene problem of an executed notebook, as 'cell N: what'."""
    found: list[str] = []
    state = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = _tags(cell)
        if "remove-cell" in tags:
            continue
        if not tags & CODE_HIDDEN:
            imported = bookkeeping_imports(cell.source)
            if imported:
                found.append(f"cell {index}: a visible import of {', '.join(imported)} (bookkeeping: "
                             "import it in a hidden cell)")
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
        words = banner_words(shown_text)
        if words:
            found.append(f"cell {index}: the banner shows {', '.join(words)} (words a reader cannot act on)")
        for o in outputs:
            why = widget_residue(o, state)
            if why:
                found.append(f"cell {index}: {why}")
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


def widget_problems(page_html: str) -> list[str]:
    """Widget residue on a built page: views of progress bars, views with no widget state, tqdm's text."""
    from bs4 import BeautifulSoup
    import json

    soup = BeautifulSoup(page_html, "html.parser")
    state: dict = {}
    for script in soup.find_all("script", type=WIDGET_STATE):
        try:
            state.update(json.loads(script.string or "{}").get("state", {}))
        except ValueError:
            continue
    found = []
    for script in soup.find_all("script", type=WIDGET_VIEW):
        try:
            model_id = str(json.loads(script.string or "{}").get("model_id", ""))
        except ValueError:
            model_id = ""
        if model_id and _is_progress(model_id, state):
            found.append(f"widget {model_id[:8]}: a progress bar (an empty box on the static site)")
        elif model_id not in state:
            found.append(f"widget {model_id[:8] or '?'}: a view with no widget state (an empty box)")
    for output in soup.find_all(class_="cell_output"):
        text = output.get_text(" ", strip=True)
        if _PROGRESS_TEXT.search(text) and re.search(r"\d+%\|", text):
            found.append(f"a progress bar's text on the page ({text[:50]!r})")
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
