"""Generate replies through vLLM with ChainMark's logits processor; run in vLLM's own environment (``make vllm``).

    CHAINMARK_SERVING=serving.json .venv-vllm/bin/python tools/vllm_replies.py JOB.json OUT.json

``JOB.json`` names the model folder and the requests: ``{"model": "...", "max_tokens": 200, "temperature": 0.7,
"seed": 0, "ignore_eos": false, "requests": [{"prompt_ids": [...], "key_id": "acct-17" or null}, ...],
"repeats": 0}``. Every request
goes to one ``LLM.generate`` call, so requests under different keys share the engine's batches. ``OUT.json``
gets each reply's token ids and text, the seconds the engine took to start and to generate, and vLLM's version.
With ``"repeats": R`` the requests are then generated R more times, alternately with and without their key ids
(the processor installed, idle for unkeyed requests), and each run's seconds are recorded: what
``benchmarks/bench_vllm.py`` reads. The caller (``cmlab.harness.serving``) prepares the model folder, the key
folder and the serving configuration; this script imports no part of the book's lab, which vLLM's environment
does not hold.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def _params(job: dict, keyed: bool) -> list:
    from vllm import SamplingParams

    # no per-request seed: vLLM 0.32's CPU runner fails on a seeded request whose prompt is prefilled in chunks
    # ("CPU Generator does not use offset"); the engine's own seed (LLM(seed=...)) makes the run repeatable
    return [SamplingParams(max_tokens=job.get("max_tokens", 200), temperature=job.get("temperature", 0.7),
                           ignore_eos=job.get("ignore_eos", False), extra_args={"chainmark_key_id": r["key_id"]}
                           if keyed and r.get("key_id") else None)
            for r in job["requests"]]


def main(job_path: str, out_path: str) -> None:
    import vllm
    from vllm import LLM, TokensPrompt

    from chainmark.serving.vllm import ChainMarkProcessor

    job = json.loads(Path(job_path).read_text("utf-8"))
    started = time.perf_counter()
    llm = LLM(model=job["model"], dtype="float32", enforce_eager=True, logits_processors=[ChainMarkProcessor],
              max_model_len=job.get("max_model_len", 1024), gpu_memory_utilization=job.get("memory_share", 0.3),
              seed=job.get("seed", 0))
    load = time.perf_counter() - started
    prompts = [TokensPrompt(prompt_token_ids=r["prompt_ids"]) for r in job["requests"]]
    started = time.perf_counter()
    outputs = llm.generate(prompts, _params(job, keyed=True), use_tqdm=False)
    seconds = time.perf_counter() - started
    timings = []
    for repeat in range(job.get("repeats", 0)):
        for keyed in ((True, False) if repeat % 2 == 0 else (False, True)):
            started = time.perf_counter()
            runs = llm.generate(prompts, _params(job, keyed), use_tqdm=False)
            timings.append({"repeat": repeat, "keyed": keyed, "seconds": time.perf_counter() - started,
                            "tokens": sum(len(o.outputs[0].token_ids) for o in runs)})
    replies = [{"token_ids": list(o.outputs[0].token_ids), "text": o.outputs[0].text} for o in outputs]
    Path(out_path).write_text(json.dumps({"vllm": vllm.__version__, "load_seconds": load, "seconds": seconds,
                                          "replies": replies, "timings": timings}) + "\n", "utf-8")


if __name__ == "__main__":  # vLLM's engine core is a spawned process: the entry point must be guarded
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
