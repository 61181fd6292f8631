"""Claims: the book's sentences about a run, checked beside the sentence.

A chapter states in prose what its run shows and guards the sentence with a
claim, whose body is ordinary ``assert`` statements::

    with claim("with distinct pairs the SD of z on the wrong key is close to 1"):
        assert abs(sd - 1) < 0.1, sd

In the book's own configuration (the public teaching key, the embedded model,
the default scale, a CPU) a failed claim raises :class:`ClaimFailed`, so the
published site never prints a false sentence. Anywhere else (a reader's key,
another model, a GPU, the full scale) the chapter goes on: a visible note
says what the text says and what this run shows, and :func:`claims_report`
at the end of the chapter lists every claim that differed (and shows nothing
when every claim held). ``CHAINMARK_CLAIMS``
forces either mode (``strict`` or ``soft``).

Claims are for statements about runs. What must hold on any configuration
(the reader's implementation equals the package's) stays a plain ``assert``.
A claim's ``tier`` says what it is about: ``"live"`` for the chapter's own
run (it must hold under any key, see ``tools/claims_robustness.py``),
``"reference"`` for the committed reference run (fixed data, holds anywhere).
"""
from __future__ import annotations

import contextlib
import html
import json
import os
import traceback
from dataclasses import asdict, dataclass
from typing import Iterator

_CLAIMS_ENV = "CHAINMARK_CLAIMS"         # "strict", "soft", or unset (strict only in the book's configuration)
_CLAIMS_LOG_ENV = "CHAINMARK_CLAIMS_LOG"  # a JSON Lines file; every claim checked is appended to it
_CHAPTER_ENV = "CHAINMARK_CHAPTER"       # the chapter's name in the log (set by the tools that execute chapters)
_MODES = ("strict", "soft")
_TIERS = ("live", "reference")


class ClaimFailed(AssertionError):
    """A sentence of the book does not hold for this run (raised in strict mode only)."""


@dataclass(frozen=True)
class _ClaimOutcome:
    """One claim as this run checked it: the sentence, its tier, whether it held, and what failed."""

    says: str
    tier: str
    held: bool
    shows: str = ""


_outcomes: list[_ClaimOutcome] = []
_notes_under_sentences = False  # notes_under_sentences(True): the notebook edition's paragraphs show the notes
_notes_shown = 0                # the claims checked before the last call of pending_notes


def book_configuration() -> dict[str, bool]:
    """Which parts of the book's own configuration this run has: key, model, scale, device.

    The book's configuration is the public teaching key, the embedded model,
    the default scale for the device and a CPU; the published site is built
    in it, and a reader's run with the defaults on a CPU is in it too.
    """
    from chainmark.auditor.keyfiles import book_key_source
    from chainmark.auditor.tokenizer import DEFAULT_MODEL
    from cmlab.harness.settings import get_settings

    s = get_settings()
    return {"teaching key": book_key_source() == "teaching", "embedded model": s.model == DEFAULT_MODEL,
            "default scale": s.scale == "smoke", "CPU": s.device == "cpu"}


def _claims_mode() -> str:
    """``strict`` (a failed claim raises) or ``soft`` (a failed claim is reported), read at each call.

    ``$CHAINMARK_CLAIMS`` decides when set; otherwise strict exactly in the
    book's configuration (:func:`book_configuration`).
    """
    forced = os.environ.get(_CLAIMS_ENV, "").strip().lower()
    if forced:
        if forced not in _MODES:
            raise ValueError(f"{_CLAIMS_ENV} must be one of {_MODES} (or unset), got {forced!r}")
        return forced
    return "strict" if all(book_configuration().values()) else "soft"


def _what_failed(exc: AssertionError) -> str:
    """The failing assert's source line and its message, as this run shows them."""
    frames = traceback.extract_tb(exc.__traceback__)
    line = (frames[-1].line or "").strip() if frames else ""
    message = str(exc).strip()
    parts = [f"`{line}` is false" if line else "a check is false"]
    if message:
        parts.append(f"({message[:300]})")
    return " ".join(parts)


def _log(outcome: _ClaimOutcome, mode: str) -> None:
    path = os.environ.get(_CLAIMS_LOG_ENV, "").strip()
    if not path:
        return
    from chainmark.auditor.keyfiles import book_key
    from chainmark.keys import key_fingerprint

    row = {**asdict(outcome), "mode": mode, "chapter": os.environ.get(_CHAPTER_ENV, ""),
           "key_fingerprint": key_fingerprint(book_key())}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def _show(obj_html: str, text: str) -> None:
    """Display ``obj_html`` in a notebook; print ``text`` anywhere else (a script, a test)."""
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(text)
        return
    display(HTML(obj_html))


