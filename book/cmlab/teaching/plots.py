"""Shared presentation helpers: one plot theme, source listings, coloured tokens.

Everything here returns objects that render both on the static site (MyST-NB
stores their HTML) and in a live notebook or Colab.
"""
from __future__ import annotations

import html
import inspect
from typing import Any, Sequence

__all__ = ["STATE_COLOURS", "attack_style", "banner", "glue", "set_theme", "show_source", "show_tokens", "state_colour",
           "tokens_html"]

#: One colour per state: Okabe and Ito's colour-blind-safe palette (without its
#: black), then four of Paul Tol's for S > 7. The first five stay apart under
#: simulated deuteranopia, protanopia and tritanopia (tests/test_viz.py), and
#: every token tile also prints its state's digit, so colour never carries the
#: state alone.
STATE_COLOURS = [
    "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7",
    "#882255", "#44AA99", "#999933", "#AA4499", "#888888",
]
#: The colour of a legal (forced) step's arrow: black, which no state uses.
_LEGAL_STEP_COLOUR = "#000000"

#: One colour (Okabe-Ito) and one marker per attack, for every figure of the book, so an
#: attack looks the same in every chapter. "null" is unwatermarked text under the same attack.
_ATTACK_STYLE = {
    "substitution": ("#0072B2", "o"),
    "deletion": ("#E69F00", "v"),
    "insertion": ("#009E73", "^"),
    "paraphrase": ("#CC79A7", "D"),
    "back-translation": ("#D55E00", "s"),
    "null": ("#56B4E9", "X"),
}


def attack_style(name: str) -> tuple[str, str]:
    """Colour and marker of an attack; a labelled variant ("back-translation (fr)") is drawn
    like its family."""
    family = str(name).split(" (")[0]
    if family not in _ATTACK_STYLE:
        raise ValueError(f"no style for attack {name!r}; known: {', '.join(_ATTACK_STYLE)}")
    return _ATTACK_STYLE[family]


def state_colour(state: int) -> str:
    """Colour of a state; cycles through the palette for large S."""
    return STATE_COLOURS[int(state) % len(STATE_COLOURS)]


def set_theme() -> None:
    """The book's one seaborn/matplotlib theme, and Series shown as tables (call once per chapter)."""
    import matplotlib as mpl
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    mpl.rcParams.update({
        "figure.figsize": (7.0, 4.0),
        "figure.dpi": 100,
        "savefig.dpi": 120,
        "axes.titleweight": "bold",
        "axes.spines.top": False,
        "axes.spines.right": False,
    })
    _series_as_tables()


def _series_html(series: Any) -> str:
    """A pandas Series as the book shows it: a two-column table (its index, its values), no dtype footer."""
    return series.to_frame("" if series.name is None else series.name)._repr_html_()


def _series_as_tables() -> None:
    """In a notebook, show every pandas Series as a table, like a DataFrame (no ``dtype:`` footer), floats with
    four decimals unless a table formats its own, and cells up to 120 characters before they are cut."""
    try:
        import pandas as pd
        from IPython import get_ipython
    except ImportError:
        return
    pd.set_option("display.precision", 4)
    pd.set_option("styler.format.precision", 4)
    pd.set_option("display.max_colwidth", 120)
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(pd.Series, _series_html)


