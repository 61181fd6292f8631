"""Benchmark: loading the embedded model from its converted checkpoint (every load after the first) against the
first load, which de-quantises the GGUF file and writes that checkpoint (the baseline), in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_model_load.py [--repeats 3] [--min-ratio 10]

Each repeat gives ``cmlab.harness.models.load_model`` an empty cache
folder (``CHAINMARK_CACHE``) and loads twice: the first load converts, the
second reads what the first wrote, as every chapter after the first does.
Both run in this process after a warm-up load, so neither pays for importing
torch and transformers. Printed: the median of each and their ratio (first /
cached); the exit status is 1 if the ratio is below ``--min-ratio``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any


def _timed_load() -> float:
    from cmlab.harness.models import load_model

    start = time.perf_counter()
    load_model()
    return time.perf_counter() - start


def measure(repeats: int) -> dict[str, Any]:
    """Median seconds of a first (converting) and a cached load, each repeat with a fresh cache folder."""
    from cmlab.harness.models import CACHE_ENV

    first, cached = [], []
    before = os.environ.get(CACHE_ENV)
    try:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as folder:
                os.environ[CACHE_ENV] = folder
                first.append(_timed_load())
                cached.append(_timed_load())
    finally:
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before
    return {"repeats": repeats, "first_seconds": first, "cached_seconds": cached,
            "ratio": statistics.median(first) / statistics.median(cached)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-ratio", type=float, default=10.0,
                        help="smallest allowed ratio of the first load's time to the cached load's")
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    _timed_load()  # warm-up: imports, and the user's cache, so that the repeats time loading alone
    out = measure(args.repeats)
    med = statistics.median
    print(f"embedded model, {args.repeats} repeats, each with an empty cache folder; median [min]")
    print(f"  first load (de-quantise the GGUF, write the checkpoint) {med(out['first_seconds']):7.2f} s  "
          f"[{min(out['first_seconds']):.2f}]")
    print(f"  cached load (read the checkpoint)                      {med(out['cached_seconds']):7.2f} s  "
          f"[{min(out['cached_seconds']):.2f}]")
    print(f"ratio (first / cached, medians): {out['ratio']:.1f}x  (required >= {args.min_ratio:g}x)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0 if out["ratio"] >= args.min_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
