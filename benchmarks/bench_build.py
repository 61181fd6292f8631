"""Benchmark: the book's cold build against its physical floor, one forward pass per generated token.

    make book   # or a fresh clone's build: every chapter must have executed (a cold build)
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_build.py [--build _build] [--json out.json]

Reads the build's record (``_build/timings.json``: the wall time, the number of chapters executed at a
time and each chapter's execution seconds) and, from each executed chapter
(``_build/jupyter_execute/book/*.ipynb``), the forecast it printed before its long steps (``N texts x
<= T tokens`` per step; the teacher-forced scoring steps are left out: they are not decoding). It then
measures, now and on this machine, how long the embedded model takes per new token when it decodes a
batch of 8 with the watermark on, and prints

- the build's wall time and the sum of its chapters' execution times (their ratio is what executing
  chapters side by side gained),
- the floor: the chapters' forecast new tokens times the measured time per token (an upper bound of
  the decoding work: texts that end early decode fewer), and the build's wall time over it.

A chapter without a forecast generates a reply or two at most and adds nothing to the floor.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^\s+(.+?): (\d+) texts x <= (\d+) tokens:", re.M)


def forecast_tokens(executed: Path) -> dict[str, int]:
    """New tokens each executed chapter forecast for its decoding steps (scoring steps left out)."""
    import nbformat

    tokens: dict[str, int] = {}
    for path in sorted(executed.glob("*.ipynb")):
        if not (ROOT / "book" / path.name).exists():  # a page written in MyST Markdown (teaching.md): no chapter
            continue
        nb = nbformat.read(path, as_version=4)
        total = 0
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                text = out.get("data", {}).get("text/plain", "") or out.get("text", "")
                text = "".join(text) if isinstance(text, list) else text
                if "texts x <=" not in text:
                    continue
                total += sum(int(n) * int(t) for label, n, t in STEP.findall(text) if "scor" not in label.lower())
        tokens[f"book/{path.name}"] = total
    return tokens


def seconds_per_token(batch: int = 8, new_tokens: int = 48) -> float:
    """Wall seconds per new token when the embedded model decodes one batch with the watermark, measured now."""
    from chainmark.config import ChainMarkConfig
    from chainmark.embed import Sampling, calibrate_gate, generate
    from chainmark.auditor.keyfiles import book_key
    from cmlab.harness.models import load_model
    from cmlab.harness.prompts import load_prompts

    model, tok = load_model(device="cpu")
    config = ChainMarkConfig(book_key(), S=5, rho=0.5, gate="high_entropy")
    gate = calibrate_gate(model, tok, load_prompts("writing", 4), "high_entropy", 0.5,
                          sampling=Sampling(max_new_tokens=16))
    prompts = load_prompts("wiki", batch)
    generate(model, tok, prompts[:2], config, gate, sampling=Sampling(max_new_tokens=4,
                                                                      batch_size=2))  # warm up
    start = time.perf_counter()
    gens = generate(model, tok, prompts, config, gate, sampling=Sampling(max_new_tokens=new_tokens,
                                                                         min_new_tokens=new_tokens,
                                                                         batch_size=batch))
    return (time.perf_counter() - start) / sum(g.n_tokens for g in gens)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", type=Path, default=ROOT / "_build", help="the build folder (default _build)")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers to FILE")
    args = parser.parse_args(argv)
    record_file = args.build / "timings.json"
    if not record_file.exists():
        parser.error(f"{record_file} does not exist: build the book first (make book)")
    record = json.loads(record_file.read_text("utf-8"))
    chapters = record.get("notebooks", {})
    executed = args.build / "jupyter_execute" / "book"
    tokens = forecast_tokens(executed)
    if not chapters or len(chapters) < len(tokens):
        parser.error(f"{record_file} records {len(chapters)} executed chapters of {len(tokens)}: "
                     "not a cold build (empty _build/.jupyter_cache, or build in a fresh clone)")
    per_token = seconds_per_token()
    wall = float(record["total_build_seconds"])
    summed = float(sum(chapters.values()))
    new_tokens = sum(tokens.values())
    floor = new_tokens * per_token
    print(f"cold build: {wall:.0f} s wall, {record.get('jobs', 1)} chapter(s) at a time; "
          f"the chapters' own execution times add up to {summed:.0f} s ({summed / wall:.2f}x the wall time)")
    print(f"decoding floor: {new_tokens:,} forecast new tokens x {1000 * per_token:.1f} ms per token "
          f"(batch of 8, measured now) = {floor:.0f} s")
    print(f"build / floor: {wall / floor:.2f}x")
    for nb, n in sorted(tokens.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {nb}: {n:,} tokens, floor {n * per_token:.0f} s, executed in {chapters.get(nb, float('nan')):.0f} s")
    if args.json:
        import subprocess

        commit = subprocess.run(["git", "-C", str(args.build.resolve().parent), "rev-parse", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or None  # the built checkout's
        Path(args.json).write_text(json.dumps({
            "commit": commit, "build_wall_seconds": wall, "jobs": record.get("jobs", 1), "chapters_seconds_sum": summed,
            "forecast_new_tokens": new_tokens, "seconds_per_token_batch8": per_token, "floor_seconds": floor,
            "build_over_floor": wall / floor, "tokens_per_chapter": tokens}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
