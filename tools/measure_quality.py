"""Measure what a forced token costs on the committed reference run, as the model sees it (a few minutes, 2 cores).

    python tools/measure_quality.py

One teacher-forced pass of the embedded model over the head-to-head's clean ChainMark replies and its unwatermarked
replies (the prompts' exact tokens before each) gives every generated token's surprise ``-log p(t)``. The watermarked
replies are split at their forced positions; the unwatermarked ones at the positions where the deployment's gate (the
reference run's calibrated threshold at its rho) would have opened, so that forced and sampled tokens are compared at
equally uncertain steps. The result, with 95% intervals from resampling whole replies, is written to
``book/cmlab/data/quality/forced_tokens.json``, which page 8.1 reads (:func:`cmlab.comparison.quality.load_forced_tokens`).
"""
from __future__ import annotations

import hashlib
import json
import sys
import time

import numpy as np

from chainmark.config import ChainMarkConfig
from chainmark.jsonio import atomic_write
from cmlab.comparison.quality import FORCED_TOKENS_FILE, score_tokens, surprise_by_gate
from cmlab.harness import load_model
from cmlab.harness.reference import PROTOCOL, load_texts, read_dir, reference_key


def main() -> int:
    start = time.perf_counter()
    model, _ = load_model()
    tau = float(json.loads((read_dir() / "gates.json").read_text("utf-8"))["tau"][f"{PROTOCOL.rho:g}"])
    config = ChainMarkConfig(reference_key(), S=PROTOCOL.S, rho=PROTOCOL.rho)
    records = load_texts("head_to_head")
    methods = {}
    for method in ("chainmark", "none"):
        recs = sorted((r for r in records if r["method"] == method), key=lambda r: (r["domain"], r["prompt_index"]))
        scores = score_tokens(model, [r["prompt_ids"] for r in recs], [r["token_ids"] for r in recs],
                              config=config, batch_size=8)
        opened = ([np.asarray(r["gated"], dtype=bool) for r in recs] if method == "chainmark"
                  else [s.entropy > tau for s in scores])
        # the intervals' resampling follows the reference key, as every draw of the reference run does
        seed = int.from_bytes(hashlib.sha256(config.key + b"measure_quality/" + method.encode()).digest()[:8], "big")
        methods[method] = surprise_by_gate(scores, opened, np.random.default_rng(seed))
        print(f"{method}: {len(recs)} replies, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    FORCED_TOKENS_FILE.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(FORCED_TOKENS_FILE, json.dumps({
        "what": "teacher-forced surprise -log p(t) (nats) of the reference head-to-head's clean replies, at the "
                "positions the gate opened (ChainMark: forced; no watermark: where its gate would have opened) "
                "and at the others; log(1/Z) at the opened positions",
        "model": "embedded", "tau": tau, "rho": PROTOCOL.rho, "S": PROTOCOL.S,
        "command": "python tools/measure_quality.py", "methods": methods}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FORCED_TOKENS_FILE} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
