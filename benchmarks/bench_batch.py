"""Benchmark: generation throughput (tokens/s) against batch size, to choose the reference run's batch.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_batch.py [--batches 8 16 20 25 32 64] [--json out.json]

Smallest run (checks that the script works; its numbers mean nothing):

    .venv/bin/python benchmarks/bench_batch.py --batches 1 2 --new-tokens 4 --domains factual

ChainMark at the reference's operating point (S = 5, rho = 0.5, high-entropy
gate, temperature 0.7) generates a fixed number of new tokens (EOS
suppressed) for one domain-pure batch of each size, as the reference run's
batches are, for each domain asked (code prompts are long, factual ones
short: padding and prefill differ). It prints tokens per second for every
batch size and its ratio to batch 8 measured in the same run, and which size
is fastest. The reference's batch size should also divide the 100 prompts of
a domain, so that its batches stay domain-pure without a small remainder
batch; the verdict names the fastest such size too.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from chainmark.config import ChainMarkConfig  # noqa: E402
from chainmark.embed import Sampling, calibrate_gate, generate  # noqa: E402
from cmlab.harness.models import load_model  # noqa: E402
from cmlab.harness.prompts import load_prompts  # noqa: E402
from cmlab.harness.reference.protocol import PROTOCOL, reference_key  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 16, 20, 25, 32, 64])
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--domains", nargs="+", default=["wiki", "code"])
    parser.add_argument("--json", metavar="FILE", help="also write the measurements to FILE")
    args = parser.parse_args(argv)
    if any(b < 1 for b in args.batches) or args.new_tokens < 1:
        parser.error("--batches and --new-tokens must be at least 1")
    model, tok = load_model(device="cpu")
    config = ChainMarkConfig(reference_key(), S=PROTOCOL.S, rho=PROTOCOL.rho, gate="high_entropy")
    gate = calibrate_gate(model, tok, load_prompts("writing", 4), "high_entropy", PROTOCOL.rho,
                          sampling=Sampling(max_new_tokens=32))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.new_tokens} new tokens per text")
    results: dict[str, dict[int, float]] = {}
    for domain in args.domains:
        prompts = load_prompts(domain, max(args.batches))
        results[domain] = {}
        for b in args.batches:
            t0 = time.perf_counter()
            gens = generate(model, tok, prompts[:b], config, gate,
                            sampling=Sampling(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                              batch_size=b, temperature=PROTOCOL.temperature))
            seconds = time.perf_counter() - t0
            results[domain][b] = sum(g.n_tokens for g in gens) / seconds
            print(f"  {domain:8s} batch {b:3d}: {results[domain][b]:7.1f} tokens/s ({seconds:6.1f} s)", flush=True)
    base = min(args.batches, key=lambda b: abs(b - 8))
    print(f"tokens/s relative to batch {base} (same run), per domain and averaged:")
    mean = {b: sum(results[d][b] / results[d][base] for d in results) / len(results) for b in args.batches}
    for b in args.batches:
        cells = "  ".join(f"{d} {results[d][b] / results[d][base]:.2f}x" for d in results)
        print(f"  batch {b:3d}: {cells}   mean {mean[b]:.2f}x")
    best = max(args.batches, key=lambda b: mean[b])
    fits = [b for b in args.batches if 100 % b == 0]  # divides the 100 prompts of a domain
    print(f"fastest: batch {best} ({mean[best]:.2f}x batch {base})"
          + (f"; fastest that keeps the reference's batches domain-pure: batch {max(fits, key=lambda b: mean[b])}"
             if fits else ""))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"new_tokens": args.new_tokens, "tokens_per_second": results, "relative": mean}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
