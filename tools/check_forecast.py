"""How close is a chapter's forecast (cmlab.teaching.forecast.expect_generation) to the generation it forecasts?

    python tools/check_forecast.py [--batches 2] [--json FILE]

For the book's model on this machine (``CHAINMARK_MODEL`` or the embedded one),
at the batch sizes and lengths the chapters use at this scale, it prints the
forecast time, the measured time of the same work (watermarked ``generate``,
fixed length) and their ratio, plus the forecast peak memory next to the
measured peak on a GPU. A ratio near 1 means the line a reader sees before a
long step can be trusted; the forecast is meant to be within a factor of 2.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cmlab.teaching.forecast import duration, expect_generation  # noqa: E402
from chainmark.config import ChainMarkConfig  # noqa: E402
from chainmark.embed import calibrate_gate, generate  # noqa: E402
from chainmark.auditor.keyfiles import book_key  # noqa: E402
from cmlab.harness.models import load_model  # noqa: E402
from cmlab.harness.prompts import load_prompts  # noqa: E402
from cmlab.harness.settings import get_settings  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=2, help="batches generated per setting (default 2)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    import torch

    settings = get_settings()
    model, tokenizer = load_model()
    cuda = next(model.parameters()).device.type == "cuda"
    key = book_key()
    gate = calibrate_gate(model, tokenizer, load_prompts("wiki", 4, start=96), "high_entropy", 0.5,
                          max_new_tokens=32)
    config = ChainMarkConfig(key, S=5, rho=0.5, gate="high_entropy")
    # (batch size, new tokens) as the chapters use them at this scale: chapter 4, chapter 7/8b, chapter 8
    settings_used = settings.sized(smoke=[(8, 96), (8, 128), (12, 96)], full=[(16, 200), (25, 200), (32, 200)])
    rows = []
    for batch, tokens in settings_used:
        prompts = load_prompts("writing", batch * args.batches)
        forecast = expect_generation(model, tokenizer, [("check", len(prompts), tokens)], batch_size=batch)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        generate(model, tokenizer, prompts, config, gate, max_new_tokens=tokens, min_new_tokens=tokens,
                 batch_size=batch)
        took = time.perf_counter() - start
        row = {"model": settings.model, "device": str(next(model.parameters()).device), "batch": batch,
               "texts": len(prompts), "new_tokens": tokens, "forecast_s": round(forecast.total_seconds, 2),
               "measured_s": round(took, 2), "measured_over_forecast": round(took / forecast.total_seconds, 3),
               "forecast_peak_gb": round(forecast.peak_bytes / 1e9, 2)}
        if cuda:
            row["measured_peak_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
        rows.append(row)
        print(f"batch {batch:>2} x {tokens} tokens, {len(prompts)} texts: forecast {duration(forecast.total_seconds)}, "
              f"measured {duration(took)} (x{took / forecast.total_seconds:.2f}); peak forecast "
              f"{row['forecast_peak_gb']} GB" + (f", measured {row['measured_peak_gb']} GB" if cuda else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
