"""Benchmark: peak memory of ``chainmark detect`` on 4, 40 and 400 MB texts, scored in pieces, against
scoring the text whole (the baseline, what detect did before), in one run.

    .venv/bin/python benchmarks/bench_stream.py [--sizes 4 40 400] [--whole-up-to 40] [--max-peak-mb 1024]

The corpus is built from what ships, so anyone can rebuild it: the book's
reference run (every stored reply, watermarked and not, of the embedded
model: ``cmlab.harness.reference.load_texts``) and the prose of the Python
Language Reference (``cmlab.harness.corpora.python_reference_documents``), one
document per paragraph, blank lines between them. That base (a few MB) is
repeated, each copy in a freshly shuffled document order (seeded), until the
size is reached. Each measurement is a separate process running
``chainmark detect --test z --json`` on the file (the z-test, exact test and
distinct pairs share the same counters) that reports its own peak resident
memory (``ru_maxrss``) and wall time. The baseline process reads the same
file whole and calls ``detect_text`` on it, as the command did before texts
were scored in pieces; it runs up to ``--whole-up-to`` MB (at 400 MB it
would need some 100 GB).

Printed: for each size, the peak memory and throughput of both, and their
ratio; the two verdicts must agree exactly where both ran. The exit status is
1 if the pieces' peak memory exceeds ``--max-peak-mb`` at any size, or grows
by more than 25% from the smallest to the largest size (flat is the claim),
or a verdict differs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

PIECES = """
import json, resource, sys, time
from chainmark import cli
start = time.perf_counter()
code = cli.main(["detect", "--key-file", sys.argv[1], "--test", "z", "--json", sys.argv[2]])
print(json.dumps({"seconds": time.perf_counter() - start, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "code": code}), file=sys.stderr)
"""

WHOLE = """
import json, resource, sys, time
from chainmark.config import ChainMarkConfig
from chainmark.detection import detect_text
from chainmark.auditor.keyfiles import read_key_file
from chainmark.auditor.tokenizer import load_tokenizer
start = time.perf_counter()
text = open(sys.argv[2], encoding="utf-8").read()
r = detect_text(text, load_tokenizer(), ChainMarkConfig(read_key_file(sys.argv[1]), S=5), test="z")
print(json.dumps({"n_tokens": r.n_tokens, "n_valid": r.n_hits, "z": r.z}))
print(json.dumps({"seconds": time.perf_counter() - start, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "code": 0}), file=sys.stderr)
"""


def base_documents() -> list[str]:
    from cmlab.harness.corpora import shipped_texts

    return shipped_texts()


def build_corpus(path: Path, megabytes: int, docs: list[str], seed: int = 0) -> None:
    """Write ``megabytes`` MB of the documents, each copy of the set in a new shuffled order."""
    rng = np.random.default_rng(seed)
    target, written = megabytes * 1_000_000, 0
    with open(path, "w", encoding="utf-8", newline="") as fh:
        while written < target:
            for i in rng.permutation(len(docs)):
                block = docs[i].strip() + "\n\n"
                fh.write(block)
                written += len(block.encode("utf-8"))
                if written >= target:
                    break


def measure(script: str, key: Path, text: Path) -> tuple[dict, dict]:
    proc = subprocess.run([sys.executable, "-c", script, str(key), str(text)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    stats = json.loads(proc.stderr.strip().splitlines()[-1])
    if proc.returncode != 0 or stats["code"] != 0:
        raise SystemExit(f"measurement failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[0]), stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 40, 400], help="corpus sizes in MB")
    parser.add_argument("--whole-up-to", type=int, default=40, help="largest size the baseline scores whole")
    parser.add_argument("--max-peak-mb", type=float, default=1024.0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    from chainmark.auditor.keyfiles import write_key_file

    docs = base_documents()
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "bench.key"
        write_key_file(key, bytes(range(32)))
        print(f"corpus: {len(docs)} shipped documents ({sum(map(len, docs)) / 1e6:.1f} M characters), repeated "
              "in shuffled order; detect --test z --json on the embedded tokenizer")
        print(f"{'size':>7}  {'pieces: peak':>13}  {'MB/s':>6}  {'whole: peak':>12}  {'MB/s':>6}  "
              f"{'peak ratio':>10}  verdicts")
        for mb in sorted(args.sizes):
            path = Path(tmp) / f"corpus_{mb}.txt"
            build_corpus(path, mb, docs)
            pieces, p_stats = measure(PIECES, key, path)
            row = {"megabytes": mb, "pieces_peak_mb": p_stats["peak_kb"] / 1024, "pieces_seconds": p_stats["seconds"],
                   "n_tokens": pieces["n_tokens"]}
            line = (f"{mb:>4} MB  {row['pieces_peak_mb']:>10.0f} MB  {mb / p_stats['seconds']:>6.2f}")
            if mb <= args.whole_up_to:
                whole, w_stats = measure(WHOLE, key, path)
                agree = all(whole[k] == pieces[k] for k in ("n_tokens", "n_valid", "z"))
                ok &= agree
                row.update(whole_peak_mb=w_stats["peak_kb"] / 1024, whole_seconds=w_stats["seconds"], agree=agree)
                line += (f"  {row['whole_peak_mb']:>9.0f} MB  {mb / w_stats['seconds']:>6.2f}  "
                         f"{row['whole_peak_mb'] / row['pieces_peak_mb']:>9.1f}x  {'identical' if agree else 'DIFFER'}")
            else:
                line += f"  {'(not run)':>12}  {'':>6}  {'':>10}  -"
            print(line, flush=True)
            rows.append(row)
            path.unlink()
    peaks = [r["pieces_peak_mb"] for r in rows]
    flat = max(peaks) <= 1.25 * peaks[0]
    under = max(peaks) <= args.max_peak_mb
    print(f"pieces' peak memory from {rows[0]['megabytes']} to {rows[-1]['megabytes']} MB: {peaks[0]:.0f} -> "
          f"{peaks[-1]:.0f} MB ({'flat' if flat else 'GROWS'}); largest {max(peaks):.0f} MB "
          f"({'under' if under else 'OVER'} {args.max_peak_mb:.0f} MB)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "flat": flat, "under_limit": under}, indent=1) + "\n")
    return 0 if (ok and flat and under) else 1


if __name__ == "__main__":
    sys.exit(main())
