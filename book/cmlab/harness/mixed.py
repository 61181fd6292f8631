"""Mixed documents: unwatermarked text with ChainMark replies pasted in at known places.

The segment finder (:func:`chainmark.auditor.segments.detect_segments`) is measured on
documents built only from what ships with the package: unwatermarked text
(the prose of the Python Language Reference, :mod:`cmlab.harness.corpora`,
and the reference run's unwatermarked replies) with slices of the reference
run's ChainMark replies (S = 5, rho = 0.5, the published reference key)
inserted at random positions, each document with its ground truth. The
documents are token ids of the embedded model's tokenizer; they are built once
by ``python tools/build_mixed_documents.py`` and committed, because the
human prose follows the Python version that tokenises it.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

__all__ = ["BOUNDARY_CASES", "boundary_summary", "MIXED_FILE", "MixedDocument", "build_mixed_documents",
           "match_segments", "read_segment_records", "segment_summary", "load_mixed_documents", "mixed_config",
           "write_mixed_documents"]

#: Lengths (tokens) of the pasted ChainMark segments and of the documents.
_SEGMENT_LENGTHS: tuple[int, ...] = (25, 50, 100, 200)
_DOCUMENT_LENGTHS: tuple[int, ...] = (500, 1000, 2000, 5000)
#: The committed data set (gzipped JSON lines, one document each).
MIXED_FILE = Path(__file__).resolve().parents[1] / "data" / "mixed" / "documents.jsonl.gz"
_FORMAT = "chainmark-mixed-documents/1"


@dataclass(frozen=True)
class MixedDocument:
    """One document: its token ids, the watermarked spans in it ([start, end) token positions), its design."""

    name: str
    token_ids: np.ndarray
    segments: tuple[tuple[int, int], ...]
    design: str
    sources: tuple[str, ...] = field(default=(), repr=False)

    @property
    def n_tokens(self) -> int:
        return int(self.token_ids.size)


def mixed_config() -> Any:
    """The configuration the pasted segments were generated with: the reference run's key, S and rho."""
    from chainmark.config import ChainMarkConfig
    from cmlab.harness.reference.protocol import PROTOCOL, reference_key, topology_for

    return ChainMarkConfig(reference_key(), S=PROTOCOL.S, rho=PROTOCOL.rho, gate="high_entropy",
                           topology=topology_for(PROTOCOL.S))


#: Where a design's passage sits ("random": anywhere; "start"/"end": at the document's first/last token).
_PLACEMENTS = ("random", "start", "end")


def _designs() -> list[tuple[str, int, tuple[int, ...], int, str]]:
    """(design, document length, segment lengths, how many documents, placement) of the data set."""
    out = [(f"none_{n}", n, (), 25, "random") for n in _DOCUMENT_LENGTHS]
    out += [(f"one_{m}_in_2000", 2000, (m,), 50, "random") for m in _SEGMENT_LENGTHS]
    out += [(f"one_100_in_{n}", n, (100,), 25, "random") for n in _DOCUMENT_LENGTHS if n != 2000]
    out += [("two_100_in_2000", 2000, (100, 100), 25, "random")]
    # the edges: a passage that opens or closes its document (appended, so the documents above are unchanged)
    out += [(f"{where}_100_in_2000", 2000, (100,), 50, where) for where in ("start", "end")]
    return out


class _Background:
    """Unwatermarked token ids, drawn as pieces: a slice of human prose or one unwatermarked reply."""

    def __init__(self, human: Sequence[np.ndarray], replies: Sequence[tuple[str, np.ndarray]],
                 rng: np.random.Generator):
        self.human, self.replies, self.rng = list(human), list(replies), rng

    def take(self, n: int) -> tuple[np.ndarray, list[str]]:
        parts, names, total = [], [], 0
        while total < n:
            if self.rng.random() < 0.5:
                d = int(self.rng.integers(len(self.human)))
                doc = self.human[d]
                size = int(self.rng.integers(100, 401))
                start = int(self.rng.integers(0, max(1, doc.size - size)))
                piece, name = doc[start:start + size], f"human/{d}/{start}"
            else:
                r = int(self.rng.integers(len(self.replies)))
                name, piece = self.replies[r]
            parts.append(piece)
            names.append(name)
            total += piece.size
        return np.concatenate(parts)[:n], names


def _place(n_background: int, lengths: Sequence[int], rng: np.random.Generator,
           placement: str = "random") -> list[int]:
    """Insertion points (in background positions) so that segments are apart by at least the longer one;
    one segment at the very start or end for those placements."""
    if placement != "random":
        if len(lengths) != 1 or placement not in _PLACEMENTS:
            raise ValueError(f"placement {placement!r} takes one segment; placements: {_PLACEMENTS}")
        return [0 if placement == "start" else n_background]
    for _ in range(1000):
        cuts = sorted(int(c) for c in rng.integers(0, n_background + 1, size=len(lengths)))
        if all(b - a >= max(lengths) for a, b in zip(cuts, cuts[1:])):
            return cuts
    raise ValueError("could not place the segments apart; use a longer document")  # pragma: no cover


