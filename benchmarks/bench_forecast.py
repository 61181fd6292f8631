"""Benchmark: the chapters' forecast of a generation's time (and memory) against the generation it forecasts.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_forecast.py [--steps 4x32 8x64] [--batch-size 4] [--max-factor 3]
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_forecast.py --chapters [--batches 2]   # the chapters' own sizes

``cmlab.teaching.forecast.expect_generation`` times two short greedy
generations of the loaded model (its probes) and forecasts each step from
them; the chapters print that forecast before their long steps. Here each step
is forecast and then run with ``chainmark.embed.generate``, forecast and
generation back to back, so that both see the machine in the same state.

- ``--steps`` (the default): each ``TEXTSxTOKENS`` step is that many wiki
  prompts, exactly that many new tokens each, in batches of ``--batch-size``,
  generated without a watermark (as the forecast's probes are).
- ``--chapters``: the batch sizes and lengths the chapters use at this scale
  (``CHAINMARK_SCALE``: chapter 4, chapters 7 and 8b, chapter 8), ``--batches``
  batches of writing prompts each, generated with the watermark (S = 5,
  rho = 0.5, the high-entropy gate), on the book's model (``CHAINMARK_MODEL``
  or the embedded one) and device. On a GPU the forecast peak memory is
  printed beside the measured peak. ``tools/gpu_check.sh forecast`` runs this.

Printed per step: the forecast, the measured time and their ratio (measured /
forecast). The exit status is 1 if a ratio lies outside
[1 / ``--max-factor``, ``--max-factor``]: a forecast within a factor of 3 is
one a reader can plan a session by.
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


def measure(model: Any, tokenizer: Any, prompts: list[str], tokens: int, batch_size: int,
            watermark: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """Forecast one step, then time the generation it forecasts (watermarked with ``(config, gate)`` if given)."""
    import torch

    from chainmark.embed import Sampling, generate
    from cmlab.teaching.forecast import expect_generation

    device = next(model.parameters()).device
    forecast = expect_generation(model, tokenizer, [("step", len(prompts), tokens)], batch_size=batch_size)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    config, gate = watermark if watermark is not None else (None, None)
    start = time.perf_counter()
    generate(model, tokenizer, prompts, config, gate, sampling=Sampling(max_new_tokens=tokens,
                                                                        min_new_tokens=tokens,
                                                                        batch_size=batch_size))
    took = time.perf_counter() - start
    row = {"device": str(device), "texts": len(prompts), "tokens": tokens, "batch_size": forecast.batch_size,
           "watermarked": watermark is not None, "forecast_seconds": forecast.seconds[0],
           "measured_seconds": took, "ratio": took / forecast.seconds[0],
           "forecast_peak_gb": round(forecast.peak_bytes / 1e9, 2)}
    if device.type == "cuda":
        row["measured_peak_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
    return row


def chapter_steps(model: Any, tokenizer: Any, batches: int) -> list[dict[str, Any]]:
    """The chapters' own batch sizes and lengths at this scale, watermarked, ``batches`` batches each."""
    from chainmark.auditor.keyfiles import book_key
    from chainmark.config import ChainMarkConfig
    from chainmark.embed import Sampling, calibrate_gate
    from cmlab.harness.prompts import load_prompts
    from cmlab.harness.settings import get_settings

    settings = get_settings()
    gate = calibrate_gate(model, tokenizer, load_prompts("wiki", 4, start=96), "high_entropy", 0.5,
                          sampling=Sampling(max_new_tokens=32))
    config = ChainMarkConfig(book_key(), S=5, rho=0.5, gate="high_entropy")
    # (batch size, new tokens) as the chapters use them at this scale: chapter 4, chapters 7 and 8b, chapter 8
    sizes = settings.sized(smoke=[(8, 96), (8, 128), (12, 96)], full=[(16, 200), (25, 200), (32, 200)])
    rows = []
    for batch, tokens in sizes:
        row = measure(model, tokenizer, load_prompts("writing", batch * batches), tokens, batch, (config, gate))
        rows.append({"model": settings.model, **row})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", nargs="+", type=_step, default=[(4, 32), (8, 64)], metavar="TEXTSxTOKENS")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--chapters", action="store_true",
                        help="the chapters' own batch sizes and lengths at this scale, watermarked (instead of --steps)")
    parser.add_argument("--batches", type=int, default=2, help="batches per setting with --chapters (default 2)")
    parser.add_argument("--max-factor", type=float, default=3.0,
                        help="largest allowed factor between the measured time and the forecast, either way")
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.batches < 1 or args.max_factor < 1:
        parser.error("--batch-size and --batches must be at least 1, --max-factor at least 1")
    from cmlab.harness.models import load_model
    from cmlab.harness.prompts import load_prompts

    model, tokenizer = load_model()
    if args.chapters:
        rows = chapter_steps(model, tokenizer, args.batches)
        print("the chapters' steps at this scale, watermarked; forecast (probes) against the generation it forecasts")
    else:
        rows = [measure(model, tokenizer, load_prompts("wiki", texts), tokens, args.batch_size)
                for texts, tokens in args.steps]
        print(f"batches of {args.batch_size}; forecast (probes) against the generation it forecasts")
    for r in rows:
        memory = (f"; peak forecast {r['forecast_peak_gb']} GB, measured {r['measured_peak_gb']} GB"
                  if "measured_peak_gb" in r else "")
        print(f"  {r['texts']:3d} texts x {r['tokens']:4d} tokens in batches of {r['batch_size']}: forecast "
              f"{r['forecast_seconds']:7.2f} s, measured {r['measured_seconds']:7.2f} s, ratio {r['ratio']:.2f}"
              + memory)
    ok = all(1 / args.max_factor <= r["ratio"] <= args.max_factor for r in rows)
    print(f"every ratio within [1/{args.max_factor:g}, {args.max_factor:g}]: {'yes' if ok else 'NO'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"rows": rows, "max_factor": args.max_factor, "within": ok}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