def _source_html(obj: Any) -> str:
    """Highlighted HTML of the real source code of a package object."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    code = inspect.getsource(obj)
    formatter = HtmlFormatter(noclasses=True, style="friendly", nowrap=False)
    where = f"{obj.__module__}.{obj.__qualname__}" if hasattr(obj, "__qualname__") else obj.__name__
    body = highlight(code, PythonLexer(), formatter)
    return (
        f'<div class="cm-source"><div style="font-size:0.8em;color:#666">'
        f"source: <code>{html.escape(where)}</code></div>"
        f'<div style="overflow-x:auto;font-size:0.85em">{body}</div></div>'
    )


def show_source(obj: Any) -> Any:
    """Display the real source of a package function or class, highlighted."""
    from IPython.display import HTML

    return HTML(_source_html(obj))


def glue(name: str, value: Any) -> Any:
    """Hand a computed value to the page's prose: a Markdown cell cites it as {glue:text}`name`.

    On the book's site myst-nb stores the value and prints it inside the sentence (nothing
    shows in the code cell). The value is also kept for the notebook edition, whose paragraphs
    show it in their sentence (:func:`cmlab.teaching.edition.prose`). Where myst-nb is not
    installed (Colab) and the notebook is not the edition, the value is printed as the cell's
    output instead, so the reader still sees the number next to the prose.
    Returns the value, so a cell can glue and use it in one line.
    """
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()  # numpy/torch scalars: a plain repr, so {glue:text}`name:.2f` can format it
    from cmlab.teaching.edition import remember

    quiet = remember(name, value)  # the notebook edition's paragraphs show it (cmlab.teaching.edition)
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        if not quiet:
            print(f"{name} = {value}")
    else:
        myst_glue(name, value, display=False)
    return value


#: The HTML class of the banner's line (the site lint finds the banner by it).
_BANNER_CLASS = "cm-banner"


def _run_differences(model: Any = None) -> list[str]:
    """How this run differs from the page's configuration, in words a reader can act on; empty when it does not.

    The page's configuration is the book's (:func:`cmlab.teaching.claims.book_configuration`): the public
    teaching key, the embedded model, the default scale and a CPU. ``model`` (else the last model
    :func:`cmlab.harness.models.load_model` returned) names the device a GPU run is on.
    """
    from chainmark.auditor.keyfiles import book_key, book_key_source
    from chainmark.keys import key_fingerprint
    from cmlab.harness.models import last_loaded
    from cmlab.harness.settings import get_settings
    from cmlab.teaching.claims import book_configuration

    config, s = book_configuration(), get_settings()
    parts = []
    if not config["teaching key"]:
        parts.append(f"your own key (fingerprint {key_fingerprint(book_key())}, from the {book_key_source()})")
    if not config["embedded model"]:
        parts.append(f"the model {s.model}")
    if not config["default scale"]:
        parts.append(f"the {s.scale} scale")
    if not config["CPU"]:
        device = str(getattr(model, "device", "") or last_loaded().get("device", "") or s.device)
        gpu = ""
        try:
            import torch

            if device.startswith("cuda") and torch.cuda.is_available():
                index = torch.device(device).index
                gpu = f" ({torch.cuda.get_device_name(0 if index is None else index)})"
        except Exception:  # noqa: BLE001 - the line names the device without the GPU's name then
            gpu = ""
        parts.append(f"a GPU{gpu}")
    return parts


def banner(model: Any = None) -> Any:
    """One short line where this run differs from the page's configuration; ``None`` (nothing shown) otherwise.

    The page was built with the public teaching key, the embedded model, the default scale and a CPU. A run
    with any other is told so once, at the top of the chapter, in words it can act on (its key's
    fingerprint, never the key); a run like the page's sees nothing.
    """
    parts = _run_differences(model)
    if not parts:
        return None
    from IPython.display import HTML

    line = ("This run uses " + ", ".join(parts) + ", not this page's settings: its numbers are your run's, "
            "and a sentence your run does not bear out is marked where it stands.")
    return HTML(f'<p class="{_BANNER_CLASS}" style="padding:6px 10px;background:#f2f6fc;'
                f'border-left:4px solid #1F6AD1;font-size:0.9em">{html.escape(line)}</p>')


def tokens_html(
    tokens: Sequence[str],
    states: Sequence[int] | None = None,
    gated: Sequence[bool] | None = None,
    legend_S: int | None = None,
    title: str | None = None,
) -> str:
    """Tokens as coloured tiles: colour and digit = state, underline + black arrow = gated step.

    ``gated[i]`` marks that token ``i`` was forced by the watermark; the arrow
    drawn before it shows the forced step of the walk. ``title`` heads the panel
    (so a label stays with the tiles it names).
    """
    parts = []
    for i, tok in enumerate(tokens):
        text = html.escape(tok).replace("\n", "↵")
        if not text.strip():
            text = text.replace(" ", "&nbsp;") or "&nbsp;"
        style = "padding:1px 2px;margin:1px;border-radius:3px;display:inline-block;"
        if states is not None:
            style += f"background:{state_colour(states[i])}55;border:1px solid {state_colour(states[i])}aa;"
        hover = f"state {states[i]}" if states is not None else ""
        digit = (f'<sub style="font-size:0.7em;color:#333;margin-left:1px">{int(states[i])}</sub>'
                 if states is not None else "")
        arrow = ""
        if gated is not None and gated[i]:
            style += "text-decoration:underline;font-weight:600;"
            arrow = f'<span style="color:{_LEGAL_STEP_COLOUR}">&#8641;</span>'
            hover += " (gated)"
        parts.append(f'{arrow}<span title="{hover}" style="{style}">{text}{digit}</span>')
    out = '<div style="line-height:2.0;font-family:monospace;font-size:0.9em">' + "".join(parts) + "</div>"
    if title:
        out = f'<div style="font-weight:600;margin-top:6px">{html.escape(title)}</div>' + out
    if legend_S:
        legend = "".join(
            f'<span style="padding:1px 6px;margin:1px;border-radius:3px;background:{state_colour(s)}55;'
            f'border:1px solid {state_colour(s)}aa">s{s}</span>' for s in range(legend_S)
        )
        out += f'<div style="font-size:0.8em;margin-top:4px">states: {legend}</div>'
    return out


def show_tokens(*args: Any, **kwargs: Any) -> Any:
    """Display :func:`tokens_html` in a notebook."""
    from IPython.display import HTML

    return HTML(tokens_html(*args, **kwargs))
