"""Human-written English that installs with Python itself: a null corpus for calibration.

Calibration needs text that was certainly *not* written with the key. The
corpus here is the prose of the Python Language Reference as CPython ships
it in ``pydoc_data.topics`` (the text behind ``help("if")``,
``help("assignment")`` and so on): written by people, in English, under the
PSF License, and present wherever Python is, so a CI machine, a laptop and
Colab all have it with nothing to download. Grammar rules and code examples
(the indented blocks) and section underlines are dropped; the prose
paragraphs are kept in order. Its exact content follows the Python version,
so the chapters print its size.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = ["Document", "corpus_summary", "human_windows", "key_audit_corpus", "python_reference_documents",
           "shipped_texts"]

_CORPUS_NAME = "Python Language Reference prose (pydoc_data.topics)"
_CORPUS_LICENSE = "PSF License Agreement (Python Software Foundation License, version 2)"

_UNDERLINE = re.compile(r"^\s*([*=\-~^])\1{2,}\s*$")
_CODE_MARKS = ("::=", ">>>", "...:")


@dataclass(frozen=True)
class Document:
    """One human-written text: a reference topic's prose paragraphs."""

    name: str
    text: str


def _prose_paragraphs(raw: str) -> list[str]:
    """Keep paragraphs that start at column 0 and read as prose."""
    kept = []
    for block in re.split(r"\n\s*\n", raw):
        lines = block.splitlines()
        if not lines or not lines[0].strip():
            continue
        if lines[0][:1].isspace():  # indented: grammar rule or code example
            continue
        if any(_UNDERLINE.match(line) for line in lines):  # a heading
            continue
        text = " ".join(line.strip() for line in lines)
        if any(mark in text for mark in _CODE_MARKS):
            continue
        if len(text.split()) < 8:
            continue
        kept.append(text)
    return kept


def python_reference_documents(min_words: int = 50) -> list[Document]:
    """The prose of every Language Reference topic with at least ``min_words`` words.

    Sorted by topic name so the order does not depend on dictionary order.
    """
    if not isinstance(min_words, int) or isinstance(min_words, bool) or min_words < 0:
        raise ValueError(f"min_words must be an integer >= 0, got {min_words!r}")
    from pydoc_data.topics import topics

    docs = []
    for name in sorted(topics):
        text = "\n\n".join(_prose_paragraphs(topics[name]))
        if len(text.split()) >= min_words:
            docs.append(Document(name, text))
    return docs


def corpus_summary(documents: Sequence[Document]) -> dict[str, Any]:
    """Name, licence, Python version and size (documents, words, characters)."""
    return {
        "corpus": _CORPUS_NAME,
        "license": _CORPUS_LICENSE,
        "python": ".".join(map(str, sys.version_info[:3])),
        "documents": len(documents),
        "words": sum(len(d.text.split()) for d in documents),
        "characters": sum(len(d.text) for d in documents),
    }


def _token_windows(sequences: Iterable[Sequence[int]], n: int, max_windows: int | None = None) -> list[np.ndarray]:
    """Cut each token sequence into non-overlapping windows of exactly ``n`` tokens.

    Windows never straddle two sequences and the short remainder of each
    sequence is dropped, so every window is a text of the same length n, like
    a generation of n tokens. ``max_windows`` keeps the first that many.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise ValueError(f"n must be an integer >= 2 tokens, got {n!r}")
    if max_windows is not None and (not isinstance(max_windows, int) or max_windows < 1):
        raise ValueError(f"max_windows must be a positive integer or None, got {max_windows!r}")
    out: list[np.ndarray] = []
    for seq in sequences:
        ids = np.asarray(seq, dtype=np.int64).ravel()
        for start in range(0, ids.size - n + 1, n):
            out.append(ids[start:start + n])
            if max_windows is not None and len(out) >= max_windows:
                return out
    return out


def human_windows(tokenizer: Any, n: int, max_windows: int | None = None,
                  documents: Sequence[Document] | None = None) -> list[np.ndarray]:
    """Token windows of n tokens from the human-written corpus, through ``tokenizer``."""
    docs = python_reference_documents() if documents is None else documents
    ids = [tokenizer(d.text, add_special_tokens=False)["input_ids"] for d in docs]
    return _token_windows(ids, n, max_windows)


def shipped_texts() -> list[str]:
    """Every text that ships with the package, for benchmarks that anyone can rebuild: each stored reply of
    the book's reference run (all experiments, every method, watermarked and not) and the prose of the
    Python Language Reference (:func:`python_reference_documents`)."""
    from cmlab.harness.reference.read import load_texts

    texts = []
    for part in ("head_to_head", "null", "calibration", "kregular", "explorer"):
        try:
            texts += [r["output"] for r in load_texts(part) if r.get("output", "").strip()]
        except FileNotFoundError:
            continue
    return texts + [d.text for d in python_reference_documents()]



def key_audit_corpus(tokenizer: Any) -> tuple[str, str, list[list[int]], list[str]]:
    """The default corpus of ``chainmark key audit`` (registered as an entry point): its name, its grouping in
    words, the token ids and each text's document. Each reply of the reference null is one document; the
    200-token windows of one Language Reference topic together are one."""
    from .reference.read import load_texts

    model_texts = ([r["output"] for r in load_texts("null")]
                   + [r["output"] for r in load_texts("head_to_head") if r["method"] == "none"])
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in model_texts]
    human: list[list[int]] = []
    topics: list[str] = []
    for doc in python_reference_documents():
        windows = _token_windows([tokenizer(doc.text, add_special_tokens=False)["input_ids"]], 200)
        human += [w.tolist() for w in windows]
        topics += [f"topic {doc.name}"] * len(windows)
    name = (f"the reference null ({len(ids)} texts of the embedded model) and {len(human)} windows of "
            f"200 tokens of {_CORPUS_NAME}")
    grouping = (f"each of the {len(ids)} replies of the embedded model is one document; the windows of 200 tokens "
                f"cut from one topic of {_CORPUS_NAME} together are one document ({len(set(topics))} topics)")
    return name, grouping, ids + human, [f"reply {i}" for i in range(len(ids))] + topics
