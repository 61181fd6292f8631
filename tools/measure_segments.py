"""Measure the segment finder on the committed mixed documents, beside a ported peer and the whole-text test.

    python tools/measure_segments.py [--keys 50] [--draws 999] [--alpha 0.01] [--out FILE]

Two parts, written as resumable JSON lines (one per document, key and method,
into ``FILE.partial`` while running, a rerun skipping what is on disk, so an
interrupted run loses at most a line; gzipped into ``FILE`` at the end):

* ``null``: every segment-free document, under ``--keys`` random keys (HKDF of
  a public label and the key's index): any span reported is a family-wise
  false positive;
* ``power``: every document with segments, under the key they were generated
  with (the reference run's): which true segments are found, with their
  intersection over union and boundary error, and the false spans.

The scan's re-drawn keys are seeded from the key and the document's name
(:func:`chainmark.randomisation.key_seed`), so its error rate is the one a
deployment sees.

Methods: ``scan`` (:func:`chainmark.auditor.segments.detect_segments`: windows on a
geometric grid, their maximum calibrated by re-drawing the key), ``cover``
(the ported peer: the geometry cover with Bonferroni-corrected exact tests per
interval) and ``whole`` (the whole-text exact test, which finds no span: it
says only whether the document holds a watermark). The summary the book shows
comes from :func:`cmlab.harness.mixed.segment_summary` on this file.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

from chainmark.config import ChainMarkConfig
from chainmark.detection import detect
from cmlab.harness.mixed import MIXED_FILE, load_mixed_documents, match_segments, mixed_config
from chainmark.keys import hkdf
from chainmark.randomisation import key_seed
from chainmark.auditor.segments import detect_segments
from cmlab.comparison.segments_peer import cover_segments

RESULTS = MIXED_FILE.with_name("results.jsonl.gz")
METHODS = ("scan", "cover", "whole")


def null_key(i: int) -> bytes:
    """The i-th random key of the null part (public: HKDF of a label and the index)."""
    return hkdf(f"chainmark mixed-documents null key {i}".encode("utf-8"), b"chainmark/v1/mixed-null")


def read_lines(path: Path) -> list[str]:
    """The complete JSON lines of a records file (gzipped or plain; a line cut by an interruption is dropped)."""
    if not path.exists():
        return []
    text = gzip.open(path, "rt", encoding="utf-8").read() if path.suffix == ".gz" else path.read_text("utf-8")
    out = []
    for line in text.splitlines():
        try:
            json.loads(line)
        except json.JSONDecodeError:
            continue
        out.append(line)
    return out


def run_method(method: str, ids, config, alpha: float, draws: int, seed: int) -> tuple[list, float]:
    """Spans ([start, end) token positions) that ``method`` reports on ``ids``, and its seconds."""
    t0 = time.perf_counter()
    if method == "scan":  # the seed follows the key (and the document), as the package's default does
        spans = [(s.start, s.end) for s in detect_segments(ids, config, alpha=alpha, draws=draws, seed=seed).segments]
    elif method == "cover":
        spans = [(s.start, s.end) for s in cover_segments(ids, config, alpha=alpha).segments]
    else:
        res = detect(ids, config, alpha=alpha, test="exact")
        spans = [(0, int(len(ids)))] if res.is_watermarked else []
    return spans, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=50, help="random keys per segment-free document (default 50)")
    parser.add_argument("--draws", type=int, default=999, help="re-drawn keys of the scan's null (default 999)")
    parser.add_argument("--alpha", type=float, default=0.01, help="family-wise level (default 0.01)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"records file (default {RESULTS})")
    parser.add_argument("--parts", nargs="+", choices=("null", "power"), default=("power", "null"))
    args = parser.parse_args(argv)
    docs = load_mixed_documents()
    partial = args.out.with_name(args.out.name + ".partial")  # plain JSON lines while running, for resuming
    lines = read_lines(args.out) + read_lines(partial)
    done = {(r["part"], r["document"], r["key"], r["method"]) for r in map(json.loads, lines)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text("".join(ln + "\n" for ln in lines), "utf-8")
    reference = mixed_config()
    jobs = []
    if "power" in args.parts:
        jobs += [("power", d, 0, reference) for d in docs if d.segments]
    if "null" in args.parts:
        for i in range(args.keys):
            config = ChainMarkConfig(null_key(i), S=reference.S, rho=reference.rho, topology=reference.topology)
            jobs += [("null", d, i, config) for d in docs if not d.segments]
    todo = [(p, d, i, c, m) for p, d, i, c in jobs for m in METHODS if (p, d.name, i, m) not in done]
    print(f"{len(todo)} of {len(jobs) * len(METHODS)} records to compute -> {args.out}", flush=True)
    start = time.perf_counter()
    with open(partial, "a", encoding="utf-8") as fh:
        for count, (part, doc, i, config, method) in enumerate(todo, 1):
            seed = key_seed(config.key, doc.name)
            spans, seconds = run_method(method, doc.token_ids, config, args.alpha, args.draws, seed)
            truth = doc.segments if part == "power" else ()
            rec = {"part": part, "document": doc.name, "design": doc.design, "n_tokens": doc.n_tokens, "key": i,
                   "method": method, "alpha": args.alpha, "draws": args.draws if method == "scan" else None,
                   "spans": [list(s) for s in spans], "seconds": round(seconds, 4),
                   **match_segments(spans, truth)}
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            if count % 2000 == 0:
                el = time.perf_counter() - start
                print(f"{count}/{len(todo)} in {el:.0f} s (about {el / count * (len(todo) - count):.0f} s left)",
                      flush=True)
    lines = read_lines(partial)
    with open(args.out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write("".join(ln + "\n" for ln in sorted(lines)).encode("utf-8"))
    partial.unlink()
    print(f"{len(lines)} records -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
