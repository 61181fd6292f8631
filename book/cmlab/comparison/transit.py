"""Text in transit: what happens to a reply between generation and audit, and what the auditor's preparation undoes.

``_TRANSIT`` names the everyday changes a reply meets on its way (an editor's Unicode normalisation, Windows
line endings, a page's HTML source, a copy from a rendered page, a collapse of every whitespace run), each a plain
function of the text. :func:`transit_table` measures, on watermarked replies, how often the auditor still sees the
token ids the model emitted and how often it still detects the watermark, for each change and each preparation
(:class:`chainmark.auditor.transit.TextPreparation`).
"""
from __future__ import annotations

import html
import re
import unicodedata
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from chainmark.auditor.rates import rate_estimate
from chainmark.auditor.stream import ids_batch
from chainmark.auditor.transit import TextPreparation
from chainmark.config import ChainMarkConfig
from chainmark.detection import detect

__all__ = ["transit_table"]


def _html_source(text: str) -> str:
    """The text as a page's HTML source holds it: markup characters and every non-ASCII character as references."""
    return html.escape(text, quote=True).encode("ascii", "xmlcharrefreplace").decode("ascii")


def _web_page_copy(text: str) -> str:
    """What copying the text from a rendered page gives when each line break was a ``<br>``: runs of spaces and
    tabs collapse to one space and no line starts or ends with one (the browser's white-space rule)."""
    return "\n".join(re.sub(r"[ \t]+", " ", line).strip(" ") for line in text.split("\n"))


#: The changes a reply may meet between generation and audit, by name ("as generated" changes nothing).
_TRANSIT: dict[str, Callable[[str], str]] = {
    "as generated": lambda text: text,
    "NFC (an editor's normalisation)": lambda text: unicodedata.normalize("NFC", text),
    "NFD (macOS file names, some editors)": lambda text: unicodedata.normalize("NFD", text),
    "NFKC (compatibility folding)": lambda text: unicodedata.normalize("NFKC", text),
    "CRLF line endings (saved on Windows)": lambda text: text.replace("\n", "\r\n"),
    "HTML source (entities)": _html_source,
    "copied from a web page": _web_page_copy,
    "all whitespace collapsed": lambda text: re.sub(r"\s+", " ", text).strip(),
}


def transit_table(texts: Sequence[str], tokenizer: Any, config: ChainMarkConfig,
                  preparations: Mapping[str, TextPreparation], alpha: float = 0.01, test: str = "exact",
                  transit: Mapping[str, Callable[[str], str]] | None = None) -> pd.DataFrame:
    """For each change in ``transit`` (default ``_TRANSIT``) and each named preparation: the share of ``texts``
    whose token ids come out exactly as from the text as generated, the share detected at ``alpha`` under
    ``test``, and the share lost (detected as generated, not after the change and the preparation), each with its
    95% Clopper-Pearson interval (one text per prompt: independent texts), and the mean z. The interval objects
    are kept in the columns ``ids_kept``, ``detected_rate`` and ``lost_rate``.

    Example:
        >>> import chainmark as cm
        >>> from chainmark.auditor import AS_GIVEN, TextPreparation, load_tokenizer
        >>> table = transit_table(["Hello,\\nworld."], load_tokenizer(), cm.ChainMarkConfig(cm.book_key(), S=5),
        ...                       {"as given": AS_GIVEN, "nfc,lf": TextPreparation()})
        >>> list(table.columns)[:5]
        ['transit', 'preparation', 'ids as generated', 'detected', 'lost']
    """
    changes = _TRANSIT if transit is None else transit
    if not texts:
        raise ValueError("texts is empty: give the watermarked replies to measure")
    if not preparations:
        raise ValueError("preparations is empty: name at least one (e.g. {'as given': AS_GIVEN})")

    generated = ids_batch(tokenizer, list(texts))
    found_before = [detect(g, config, alpha, test=test).is_watermarked for g in generated]
    rows = []
    for change_name, change in changes.items():
        moved = [change(text) for text in texts]
        for prep_name, prep in preparations.items():
            seen = ids_batch(tokenizer, [prep.apply(text) for text in moved])
            kept = rate_estimate([a == b for a, b in zip(seen, generated)])
            verdicts = [detect(s, config, alpha, test=test) for s in seen]
            found = rate_estimate([v.is_watermarked for v in verdicts])
            lost = rate_estimate([before and not v.is_watermarked for before, v in zip(found_before, verdicts)])
            rows.append({"transit": change_name, "preparation": prep_name, "ids as generated": kept.format(1),
                         "detected": found.format(1), "lost": lost.format(1),
                         "mean z": float(sum(v.z for v in verdicts) / len(verdicts)),
                         "ids_kept": kept, "detected_rate": found, "lost_rate": lost})
    return pd.DataFrame(rows)
