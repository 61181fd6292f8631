"""Benchmark: what ChainMark's vLLM processor costs a server, and vLLM against transformers' batched generate.

    .venv/bin/python benchmarks/bench_vllm.py [--prompts 32] [--new-tokens 128] [--repeats 4] [--no-fail]

Smallest run (checks that the script works; its verdicts mean nothing):

    .venv/bin/python benchmarks/bench_vllm.py --prompts 4 --new-tokens 8 --repeats 2 --no-fail

vLLM's CPU build runs in its own environment (``make vllm``). One engine is started with
:class:`chainmark.serving.vllm.ChainMarkProcessor` installed, and the same batch of chat prompts (the reference
run's operating-point prompts, the end of sequence ignored so that every run decodes the same number of tokens)
is generated ``repeats`` times with every request keyed and ``repeats`` times with none, interleaved, the order
alternating. Without a key the processor returns the step's logits at once, so the unkeyed runs are the engine
without the watermark; each repeat gives a paired ratio (keyed seconds over unkeyed), reported as median and
range. Target: <= 1.05 x. Then transformers' ``chainmark.generate`` (the processor in ``model.generate``, batch 8
as the book generates) decodes the same prompts in this process, once, for tokens per second beside vLLM's.
Results go to ``benchmarks/results/bench_vllm.json`` with the first keyed request and its reply, for the book's
serving page. Exit status 1 when the target is missed (0 with ``--no-fail``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cmlab.harness.reference.protocol import reference_key  # noqa: E402
from cmlab.harness.models import vllm_checkpoint  # noqa: E402
from chainmark.serving.batch import ServingConfig  # noqa: E402
from cmlab.harness.serving import reference_requests, run_vllm, serving_folder  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "bench_vllm.json"
TARGET = 1.05


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--no-fail", action="store_true")
    args = parser.parse_args(argv)
    requests = reference_requests(args.prompts)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        serving = serving_folder(work / "server", {"reference": reference_key()})
        gate = ServingConfig.from_file(serving).gate  # the same gate for transformers' run below
        model = vllm_checkpoint(work / "model")
        out = run_vllm({"model": str(model), "max_tokens": args.new_tokens, "temperature": 0.7, "ignore_eos": True,
                        "requests": requests, "repeats": args.repeats}, serving, work / "run")
    runs = out["timings"]
    pairs = []
    for repeat in range(args.repeats):
        by = {r["keyed"]: r for r in runs if r["repeat"] == repeat}
        pairs.append(by[True]["seconds"] / by[False]["seconds"])
    keyed = [r for r in runs if r["keyed"]]
    plain = [r for r in runs if not r["keyed"]]
    rate = {name: statistics.median(r["tokens"] / r["seconds"] for r in group)
            for name, group in (("vllm_keyed", keyed), ("vllm_unkeyed", plain))}
    ratio = statistics.median(pairs)
    print(f"vLLM {out['vllm']}, {args.prompts} prompts x {args.new_tokens} tokens, {args.repeats} paired repeats")
    print(f"  with the processor   {rate['vllm_keyed']:8.1f} tokens/s")
    print(f"  without (no key)     {rate['vllm_unkeyed']:8.1f} tokens/s")
    print(f"  paired ratio (time)  {ratio:.3f} x  [{min(pairs):.3f}, {max(pairs):.3f}]  target <= {TARGET} x: "
          f"{'met' if ratio <= TARGET else 'MISSED'}")

    import torch

    from chainmark import ChainMarkConfig
    from chainmark.embed import Sampling, generate
    from cmlab.harness.models import load_model

    model_hf, tokenizer = load_model()
    config = ChainMarkConfig(reference_key(), S=5, rho=0.5, gate=gate.kind)
    started = time.perf_counter()  # every reply its full length, as vLLM's with the end of sequence ignored
    replies = generate(model_hf, tokenizer, [r["prompt"] for r in requests], config, gate,
                       sampling=Sampling(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens))
    seconds = time.perf_counter() - started
    rate["transformers_generate"] = sum(g.n_tokens for g in replies) / seconds
    print(f"  transformers' generate with the processor (batch 8): {rate['transformers_generate']:8.1f} tokens/s; "
          f"vLLM {rate['vllm_keyed'] / rate['transformers_generate']:.1f} x as fast")
    first = next(i for i, r in enumerate(requests) if r["key_id"])
    result = {"vllm": out["vllm"], "prompts": args.prompts, "new_tokens": args.new_tokens, "repeats": args.repeats,
              "tokens_per_second": rate, "paired_ratios": pairs, "ratio": ratio, "target": TARGET,
              "load_seconds": out["load_seconds"], "threads": torch.get_num_threads(),
              "example": {"prompt": requests[first]["prompt"],
                          "reply": out["replies"][first]["text"]},
              "gate": {"kind": gate.kind, "tau": gate.tau}}
    RESULTS.write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    print(f"wrote {RESULTS}")
    return 0 if ratio <= TARGET or args.no_fail else 1


if __name__ == "__main__":
    sys.exit(main())