def build_mixed_documents(tokenizer: Any = None, seed: int = 2026) -> list[MixedDocument]:
    """Build the data set from the package's corpora and reference run (deterministic for a given seed)."""
    from chainmark.auditor.tokenizer import load_tokenizer
    from cmlab.harness.corpora import python_reference_documents
    from cmlab.harness.reference.read import load_texts

    tok = tokenizer if tokenizer is not None else load_tokenizer()
    rng = np.random.default_rng(seed)
    human = [np.asarray(tok(d.text, add_special_tokens=False)["input_ids"], dtype=np.int64)
             for d in python_reference_documents()]
    human = [h for h in human if h.size >= 400]
    h2h = load_texts("head_to_head")
    marked = [(r["id"], np.asarray(r["token_ids"], dtype=np.int64)) for r in h2h if r["cell"] == "chainmark"]
    replies = [(r["id"], np.asarray(r["token_ids"], dtype=np.int64))
               for r in h2h + load_texts("null") if not r["watermarked"]]
    background = _Background(human, replies, rng)
    docs = []
    for design, n, lengths, count, placement in _designs():
        for i in range(count):
            base, names = background.take(n - sum(lengths))
            cuts = _place(base.size, lengths, rng, placement)
            pieces, segments, sources, at, pos = [], [], list(names), 0, 0
            for cut, m in zip(cuts, lengths):
                rid, ids = marked[int(rng.integers(len(marked)))]
                start = int(rng.integers(0, ids.size - m + 1))
                pieces.append(base[at:cut])
                pos += cut - at
                pieces.append(ids[start:start + m])
                segments.append((pos, pos + m))
                sources.append(f"chainmark:{rid}/{start}")
                pos += m
                at = cut
            pieces.append(base[at:])
            docs.append(MixedDocument(f"{design}/{i:03d}", np.concatenate(pieces), tuple(segments), design,
                                      tuple(sources)))
    return docs


def write_mixed_documents(docs: Sequence[MixedDocument], path: str | Path = MIXED_FILE) -> Path:
    """Write the documents as gzipped JSON lines (a header line first), reproducibly (no timestamp)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"format": _FORMAT, "documents": len(docs), "config": mixed_config().describe()},
                        sort_keys=True)]
    lines += [json.dumps({"name": d.name, "design": d.design, "segments": [list(s) for s in d.segments],
                          "sources": list(d.sources), "token_ids": d.token_ids.tolist()}) for d in docs]
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz:
        gz.write(("\n".join(lines) + "\n").encode("utf-8"))
    return path


def _read_lines(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def load_mixed_documents(path: str | Path = MIXED_FILE, design: str | None = None) -> list[MixedDocument]:
    """The committed mixed documents (or those of one ``design``, e.g. ``"one_100_in_2000"``)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no mixed documents at {path}; build them with "
                                "`python tools/build_mixed_documents.py`")
    lines = _read_lines(path)
    header = next(lines)
    if header.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a mixed-documents file of format {_FORMAT!r}")
    docs = [MixedDocument(r["name"], np.asarray(r["token_ids"], dtype=np.int64),
                          tuple(tuple(s) for s in r["segments"]), r["design"], tuple(r["sources"]))
            for r in lines if design is None or r["design"] == design]
    if design is not None and not docs:
        raise ValueError(f"no documents of design {design!r} in {path}; designs: "
                         f"{sorted({d for d, *_ in _designs()})}")
    return docs


