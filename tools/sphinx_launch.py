"""A Sphinx extension of the book: launch buttons (Colab) only on pages that are notebooks.

sphinx-book-theme adds its launch buttons to every page it can execute, and
that includes a Markdown page with code cells, such as the Teaching page: its
Colab button opened ``book/teaching.md`` in Colab, where it is no notebook a
reader runs. After the theme has added the buttons (``html-page-context`` at
its priority 501), this removes them from every page whose source is not an
``.ipynb`` file. ``_config.yml`` loads it (``sphinx.local_extensions``).
"""
from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx

#: The label sphinx-book-theme gives its group of launch buttons in ``header_buttons``.
LAUNCH_LABEL = "launch-buttons"


def drop_launch_buttons(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """Remove the launch buttons from a page whose source is not a notebook."""
    source = str(app.env.doc2path(pagename)) if pagename in app.env.all_docs else ""
    if source.endswith(".ipynb") or "header_buttons" not in context:
        return
    context["header_buttons"] = [b for b in context["header_buttons"] if b.get("label") != LAUNCH_LABEL]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("html-page-context", drop_launch_buttons, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
