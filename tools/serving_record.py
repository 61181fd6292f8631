"""Record the serving page's vLLM run: the reference run's prompts served by vLLM with ChainMark, two accounts.

    python tools/serving_record.py          # about 2 minutes on 2 cores; needs vLLM's environment (make vllm)
    python tools/serving_record.py --force  # run again over an existing record

The batch is :func:`cmlab.harness.serving.mixed_requests`: the reference run's 100 operating-point prompts under
the reference account's key and every sixth of them once more under ``acct-b``'s, whose key is derived from the
reference key (:func:`cmlab.harness.serving.account_key`), so a reader re-derives both keys. All of it goes to
one ``LLM.generate`` call (``tools/vllm_replies.py``): requests of both accounts share the engine's batches.
The record (``book/cmlab/data/serving/vllm_run.json.gz``, read by :func:`cmlab.harness.serving.load_serving`)
keeps each request's prompt ids, account and twin, each reply's token ids and text, vLLM's version and seconds,
and the throughput summary of ``benchmarks/results/bench_vllm.json`` (run ``benchmarks/bench_vllm.py`` first
when the processor changed). Nothing is scored here: the page detects the replies itself.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from chainmark.jsonio import atomic_write, to_jsonable  # noqa: E402
from chainmark.serving.batch import ServingConfig  # noqa: E402
from cmlab.harness.models import vllm_checkpoint  # noqa: E402
from cmlab.harness.serving import SERVING_RECORD, account_key, mixed_requests, run_vllm, serving_folder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "results" / "bench_vllm.json"
SAMPLING = {"max_tokens": 200, "temperature": 0.7, "seed": 0}
OTHER = "acct-b"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="run again over an existing record")
    args = parser.parse_args(argv)
    if SERVING_RECORD.exists() and not args.force:
        print(f"{SERVING_RECORD} exists (use --force to run again)")
        return 0
    if not BENCH.exists():
        sys.exit(f"{BENCH} is missing: run benchmarks/bench_vllm.py first")
    bench = json.loads(BENCH.read_text("utf-8"))
    requests = mixed_requests(OTHER)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        serving = serving_folder(work / "server", {"reference": account_key("reference"),
                                                   OTHER: account_key(OTHER)})
        gate = ServingConfig.from_file(serving).gate
        model = vllm_checkpoint(work / "model")
        out = run_vllm({"model": str(model), **SAMPLING, "requests": requests}, serving, work / "run")
    record = {
        "vllm": out["vllm"], "sampling": SAMPLING, "S": 5, "rho": 0.5,
        "gate": {"kind": gate.kind, "tau": gate.tau},
        "accounts": {"reference": "the reference key", OTHER: f"derive_key(reference_key(), 'serving/{OTHER}')"},
        "requests": [{"prompt_ids": r["prompt_ids"], "key_id": r["key_id"], "twin": r.get("twin")}
                     for r in requests],
        "replies": out["replies"], "seconds": out["seconds"], "load_seconds": out["load_seconds"],
        "throughput": {k: bench[k] for k in ("vllm", "prompts", "new_tokens", "repeats", "tokens_per_second",
                                             "paired_ratios", "ratio", "target", "threads")},
    }
    atomic_write(SERVING_RECORD, gzip.compress(json.dumps(to_jsonable(record)).encode("utf-8"), mtime=0))
    print(f"wrote {SERVING_RECORD}: {len(requests)} replies in {out['seconds']:.0f} s (vLLM {out['vllm']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
