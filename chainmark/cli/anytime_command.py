"""``chainmark detect --anytime``: each input's anytime-valid evidence (:mod:`chainmark.auditor.anytime`), read as
it arrives; standard input is read in the chunks the pipe delivers, and reading stops once E crosses 1/alpha
(unless ``--keep-reading``). The rows go out through ``detect``'s own printer, so --json and --fail-on-detect
behave as in its other modes."""
from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Iterator, TextIO

from ..auditor.regime import Regime
from .common import UsageError, warn
from .inputs import load_tokenizer, read_inputs, tokenizer_label

__all__ = ["anytime_reports", "anytime_table"]

#: Options that choose a fixed-length test, which --anytime replaces (attribute, as the caller spells it).
_CONFLICTS = (("segments", "--segments"), ("test", "--test"), ("threshold", "--threshold"),
              ("certificate", "--certificate"), ("min_tokens", "--min-tokens"))
#: Bytes asked of standard input at a time: a pipe answers with what it holds, up to this.
_READ_BYTES = 1 << 16


def _check_options(args: argparse.Namespace) -> None:
    """--keep-reading needs --anytime, and --anytime takes no option of a fixed-length test."""
    if not args.anytime:
        raise UsageError("--keep-reading applies to --anytime only")
    given = [flag for name, flag in _CONFLICTS if getattr(args, name, None) not in (None, False)]
    if given:
        raise UsageError(f"--anytime replaces the fixed-length tests; it cannot be combined with {', '.join(given)}")
    if list(args.inputs).count("-") > 1:
        raise UsageError("'-' (standard input) may be given only once")


class _Arriving:
    """Standard input's bytes as the pipe delivers them (``read1``: what is there, without waiting for a full
    block), refusing more than ``max_bytes`` in all."""

    def __init__(self, raw: Any, max_bytes: int, label: str):
        self.raw, self.left, self.max_bytes, self.label = raw, max_bytes, max_bytes, label
        self.read_some = getattr(raw, "read1", None) or raw.read

    def read(self, size: int) -> bytes:
        data = self.read_some(size)
        self.left -= len(data)
        if self.left < 0:
            raise UsageError(f"{self.label} is larger than {self.max_bytes} bytes (raise the limit with --max-bytes)")
        return data


def _stdin_chunks(stdin: TextIO, encoding: str, max_bytes: int) -> Iterator[str]:
    """Standard input's text as it arrives (a text stream without a byte buffer, as tests and notebooks give,
    a block at a time)."""
    from ..auditor.stream import decoded_chunks

    raw = getattr(stdin, "buffer", None)
    if raw is None:
        size = 0
        while chunk := stdin.read(_READ_BYTES):
            size += len(chunk.encode(encoding, errors="replace"))
            if size > max_bytes:
                raise UsageError(f"<stdin> is larger than {max_bytes} bytes (raise the limit with --max-bytes)")
            yield chunk
        return
    yield from decoded_chunks(_Arriving(raw, max_bytes, "<stdin>"), encoding, size=_READ_BYTES)


class _Watched:
    """The chunks of one input, noting whether any held more than white space."""

    def __init__(self, chunks: Iterator[str]):
        self.chunks, self.nonblank = chunks, False

    def __iter__(self) -> Iterator[str]:
        for chunk in self.chunks:
            self.nonblank = self.nonblank or bool(chunk.strip())
            yield chunk


def _evidence_so_far(detector: Any) -> str:
    if detector.crossed:
        return f"; E had crossed 1/alpha at token {detector.crossing_token}"
    return f"; {detector.n_tokens} tokens had been scored, E = {detector.result().e_value:.3g}"


def _score(label: str, chunks: Iterator[str], tokenizer: Any, detector: Any, keep_reading: bool, encoding: str) -> Any:
    """One input fed to a fresh detector; every reading problem a usage error naming the input."""
    from ..auditor.stream import UncuttableText

    watched = _Watched(chunks)
    try:
        detector.feed_text(watched, tokenizer, stop=not keep_reading)
    except UnicodeDecodeError as exc:
        raise UsageError(f"{label} is not {encoding} text (byte offset {exc.start}); pass --encoding"
                         + _evidence_so_far(detector)) from None
    except UncuttableText as exc:
        raise UsageError(f"{label}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{label} cannot be read ({exc.strerror or type(exc).__name__})"
                         + _evidence_so_far(detector)) from None
    if not watched.nonblank and detector.read_to_end:
        raise UsageError(f"{label}: empty input, nothing to score")
    return detector


