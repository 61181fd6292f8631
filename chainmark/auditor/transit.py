"""What the auditor does to a text before tokenizing it: the regime's text preparation.

Between generation and audit a reply travels: it is saved on Windows (CRLF line endings), pasted through an
editor that normalises Unicode, scraped from a page's HTML source with its entities (``&amp;``, ``&#8217;``).
The watermark lives in the token ids, so anything that changes the text changes the ids the auditor re-derives.
Some of these changes can be undone because a model's reply has a known form: it uses LF line endings, it is
almost always in Unicode's NFC form, and it holds no HTML entities unless it writes HTML. A
:class:`TextPreparation` names the undoing steps an audit applies, in a fixed order:

1. ``html_entities``: decode HTML character references (off by default: a reply about HTML writes them itself);
2. ``newlines="lf"``: CRLF and lone CR become LF;
3. ``unicode``: a Unicode normal form (``"NFC"`` by default; None leaves the code points as they came).

The published regime states the preparation (its ``"text_preparation"`` field) and the command line applies it;
a regime document that names none was written before the field existed, and its texts are tokenized as given.
What no preparation can undo (NFKC's folding of compatibility characters, collapsed whitespace, a paraphrase)
is measured in the book's chapter 9.2, not promised here.
"""
from __future__ import annotations

import html
import unicodedata
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

__all__ = ["AS_GIVEN", "TextPreparation"]

#: The Unicode normal forms a preparation may apply, and what ``newlines`` may be.
_FORMS, _NEWLINES = ("NFC", "NFD", "NFKC", "NFKD"), ("lf", "keep")
#: Characters of text held back at most while waiting for a safe place to cut a stream.
_HOLD_CHARS = 1 << 20


@dataclass(frozen=True)
class TextPreparation:
    """The steps an audit applies to a text before tokenizing it (see the module's docstring for the order).

    Example:
        >>> from chainmark.auditor import TextPreparation
        >>> prep = TextPreparation()  # the default: NFC, LF line endings
        >>> prep.apply("caf\\u0065\\u0301\\r\\nnext line") == "caf\\u00e9\\nnext line"
        True
        >>> str(prep), str(TextPreparation.parse("html,lf"))
        ('nfc,lf', 'lf,html')
    """

    unicode: str | None = "NFC"
    newlines: str = "lf"
    html_entities: bool = False

    def __post_init__(self) -> None:
        problems = [f"{name} must be {wanted}, got {value!r}" for name, value, ok, wanted in (
            ("unicode", self.unicode, self.unicode is None or self.unicode in _FORMS, f"one of {_FORMS} or None"),
            ("newlines", self.newlines, self.newlines in _NEWLINES, "'lf' or 'keep'"),
            ("html_entities", self.html_entities, isinstance(self.html_entities, bool), "True or False")) if not ok]
        if problems:
            raise ValueError("; ".join(problems))

    def apply(self, text: str) -> str:
        """The prepared text: entities decoded (when asked), line endings made LF, the normal form applied."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        text = html.unescape(text) if self.html_entities else text
        text = text.replace("\r\n", "\n").replace("\r", "\n") if self.newlines == "lf" else text
        return unicodedata.normalize(self.unicode, text) if self.unicode else text

    def apply_chunks(self, chunks: Iterable[str]) -> Iterator[str]:
        """The prepared text of a text that arrives in pieces, equal to ``apply`` on the whole joined text.

        Each piece is prepared up to a place no step reaches across: after its last line feed (no step joins
        characters across one, and a CRLF pair's CR comes before it), else before its last space (a space
        composes with nothing before it, its marks follow it, and no entity holds one). A run of over a million
        characters with neither is refused with a ``ValueError``.
        """
        if self == AS_GIVEN:
            yield from chunks
            return
        buffer = ""
        for chunk in chunks:
            buffer += chunk
            newline = buffer.rfind("\n")
            at = newline + 1 if newline >= 0 else max(buffer.rfind(" ", 1), 0)
            if at:
                yield self.apply(buffer[:at])
                buffer = buffer[at:]
            elif len(buffer) > _HOLD_CHARS:
                raise ValueError(f"over {_HOLD_CHARS:,} characters with no line break or space: no place to "
                                 "prepare the text in pieces; prepare it whole (TextPreparation.apply)")
        if buffer:
            yield self.apply(buffer)

    def __str__(self) -> str:
        """The command line's spelling (``--text-preparation``): e.g. ``"nfc,lf"``, or ``"none"``."""
        words = [(self.unicode or "").lower(), "lf" if self.newlines == "lf" else "", "html" * self.html_entities]
        return ",".join(w for w in words if w) or "none"

    @classmethod
    def parse(cls, spec: str) -> "TextPreparation":
        """The preparation a command-line spelling names: ``"none"``, or a comma-separated list of at most one
        normal form (``nfc``, ``nfd``, ``nfkc``, ``nfkd``), ``lf`` and ``html``, in any order."""
        words = [w.strip().lower() for w in str(spec).split(",") if w.strip()]
        forms = [w.upper() for w in words if w.upper() in _FORMS]
        unknown = [w for w in words if w not in ("lf", "html") and w.upper() not in _FORMS]
        if words == ["none"]:
            return AS_GIVEN
        if not words or unknown or len(forms) > 1:
            raise ValueError(f"text preparation {spec!r}: use 'none' or a comma-separated list of at most one of "
                             "nfc, nfd, nfkc, nfkd, and lf and html (e.g. 'nfc,lf')"
                             + (f"; not understood: {', '.join(unknown)}" if unknown else "")
                             + (f"; names {len(forms)} normal forms" if len(forms) > 1 else ""))
        return cls(forms[0] if forms else None, "lf" if "lf" in words else "keep", "html" in words)

    def to_document(self) -> dict[str, Any]:
        """The regime document's ``"text_preparation"`` object."""
        return {"unicode": self.unicode, "newlines": self.newlines, "html_entities": self.html_entities}

    @classmethod
    def from_document(cls, value: Any) -> "TextPreparation":
        """The preparation of a regime document's ``"text_preparation"`` object; a ``ValueError`` naming what is
        wrong when it is not one."""
        fields = {"unicode", "newlines", "html_entities"}
        if not isinstance(value, dict) or set(value) != fields:
            raise ValueError('it must be a JSON object with exactly "unicode", "newlines" and "html_entities"')
        return cls(**value)


#: No preparation at all: what an audit applies under a regime document that names none.
AS_GIVEN = TextPreparation(unicode=None, newlines="keep", html_entities=False)