def match_segments(found: Sequence[tuple[int, int]], truth: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """How well found spans recover the true ones ([start, end) token positions).

    Each true segment is matched to the found span that overlaps it most; it
    counts as *found* when they overlap at all, with its intersection over
    union and its boundary error (mean of the start and end offsets, in
    tokens). A found span that overlaps no true segment is a *false span*.
    """
    found = [(int(a), int(b)) for a, b in found]
    rows = []
    for s, e in truth:
        best, best_overlap = None, 0
        for a, b in found:
            overlap = min(e, b) - max(s, a)
            if overlap > best_overlap:
                best, best_overlap = (a, b), overlap
        if best is None:
            rows.append({"start": s, "end": e, "found": False, "iou": 0.0, "boundary_error": None})
        else:
            a, b = best
            union = max(e, b) - min(s, a)
            rows.append({"start": s, "end": e, "found": True, "iou": best_overlap / union,
                         "boundary_error": (abs(a - s) + abs(b - e)) / 2})
    false = [(a, b) for a, b in found if not any(min(e, b) > max(s, a) for s, e in truth)]
    return {"segments": rows, "false_spans": len(false), "n_found": len(found)}


def segment_summary(records: Sequence[dict[str, Any]]) -> Any:
    """One row per (part, design, method) of ``tools/measure_segments.py``'s records, with 95% intervals.

    On segment-free documents (part ``null``, many keys) the family-wise false-positive rate is the share of
    (document, key) pairs with any span, its interval from resampling whole documents. On documents with
    segments (part ``power``) it is the share of true segments found, their mean intersection over union (0 when
    missed), the mean boundary error of those found (tokens), false spans per document, and the seconds per
    10,000 tokens.
    """
    import pandas as pd

    from chainmark.auditor.rates import rate_estimate
    from cmlab.stats import cluster_bootstrap_rate

    frame = pd.DataFrame(records)
    rows = []
    for (part, method), grp in frame.groupby(["part", "method"], sort=False):
        designs = [("all", grp)] if part == "null" else list(grp.groupby("design", sort=False))
        for design, g in designs:
            row = {"part": part, "design": design, "method": method, "documents": g["document"].nunique(),
                   "runs": len(g), "seconds_per_10k_tokens": 1e4 * g["seconds"].sum() / g["n_tokens"].sum()}
            if part == "null":
                flagged = (g["n_found"] > 0).to_numpy()
                rate = cluster_bootstrap_rate(flagged, g["document"].to_numpy())
                row.update(fwer=rate.rate, fwer_low=rate.low, fwer_high=rate.high)
            else:
                segs = [s for lst in g["segments"] for s in lst]
                rate = rate_estimate([s["found"] for s in segs])
                errors = [s["boundary_error"] for s in segs if s["found"]]
                row.update(segments=len(segs), power=rate.rate, power_low=rate.low, power_high=rate.high,
                           mean_iou=float(np.mean([s["iou"] for s in segs])),
                           boundary_error=float(np.mean(errors)) if errors else float("nan"),
                           false_spans_per_document=float(g["false_spans"].mean()))
            rows.append(row)
    return pd.DataFrame(rows)


#: The 100-token passages of 2,000-token documents, by where they sit (the designs that place them there).
BOUNDARY_CASES: dict[str, str] = {"at the start": "start_100_in_2000", "inside (a random place)": "one_100_in_2000",
                                  "at the end": "end_100_in_2000", "two passages": "two_100_in_2000"}


def boundary_summary(records: Sequence[dict[str, Any]], methods: Sequence[str] = ("scan", "cover")) -> Any:
    """How well each finder's span ends fit 100-token passages, by where the passage sits.

    One row per (case, method) of :data:`BOUNDARY_CASES`: the passages, the share found, the 10%, 25% and 50%
    quantiles of the intersection over union (a missed passage counts 0), the share below IoU 0.7 of all
    passages and of those found, and the mean start and end offsets of the found spans in tokens (negative:
    the span starts or ends early). Shares are :class:`~chainmark.auditor.rates.RateEstimate` with 95% intervals
    (passages as units; the two passages of one document share it, which the interval ignores).
    """
    import pandas as pd

    from chainmark.auditor.rates import rate_estimate

    rows = []
    for case, design in BOUNDARY_CASES.items():
        for method in methods:
            segs, starts, ends = [], [], []
            for r in records:
                if r["part"] != "power" or r["design"] != design or r["method"] != method:
                    continue
                for seg in r["segments"]:
                    segs.append(seg)
                    if seg["found"]:
                        a, b = max(r["spans"], key=lambda sp: min(sp[1], seg["end"]) - max(sp[0], seg["start"]))
                        starts.append(a - seg["start"])
                        ends.append(b - seg["end"])
            if not segs:
                continue
            iou = np.array([seg["iou"] for seg in segs])
            found = np.array([seg["found"] for seg in segs])
            rows.append({"case": case, "method": method, "passages": len(segs), "found": rate_estimate(found),
                         "iou_q10": float(np.quantile(iou, 0.1)), "iou_q25": float(np.quantile(iou, 0.25)),
                         "iou_median": float(np.median(iou)), "below_07": rate_estimate(iou < 0.7),
                         "found_below_07": rate_estimate(iou[found] < 0.7),
                         "start_offset": float(np.mean(starts)) if starts else np.nan,
                         "end_offset": float(np.mean(ends)) if ends else np.nan})
    return pd.DataFrame(rows)


def read_segment_records(path: str | Path = MIXED_FILE.with_name("results.jsonl.gz")) -> list[dict[str, Any]]:
    """The records of ``tools/measure_segments.py`` (the committed ones by default)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no segment measurements at {path}; run `python tools/measure_segments.py`")
    return list(_read_lines(path))
