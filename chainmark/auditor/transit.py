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

#: The Unicode normal forms a preparation may apply.
_FORMS = ("NFC", "NFD", "NFKC", "NFKD")
#: What ``newlines`` may be: "lf" (CRLF and lone CR become LF) or "keep".
_NEWLINES = ("lf", "keep")
#: Characters of prepared text held back at most while waiting for a safe place to cut a stream.
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
        if self.unicode is not None and self.unicode not in _FORMS:
            raise ValueError(f"unicode must be one of {', '.join(_FORMS)} or None, got {self.unicode!r}")
        if self.newlines not in _NEWLINES:
            raise ValueError(f"newlines must be 'lf' or 'keep', got {self.newlines!r}")
        if not isinstance(self.html_entities, bool):
            raise ValueError(f"html_entities must be True or False, got {self.html_entities!r}")

    def apply(self, text: str) -> str:
        """The prepared text: entities decoded (when asked), line endings made LF, the normal form applied."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if self.html_entities:
            text = html.unescape(text)
        if self.newlines == "lf":
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if self.unicode is not None:
            text = unicodedata.normalize(self.unicode, text)
        return text

    def apply_chunks(self, chunks: Iterable[str]) -> Iterator[str]:
        """The prepared text of a text that arrives in pieces, equal to ``apply`` on the whole joined text.

        Each piece is prepared up to a place where no step can reach across: after its last line feed (a CR
        just before the cut stays with the next piece, since a CRLF pair must not be split), else before its
        last space. A run of over a million characters with neither is refused with a ``ValueError``.
        """
        if self.is_identity:
            yield from chunks
            return
        buffer = ""
        for chunk in chunks:
            buffer += chunk
            at = self._cut(buffer)
            if at > 0:
                yield self.apply(buffer[:at])
                buffer = buffer[at:]
            elif len(buffer) > _HOLD_CHARS:
                raise ValueError(f"over {_HOLD_CHARS:,} characters with no line break or space: no place to "
                                 "prepare the text in pieces; prepare it whole (TextPreparation.apply)")
        if buffer:
            yield self.apply(buffer)

    @staticmethod
    def _cut(text: str) -> int:
        """Where ``text`` can be cut so that preparing the two halves apart equals preparing it whole (0: none).

        After a line feed: no step joins characters across it (the CR of a CRLF pair comes before it). Before a
        space: a space composes with nothing before it, and the marks that follow it stay with it. An entity
        holds neither character, so it is never split."""
        newline = text.rfind("\n")
        if newline >= 0:
            return newline + 1
        space = text.rfind(" ", 1)
        return max(space, 0)

    @property
    def is_identity(self) -> bool:
        """True when the preparation changes nothing: the text is tokenized as given."""
        return self.unicode is None and self.newlines == "keep" and not self.html_entities

    def __str__(self) -> str:
        """The command line's spelling (``--text-preparation``): e.g. ``"nfc,lf"``, or ``"none"``."""
        parts = ([self.unicode.lower()] if self.unicode else []) + (["lf"] if self.newlines == "lf" else []) + (
            ["html"] if self.html_entities else [])
        return ",".join(parts) or "none"

    @classmethod
    def parse(cls, spec: str) -> "TextPreparation":
        """The preparation a command-line spelling names: ``"none"``, or a comma-separated list of at most one
        normal form (``nfc``, ``nfd``, ``nfkc``, ``nfkd``), ``lf`` and ``html`` (in any order)."""
        if not isinstance(spec, str):
            raise TypeError(f"a text preparation is spelled as a string, got {type(spec).__name__}")
        words = [w.strip().lower() for w in spec.split(",") if w.strip()]
        if words == ["none"]:
            return AS_GIVEN
        unknown = [w for w in words if w not in {"lf", "html", *(f.lower() for f in _FORMS)}]
        if not words or unknown:
            raise ValueError(f"text preparation {spec!r}: use 'none' or a comma-separated list of one of nfc, "
                             f"nfd, nfkc, nfkd and of lf and html (e.g. 'nfc,lf')"
                             + (f"; not understood: {', '.join(unknown)}" if unknown else ""))
        forms = [w.upper() for w in words if w.upper() in _FORMS]
        if len(forms) > 1:
            raise ValueError(f"text preparation {spec!r} names {len(forms)} normal forms ({', '.join(forms)}); "
                             "name one")
        return cls(unicode=forms[0] if forms else None, newlines="lf" if "lf" in words else "keep",
                   html_entities="html" in words)

    def to_document(self) -> dict[str, Any]:
        """The regime document's ``"text_preparation"`` object."""
        return {"unicode": self.unicode, "newlines": self.newlines, "html_entities": self.html_entities}

    @classmethod
    def from_document(cls, value: Any) -> "TextPreparation":
        """The preparation of a regime document's ``"text_preparation"`` object (a ``ValueError`` naming every
        problem when it is not one)."""
        problems = cls.document_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
        return cls(unicode=value["unicode"], newlines=value["newlines"], html_entities=value["html_entities"])

    @staticmethod
    def document_problems(value: Any) -> list[str]:
        """Everything wrong with a regime document's ``"text_preparation"`` object (empty when it is valid)."""
        fields = ("unicode", "newlines", "html_entities")
        if not isinstance(value, dict):
            return ['"text_preparation" must be a JSON object with "unicode", "newlines" and "html_entities"']
        problems = [f'"text_preparation" has unknown field(s) {", ".join(map(repr, sorted(set(value) - set(fields))))}'
                    ] if set(value) - set(fields) else []
        problems += [f'"text_preparation" lacks "{name}"' for name in fields if name not in value]
        if "unicode" in value and value["unicode"] is not None and value["unicode"] not in _FORMS:
            problems.append(f'"text_preparation"."unicode" must be one of {", ".join(_FORMS)} or null')
        if "newlines" in value and value["newlines"] not in _NEWLINES:
            problems.append('"text_preparation"."newlines" must be "lf" or "keep"')
        if "html_entities" in value and not isinstance(value["html_entities"], bool):
            problems.append('"text_preparation"."html_entities" must be true or false')
        return problems


#: No preparation at all: what an audit applies under a regime document that names none.
AS_GIVEN = TextPreparation(unicode=None, newlines="keep", html_entities=False)
