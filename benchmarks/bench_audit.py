"""Benchmark: `chainmark audit` against tokenizing the same corpus and doing nothing else, in one run.

    .venv/bin/python benchmarks/bench_audit.py [--docs 10000 100000] [--workers 1 2] [--min-ratio 0.8]

The limit of an audit is the tokenizer: scoring a tokenized text costs
microseconds. So the baseline is the tokenizer alone: the corpus's texts,
already in memory, tokenized with the same tokenizer in the same batches of
1,000 documents (``tokenizers``' ``encode_batch_fast``, the fastest call it
offers, which uses every core), and nothing else. The audit is timed end to end as a user runs it (a
separate process: reading the JSON Lines, tokenizing, scoring, writing the
part files, the q-values and the Parquet output), on this process
(``--scheduler none``) and on a local Dask cluster of 1 and 2 worker
processes. Each process reports its own peak resident memory
(``ru_maxrss``); for the Dask runs that is the client's (the workers' are
reported by Dask itself and hold one batch each).

The corpus is built from what ships: every stored reply of the book's
reference run (all experiments, every method, watermarked and not) and the
prose paragraphs of the Python Language Reference, repeated in a freshly
shuffled order (seeded) until the number of documents is reached, written
as JSON Lines (``{"id", "text"}``).

Printed: documents/s and tokens/s for the tokenizer alone and for each audit,
the ratio audit / tokenizer (end to end, and for the scoring of the batches
alone, which leaves out the command's start-up and the final merge), and the
peak memory at each corpus size. The exit status is 1 if the single-process
audit's end-to-end ratio is below ``--min-ratio`` at the largest size, or its
peak memory grows by more than 25% from the smallest to the largest corpus
(flat is the claim).
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

TOKENIZE_ONLY = """
import json, resource, sys, time
from chainmark.auditor.tokenizer import load_tokenizer
tok = load_tokenizer()
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
start = time.perf_counter()
tokens = 0
encode = getattr(tok.backend, "encode_batch_fast", None) or tok.backend.encode_batch  # the fastest it offers
for i in range(0, len(texts), 1000):
    tokens += sum(len(e.ids) for e in encode(texts[i:i + 1000], add_special_tokens=False))
seconds = time.perf_counter() - start
print(json.dumps({"documents": len(texts), "tokens": tokens, "seconds": seconds,
                  "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

AUDIT = """
import json, resource, sys, time
from chainmark import cli
start = time.perf_counter()
code = cli.main(sys.argv[1:])
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "code": code}),
      file=sys.stderr)
"""


def shipped_documents() -> list[str]:
    from cmlab.harness.corpora import shipped_texts

    return shipped_texts()


def build_corpus(path: Path, n_docs: int, docs: list[str], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    written = 0
    with open(path, "w", encoding="utf-8") as fh:
        while written < n_docs:
            for i in rng.permutation(len(docs))[: n_docs - written]:
                fh.write(json.dumps({"id": f"doc-{written:07d}", "text": docs[i]}) + "\n")
                written += 1


def run(script: str, *args: str) -> tuple[dict, dict]:
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"failed: {proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    err = [line for line in proc.stderr.splitlines() if line.startswith("{")]
    return out, json.loads(err[-1]) if err else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="local Dask cluster sizes")
    parser.add_argument("--min-ratio", type=float, default=0.8)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    from chainmark.auditor.keyfiles import write_key_file

    docs = shipped_documents()
    results, ok = [], True
    print(f"corpus: {len(docs):,} shipped documents repeated in shuffled order; {os.cpu_count()} CPUs")
    print("end to end: the whole command, start-up, reading, q-values and the Parquet output included; scoring: "
          "the batches alone (the summary's throughput)")
    print(f"{'documents':>10}  {'run':<22}  {'docs/s':>8}  {'tokens/s':>10}  {'vs tokenizer':>12}  {'peak MB':>8}  "
          f"{'scoring/s':>9}  {'ratio':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "bench.key"
        write_key_file(key, bytes(range(32)))
        for n in sorted(args.docs):
            corpus = Path(tmp) / f"corpus_{n}.jsonl"
            build_corpus(corpus, n, docs)
            base, _ = run(TOKENIZE_ONLY, str(corpus))
            base_rate = base["documents"] / base["seconds"]
            print(f"{n:>10,}  {'tokenizer only':<22}  {base_rate:>8,.0f}  {base['tokens'] / base['seconds']:>10,.0f}"
                  f"  {'1.00x':>12}  {base['peak_kb'] / 1024:>8.0f}", flush=True)
            row = {"documents": n, "tokens": base["tokens"], "tokenizer_docs_per_s": base_rate, "audits": {}}
            for label, scheduler in [("audit, this process", ["--scheduler", "none"])] + [
                    (f"audit, Dask {w} worker{'s' if w > 1 else ''}", ["--scheduler", "local", "--workers", str(w)])
                    for w in args.workers]:
                out = Path(tmp) / "out.parquet"
                summary, stats = run(AUDIT, "audit", str(corpus), "--id-field", "id", "--key-file", str(key),
                                     "--out", str(out), "--json", *scheduler)
                out.unlink()
                rate = summary["documents"] / stats["seconds"]
                ratio = rate / base_rate
                scoring = summary["scored_documents"] / summary["scoring_seconds"]
                row["audits"][label] = {"docs_per_s": rate, "ratio": ratio, "peak_mb": stats["peak_kb"] / 1024,
                                        "seconds": stats["seconds"], "scoring_docs_per_s": scoring,
                                        "scoring_ratio": scoring / base_rate}
                print(f"{n:>10,}  {label:<22}  {rate:>8,.0f}  {summary['tokens'] / stats['seconds']:>10,.0f}  "
                      f"{ratio:>11.2f}x  {stats['peak_kb'] / 1024:>8.0f}  {scoring:>9,.0f}  "
                      f"{scoring / base_rate:>6.2f}x", flush=True)
            results.append(row)
            corpus.unlink()
    single = [r["audits"]["audit, this process"] for r in results]
    flat = single[-1]["peak_mb"] <= 1.25 * single[0]["peak_mb"]
    fast = single[-1]["ratio"] >= args.min_ratio
    print(f"single-process audit at {results[-1]['documents']:,} documents: {single[-1]['ratio']:.2f}x the tokenizer "
          f"({'meets' if fast else 'BELOW'} {args.min_ratio}x); peak memory {single[0]['peak_mb']:.0f} -> "
          f"{single[-1]['peak_mb']:.0f} MB ({'flat' if flat else 'GROWS'})")
    if args.json:
        args.json.write_text(json.dumps({"rows": results, "flat": flat, "meets_ratio": fast}, indent=1) + "\n")
    return 0 if (flat and fast) else 1


if __name__ == "__main__":
    sys.exit(main())
