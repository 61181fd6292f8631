"""Benchmark: the key-randomisation test and the segment scan against scoring the text once, in one run.

    .venv/bin/python benchmarks/bench_randomisation.py [--n 10000] [--draws 999] [--repeats 7] [--max-seconds 1.0]

A text of ``--n`` token ids with prose-like repetition (a Zipf law over the
embedded model's vocabulary) is scored once with :func:`chainmark.detect` (the
baseline, warm), then tested with :func:`chainmark.key_randomisation_test`
(``--draws`` re-drawn keys, the legal count) and searched with
:func:`chainmark.detect_segments` (the window scan, ``--draws`` keys). Medians
of several runs; the ratios say how many single detections each costs.
Then a short text under many fresh keys (the validity simulations' case):
the states of a 60-token text under 200 new keys, hashing only its own ids
(what :func:`chainmark.partition.states_of` does for a short text and a key
without a table) against building each key's dense table first. The exit status is 1 if the key-randomisation test takes more than
``--max-seconds`` (the target: well under a second on one core).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from chainmark.config import ChainMarkConfig
from chainmark.detection import detect
from chainmark.keys import hkdf
from chainmark.partition import state_table, states_of
from chainmark.randomisation import key_randomisation_test
from chainmark.auditor.segments import detect_segments

VOCAB = 49152
KEY = b"benchmark key of thirty-two bytes"
CONFIG = ChainMarkConfig(KEY, S=5)


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--draws", type=int, default=999)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--max-seconds", type=float, default=1.0)
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    weights = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    ids = rng.choice(VOCAB, size=args.n, p=weights / weights.sum())
    detect(ids, CONFIG, vocab_size=VOCAB)  # warm the state table, as an auditor with one key is
    once = median_seconds(lambda: detect(ids, CONFIG, vocab_size=VOCAB), args.repeats * 3)
    redraw = median_seconds(lambda: key_randomisation_test(ids, CONFIG, draws=args.draws, vocab_size=VOCAB),
                            args.repeats)
    scan = median_seconds(lambda: detect_segments(ids, CONFIG, draws=args.draws, vocab_size=VOCAB), args.repeats)
    out = {"n": args.n, "draws": args.draws, "distinct_tokens": int(np.unique(ids).size),
           "detect_seconds": once, "randomisation_seconds": redraw, "scan_seconds": scan,
           "randomisation_over_detect": redraw / once, "scan_over_detect": scan / once}
    print(f"{args.n:,} tokens ({out['distinct_tokens']:,} distinct), {args.draws} re-drawn keys")
    print(f"detect once:             {1e3 * once:8.2f} ms")
    print(f"key-randomisation test:  {1e3 * redraw:8.2f} ms  ({out['randomisation_over_detect']:.0f} x detect, "
          f"{1e6 * redraw / args.draws:.0f} us per key)")
    print(f"segment scan:            {1e3 * scan:8.2f} ms  ({out['scan_over_detect']:.0f} x detect)")
    short = rng.choice(VOCAB, size=60, p=weights / weights.sum())
    fresh = iter(hkdf(f"bench key {i}".encode(), b"chainmark/bench") for i in range(10**9))
    size = 1 << int(short.max()).bit_length()
    sparse = median_seconds(lambda: [states_of(short, next(fresh), 5) for _ in range(200)], args.repeats)
    dense = median_seconds(lambda: [np.take(state_table(next(fresh), size, 5), short) for _ in range(200)],
                           args.repeats)
    out.update(fresh_keys_sparse_seconds=sparse, fresh_keys_dense_seconds=dense, fresh_keys_speedup=dense / sparse)
    print(f"60 tokens, 200 fresh keys: own ids {1e3 * sparse:.1f} ms, dense table of {size:,} first "
          f"{1e3 * dense:.1f} ms ({dense / sparse:.0f} x faster)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0 if redraw <= args.max_seconds else 1


if __name__ == "__main__":
    sys.exit(main())
