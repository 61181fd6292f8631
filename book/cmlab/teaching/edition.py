"""The notebook edition's paragraphs: the book's sentences with this run's numbers in them.

On the site a computed number stands inside its sentence through myst-nb's ``{glue:text}`` role. Colab, a
plain JupyterLab and GitHub render a Markdown cell as it is, where the role shows as raw markup and the
number nowhere. The notebook edition (``tools/notebook_edition.py`` writes it from the chapters) therefore
turns every paragraph that cites a number into a cell whose code is hidden and whose output is the
paragraph: :func:`show_paragraph` fills each role with the value this kernel glued (:func:`cmlab.teaching.glue`
remembers every value it hands to the prose), so a reader who runs the chapter with their own key or model
reads their own numbers, exactly formatted as the site formats the book's. A sentence whose claim this run
did not bear out (a soft run) gets the claim's note right below it.

The edition's settings cell calls :func:`notebook_edition`: from then on ``glue`` stays silent (outside the
site's build it otherwise prints each value, so that a reader of the plain chapter still sees the number).

Example::

    from cmlab.teaching import glue
    from cmlab.teaching.edition import show_paragraph

    glue("n_texts", 1200)
    show_paragraph("On {glue:text}`n_texts:,` texts the detector flagged none.")   # On 1,200 texts ...
"""
from __future__ import annotations

import re
from ast import literal_eval
from typing import Any, Mapping

__all__ = ["GLUE_ROLE", "fill", "notebook_edition", "remember", "show_paragraph"]

#: A ``{glue:text}`name:format``` role as the chapters write it (name, then an optional format spec).
GLUE_ROLE = re.compile(r"\{glue:text\}`([^`:]+)(?::([^`]*))?`")

_glued: dict[str, str] = {}       # name -> the value's text/plain, as myst-nb stores a glued value
_quiet = False                    # the edition shows the numbers in its paragraphs: glue prints nothing


def _plain_text(value: Any) -> str:
    """The value's ``text/plain`` as IPython writes it (its pretty printer; what myst-nb stores), else ``repr``."""
    try:
        from IPython.lib.pretty import pretty
    except ImportError:
        return repr(value)
    return pretty(value)


def remember(name: str, value: Any) -> bool:
    """Keep a glued value for the paragraphs (:func:`cmlab.teaching.glue` calls it); True in the edition, where
    ``glue`` then prints nothing."""
    _glued[name] = _plain_text(value)
    return _quiet


def _format_glued(text: str, spec: str | None) -> str:
    """Format a glued value's ``text/plain`` by ``spec`` as the site does (myst-nb's rule, so both agree).

    The text is read back as a Python literal when it is one; the spec's last character decides the type
    (``d``: integer, ``f``/``e``/``g``/``%``: float, ``s`` or none: text).

    >>> _format_glued("0.12345", ".1%"), _format_glued("1200", ","), _format_glued("'kgw'", None)
    ('12.3%', '1,200', 'kgw')
    """
    try:
        value = literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    spec = "s" if spec is None else spec
    if spec == "":
        return str(value)
    kind = spec[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, spec)


def fill(markdown: str, values: Mapping[str, str], missing: str = "**[{name}: not computed yet, run the cells "
         "above]**") -> str:
    """The paragraph with every ``{glue:text}`` role replaced by its formatted value from ``values``.

    ``values`` maps a name to its ``text/plain``; a name it lacks becomes ``missing`` (the role's name in
    it), so a paragraph read before the cells that compute it says so instead of showing markup.

    >>> fill("z = {glue:text}`z:.2f`, n = {glue:text}`n`", {"z": "3.14159", "n": "40"})
    'z = 3.14, n = 40'
    """
    def one(match: re.Match) -> str:
        name, spec = match.group(1), match.group(2)
        if name not in values:
            return missing.format(name=name)
        return _format_glued(values[name], spec)

    return GLUE_ROLE.sub(one, markdown)


def notebook_edition(on: bool = True) -> None:
    """Switch this kernel to the notebook edition: ``glue`` prints nothing, the paragraphs show the values."""
    global _quiet
    from cmlab.teaching.claims import notes_under_sentences

    _quiet = bool(on)
    notes_under_sentences(_quiet)


def show_paragraph(markdown: str) -> None:
    """Show one paragraph of the book with this run's glued numbers, and the note of any claim checked since
    the previous paragraph that this run did not bear out (its sentence is this paragraph's).
    """
    from IPython.display import HTML, Markdown, display

    from cmlab.teaching.claims import pending_notes

    display(Markdown(fill(markdown, _glued)))
    for note in pending_notes():
        display(HTML(note))