def _note_html(outcome: _ClaimOutcome) -> str:
    """The note a sentence this run does not bear out gets: what the text says, what the run shows."""
    return ('<div style="padding:6px 10px;background:#fff6e0;border-left:4px solid #B8860B;margin:4px 0">'
            "<b>This run differs from the text.</b> "
            f"The text says: <i>{html.escape(outcome.says)}</i><br>This run shows: {html.escape(outcome.shows)}"
            "</div>")


def _note(outcome: _ClaimOutcome) -> None:
    if _notes_under_sentences:  # the notebook edition shows the note under its sentence (edition.show_paragraph)
        return
    _show(_note_html(outcome),
          f"NOTE: this run differs from the text.\n  The text says: {outcome.says}\n  This run shows: {outcome.shows}")


@contextlib.contextmanager
def claim(says: str, tier: str = "live") -> Iterator[None]:
    """Check the sentence ``says`` with the ``assert`` statements in the block.

    Strict mode: a failed assert raises :class:`ClaimFailed` naming the
    sentence. Soft mode: the rest of the block is skipped, a note is shown,
    and the chapter goes on (so a claim's block holds checks only, never
    code that later cells need). Other exceptions pass through unchanged.
    """
    if not isinstance(says, str) or not says.strip():
        raise ValueError("a claim needs the sentence it checks (a non-empty string)")
    if tier not in _TIERS:
        raise ValueError(f"tier must be one of {_TIERS}, got {tier!r}")
    mode = _claims_mode()
    try:
        yield
    except AssertionError as exc:
        outcome = _ClaimOutcome(says.strip(), tier, False, _what_failed(exc))
        _outcomes.append(outcome)
        _log(outcome, mode)
        if mode == "strict":
            raise ClaimFailed(f"the text says: {outcome.says}\nthis run shows: {outcome.shows}") from exc
        _note(outcome)
    else:
        outcome = _ClaimOutcome(says.strip(), tier, True)
        _outcomes.append(outcome)
        _log(outcome, mode)


def notes_under_sentences(on: bool = True) -> None:
    """Show a claim's note under the sentence it guards instead of where it is checked (the notebook edition,
    whose paragraphs call :func:`pending_notes`; ``cmlab.teaching.edition.notebook_edition`` switches it on)."""
    global _notes_under_sentences
    _notes_under_sentences = bool(on)


def pending_notes() -> list[str]:
    """The notes (HTML) of the claims this run did not bear out among those checked since the last call: the
    sentences of the paragraph about to be shown.

    >>> pending_notes()  # nothing checked since, or every claim held
    []
    """
    global _notes_shown
    fresh = _outcomes[_notes_shown:]
    _notes_shown = len(_outcomes)
    return [_note_html(o) for o in fresh if not o.held]


def _claim_outcomes() -> list[_ClaimOutcome]:
    """Every claim checked so far in this process (a chapter's kernel), in order."""
    return list(_outcomes)


def claims_report() -> None:
    """Close a chapter: nothing when every claim held, one line and a table of those that did not otherwise.

    A run in the page's configuration (or any run whose sentences all held) sees nothing; a run that does
    not bear out a sentence sees how many, in which of its settings it differs, and each sentence with what
    the run shows. Displays only (a chapter's last cell calls it); :func:`_claim_outcomes` gives the claims.
    """
    outcomes = _claim_outcomes()
    differed = [o for o in outcomes if not o.held]
    if not differed:
        return
    config = book_configuration()
    unlike = [k for k, v in config.items() if not v]
    why = (" (this run does not have the " + ", ".join(unlike) + ")") if unlike else ""
    line = f"{len(differed)} of {len(outcomes)} sentences on this page are not borne out by your run{why}:"
    rows = "".join(f"<tr><td>{html.escape(o.says)}</td><td>{html.escape(o.shows)}</td></tr>" for o in differed)
    _show(f'<p style="padding:6px 10px;background:#fff6e0;border-left:4px solid #B8860B">{html.escape(line)}</p>'
          f"<table><thead><tr><th>the text says</th><th>your run shows</th></tr></thead>"
          f"<tbody>{rows}</tbody></table>",
          line + "\n" + "\n".join(f"  - {o.says}: {o.shows}" for o in differed))


__all__ = ["ClaimFailed", "book_configuration", "claim", "claims_report", "notes_under_sentences", "pending_notes"]
