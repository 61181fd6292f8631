"""Benchmark: what a text's own null over random keys costs (``chainmark.auditor.repetition``), against scoring the
text as ``chainmark detect`` does, from its characters (tokenize, then the z-test: the baseline), in one run.

    .venv/bin/python benchmarks/bench_text_null.py [--sizes 1000 10000 100000 700000] [--repeats 5]

The texts are prefixes of the shipped corpus as one token stream (every stored reply of the reference run
and the Python Language Reference's prose, ``cmlab.harness.corpora.shipped_texts``), tokenized by the embedded
tokenizer: the longer the prefix, the more pairs repeat. For each size: the median seconds of scoring the
decoded prefix (tokenizing it and ``detect``, z-test, clockwork, S = 5), of ``detect`` alone, and of
``text_null`` followed by ``null_fpr`` (the pair multiplicities, the exact moments and the distribution),
the null's cost as a share of the scoring, and the text's repeated-pair share and variance ratio. The exit
status is 1 if the null costs more than ``--max-ratio`` times the scoring at any size.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cmlab.harness.corpora import shipped_texts  # noqa: E402
from chainmark.config import ChainMarkConfig  # noqa: E402
from chainmark.detection import detect  # noqa: E402
from chainmark.auditor.repetition import null_fpr, text_null  # noqa: E402
from chainmark.auditor.tokenizer import load_tokenizer  # noqa: E402
from chainmark.topology import Topology  # noqa: E402

KEY = b"bench-text-null-key-0123456789ab"


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 700_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-ratio", type=float, default=1.0)
    args = parser.parse_args()
    tokenizer = load_tokenizer()
    stream = np.array(tokenizer("\n\n".join(shipped_texts()), add_special_tokens=False)["input_ids"])
    topology = Topology.clockwork(5)
    config = ChainMarkConfig(KEY, S=5, topology=topology)
    vocab = len(tokenizer)
    print(f"corpus: {stream.size:,} tokens; clockwork, S = 5, z-test at alpha = 0.01")
    print(f"{'tokens':>9s} {'score s':>9s} {'detect s':>9s} {'null s':>9s} {'null/score':>10s} {'repeated':>9s} "
          f"{'var ratio':>10s} {'FPR over keys':>14s}")
    worst = 0.0
    for size in args.sizes:
        ids = stream[:size]
        text = tokenizer.decode(ids.tolist())

        def score() -> None:
            tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
            detect(tokens, config, 0.01, vocab_size=vocab, test="z")

        base = _median_seconds(score, args.repeats)
        alone = _median_seconds(lambda: detect(ids, config, 0.01, vocab_size=vocab, test="z"),
                                args.repeats)
        null = text_null(ids, topology)
        cost = _median_seconds(lambda: null_fpr(text_null(ids, topology), topology.p0, 2.3263478740408408),
                               args.repeats)
        pairs = set(zip(ids[:-1].tolist(), ids[1:].tolist()))
        share = 1 - len(pairs) / (ids.size - 1)
        ratio = cost / base
        worst = max(worst, ratio)
        print(f"{ids.size:9,d} {base:9.4f} {alone:9.4f} {cost:9.4f} {ratio:9.2f}x {100 * share:8.1f}% "
              f"{null.variance_ratio:10.2f} {null_fpr(null, topology.p0, 2.3263478740408408):14.4f}")
    print(f"the text's own null costs at most {worst:.2f} times scoring the text from its characters")
    return 0 if worst <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