def anytime_reports(args: argparse.Namespace, key: bytes, regime: Regime, topo: Any) -> list[dict[str, Any]]:
    """Each input's row: whether and where E crossed 1/alpha (token, character), E at the end and at its
    largest, the counts. Files are checked first (as ``detect`` checks them); standard input is read as it
    arrives."""
    from ..auditor.anytime import AnytimeDetector
    from ..keys import key_fingerprint

    _check_options(args)
    tokenizer = load_tokenizer(regime.tokenizer, regime.tokenizer_revision)
    regime.check_tokenizer(tokenizer)
    files = {item.source: item for item in read_inputs([p for p in args.inputs if p != "-"], args.encoding,
                                                       sys.stdin, args.max_bytes)}

    config = regime.config(key)

    rows = []
    for path in args.inputs:
        label = "<stdin>" if path == "-" else files[path].label
        chunks = regime.text_preparation.apply_chunks(
            _stdin_chunks(sys.stdin, args.encoding, args.max_bytes) if path == "-"
            else iter(files[path].chunks(args.max_bytes)))
        detector = _score(label, chunks, tokenizer, AnytimeDetector(config, regime.alpha, vocab_size=len(tokenizer)),
                          args.keep_reading, args.encoding)
        if detector.n_scored == 0:
            warn(f"{_printable(label)}: {detector.n_tokens} token(s) and no transition into a new token: "
                 "nothing was scored, E stays 1")
        rows.append({"file": label, **detector.result().to_dict(), "S": topo.S, "k": topo.k,
                     "topology": topo.name, "tokenizer": tokenizer_label(regime.tokenizer),
                     "key_fingerprint": key_fingerprint(key)})
    return rows


def _printable(label: str) -> str:
    """A file name with control characters escaped (a name cannot draw a row of its own)."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in label)


def _e_text(log10: float) -> str:
    """An e-value from its base-10 logarithm, readable far beyond a double's range (1.3e+412)."""
    if -4.0 < log10 < 6.0:
        return f"{10.0 ** log10:.3g}"
    exponent = math.floor(log10)
    mantissa = 10.0 ** (log10 - exponent)
    if mantissa >= 9.995:  # rounding would print 10.00
        mantissa, exponent = 1.0, exponent + 1
    return f"{mantissa:.2f}e{exponent:+d}"


def anytime_table(rows: list[dict[str, Any]], regime: Regime) -> str:
    """The rows as a table: where each input crossed, E at the end and at its largest, and how much was read."""
    head = ["file", "tokens", "scored", "legal", "crossed at token", "char", "E at end", "max E", "read"]
    body = [[_printable(r["file"]), str(r["n_tokens"]), str(r["n_scored"]), str(r["n_legal"]),
             "-" if r["crossing_token"] is None else str(r["crossing_token"]),
             "-" if r["crossing_char"] is None else str(r["crossing_char"]),
             _e_text(r["log10_e_value"]), _e_text(r["max_log10_e_value"]),
             "all" if r["read_to_end"] else "stopped at the crossing"] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if 0 < i < 8 else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    topo = regime.topo
    a, b = rows[0]["prior"] if rows else (math.nan, math.nan)
    lines = [f"ChainMark anytime: S={topo.S} {topo.name} (k={topo.k}, p0={topo.p0:.3g}), alpha={regime.alpha:g}: "
             f"flagged once E >= {1 / regime.alpha:g} (valid at any stopping point); bets on legal rates above p0 "
             f"for transitions into new tokens, weighted Beta({a:.3g}, {b:.3g})",
             f"tokenizer {rows[0]['tokenizer'] if rows else '-'}, key fingerprint "
             f"{rows[0]['key_fingerprint'] if rows else '-'}",
             line(head), line(["-" * w for w in widths]), *(line(b) for b in body),
             f"{sum(r['crossed'] for r in rows)} of {len(rows)} input(s) detected as watermarked"]
    return "\n".join(lines)
