"""Benchmark: vectorised detection against the per-token hashlib loop, in one run.

    .venv/bin/python benchmarks/bench_detect.py [--n 1000000] [--repeats 15] [--min-ratio 100]

Both detectors see the same 1,000,000 random token ids (vocabulary 49,152,
the embedded model's). The reference is the paper's listing restated in
``tests/paper_listing.py`` (``reference_detect``): one SHA-256 per token in a Python
loop, on a Python list (its natural input). The vectorised detector is
timed warm (state table already cached, the steady state of an auditor
checking many texts with one key) on the numpy array a tokenizer returns
with ``return_tensors="np"``; cold (first call for a fresh key, which hashes
the whole vocabulary once) and list-input timings are printed too. Medians
of several runs; the exit status is 1 if the warm ratio is below
``--min-ratio``.

The exact test (``test="exact"``: the spanning forest, then the binomial
tail) and distinct pairs are timed warm on the same ids beside the z-test,
and on 1,000 texts of 200 tokens (an audit's typical unit); the exit status
is also 1 if the exact test is more than ``--max-exact-ratio`` times slower
than the z-test on either.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from pathlib import Path

import numpy as np

from chainmark.config import ChainMarkConfig
from chainmark.detection import detect, detect_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from paper_listing import reference_detect  # noqa: E402  (the paper's listing lives with the tests)

VOCAB = 49152


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="tokens per detection")
    parser.add_argument("--repeats", type=int, default=15, help="runs of the vectorised detector")
    parser.add_argument("--ref-repeats", type=int, default=3, help="runs of the per-token loop")
    parser.add_argument("--S", type=int, default=5)
    parser.add_argument("--min-ratio", type=float, default=100.0)
    parser.add_argument("--max-exact-ratio", type=float, default=3.0,
                        help="largest allowed time of the exact test over the z-test's")
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, args.n)  # int64, as tokenizers return them
    ids_list = ids.tolist()
    key = os.urandom(32)  # a throwaway key: nothing here is secret
    config = ChainMarkConfig(key, S=args.S)

    # cold: a fresh key each time, so the state table is built inside the timing
    cold = []
    for _ in range(3):
        fresh = ChainMarkConfig(os.urandom(32), S=args.S)
        start = time.perf_counter()
        detect(ids, fresh, vocab_size=VOCAB)
        cold.append(time.perf_counter() - start)

    detect(ids, config, vocab_size=VOCAB)  # warm the cache for this key
    warm = timed(lambda: detect(ids, config, vocab_size=VOCAB), args.repeats)
    warm_nov = timed(lambda: detect(ids, config), args.repeats)
    lists = timed(lambda: detect(ids_list, config, vocab_size=VOCAB), max(3, args.repeats // 3))
    batch = ids.reshape(1000, -1) if args.n % 1000 == 0 else ids[None, :]
    batched = timed(lambda: detect_batch(batch, config, vocab_size=VOCAB), max(3, args.repeats // 3))
    ref = timed(lambda: reference_detect(ids_list, key, args.S), args.ref_repeats)
    exact = timed(lambda: detect(ids, config, vocab_size=VOCAB, test="exact"), args.repeats)
    distinct = timed(lambda: detect(ids, config, vocab_size=VOCAB, test="distinct"), args.repeats)
    texts = rng.integers(0, VOCAB, (1000, 200))

    def audit(test: str) -> None:
        for row in texts:
            detect(row, config, vocab_size=VOCAB, test=test)

    short_z = timed(lambda: audit("z"), max(3, args.repeats // 3))
    short_exact = timed(lambda: audit("exact"), max(3, args.repeats // 3))

    fast, slow = detect(ids, config, vocab_size=VOCAB), reference_detect(ids_list, key, args.S)
    if fast.phi != slow["phi"] or fast.z != slow["z"]:
        print(f"MISMATCH: vectorised phi={fast.phi} z={fast.z}, reference {slow}", file=sys.stderr)
        return 2

    med = statistics.median
    ratio = med(ref) / med(warm)
    rows = [
        ("reference per-token hashlib loop (list)", ref),
        ("detect, warm, numpy ids, vocab_size given", warm),
        ("detect, warm, numpy ids, vocab_size unknown", warm_nov),
        ("detect, warm, Python list of ids", lists),
        (f"detect_batch, warm, {batch.shape[0]} rows", batched),
        ("detect, cold (fresh key: hashes the vocabulary)", cold),
        ("detect, warm, distinct pairs", distinct),
        ("detect, warm, exact test (forest + binomial)", exact),
    ]
    print(f"{args.n:,} tokens, S = {args.S}, vocabulary {VOCAB:,}; median [min] of repeated runs")
    for name, ts in rows:
        print(f"  {name:50s} {med(ts) * 1e3:10.2f} ms  [{min(ts) * 1e3:.2f}]  x{med(ref) / med(ts):8.1f}")
    print(f"ratio (reference / warm vectorised, medians): {ratio:.1f}x  (required >= {args.min_ratio:g}x)")
    exact_ratio = med(exact) / med(warm)
    short_ratio = med(short_exact) / med(short_z)
    print(f"1,000 texts of 200 tokens: z-test {med(short_z) * 1e3:.1f} ms, exact test {med(short_exact) * 1e3:.1f} ms")
    print(f"exact test / z-test, medians: {exact_ratio:.2f}x on {args.n:,} tokens, {short_ratio:.2f}x on 200-token "
          f"texts  (allowed <= {args.max_exact_ratio:g}x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({name: ts for name, ts in rows} | {"ratio": ratio, "n": args.n, "exact_ratio": exact_ratio,
                                                         "exact_ratio_200": short_ratio}, fh, indent=1)
    slow_exact = max(exact_ratio, short_ratio) > args.max_exact_ratio
    return 0 if ratio >= args.min_ratio and not slow_exact else 1


if __name__ == "__main__":
    sys.exit(main())
