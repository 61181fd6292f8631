"""Benchmark: the chapters' forecast of a generation's time against the generation it forecasts, in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_forecast.py [--steps 4x32 8x64] [--batch-size 4] [--max-factor 3]

``cmlab.teaching.forecast.expect_generation`` times two short greedy
generations of the loaded model (its probes) and forecasts each step from
them; the chapters print that forecast before their long steps. Here, on the
embedded model, each step (``TEXTSxTOKENS``: that many wiki prompts, exactly
that many new tokens each, in batches of ``--batch-size``) is forecast and then
run with ``chainmark.embed.generate`` (no watermark, as the forecast's
probes), forecast and generation back to back, so that both see the machine
in the same state. Printed per step: the forecast, the measured time and
their ratio (measured / forecast). The exit status is 1 if a ratio lies
outside [1 / ``--max-factor``, ``--max-factor``].
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def _step(text: str) -> tuple[int, int]:
    """``"4x32"`` as (texts, tokens)."""
    texts, tokens = text.lower().split("x")
    return int(texts), int(tokens)


def measure(model: Any, tokenizer: Any, texts: int, tokens: int, batch_size: int) -> dict[str, Any]:
    """Forecast one step, then time the generation it forecasts."""
    from chainmark.embed import generate
    from cmlab.harness.prompts import load_prompts
    from cmlab.teaching.forecast import expect_generation

    prompts = load_prompts("wiki", texts)
    forecast = expect_generation(model, tokenizer, [("step", texts, tokens)], batch_size=batch_size)
    start = time.perf_counter()
    generate(model, tokenizer, prompts, None, max_new_tokens=tokens, min_new_tokens=tokens, batch_size=batch_size)
    took = time.perf_counter() - start
    return {"texts": texts, "tokens": tokens, "batch_size": forecast.batch_size,
            "forecast_seconds": forecast.seconds[0], "measured_seconds": took, "ratio": took / forecast.seconds[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", nargs="+", type=_step, default=[(4, 32), (8, 64)], metavar="TEXTSxTOKENS")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-factor", type=float, default=3.0,
                        help="largest allowed factor between the measured time and the forecast, either way")
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    from cmlab.harness.models import load_model

    model, tokenizer = load_model()
    rows = [measure(model, tokenizer, texts, tokens, args.batch_size) for texts, tokens in args.steps]
    print(f"embedded model, batches of {args.batch_size}; forecast (probes) against the generation it forecasts")
    for r in rows:
        print(f"  {r['texts']:3d} texts x {r['tokens']:4d} tokens: forecast {r['forecast_seconds']:7.2f} s, "
              f"measured {r['measured_seconds']:7.2f} s, ratio {r['ratio']:.2f}")
    ok = all(1 / args.max_factor <= r["ratio"] <= args.max_factor for r in rows)
    print(f"every ratio within [1/{args.max_factor:g}, {args.max_factor:g}]: {'yes' if ok else 'NO'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"rows": rows, "max_factor": args.max_factor, "within": ok}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
