"""Benchmark: the test suite's model-heavy modules on two pytest-xdist workers, a thread per core each (PyTorch's
default) against each worker's share of the cores (tests/conftest.py, ``share_the_cores``).

    .venv/bin/python benchmarks/bench_test_threads.py [--json benchmarks/results/bench_test_threads.json]

Runs the same modules twice in this run, first with ``OMP_NUM_THREADS`` set to the number of cores (every
worker takes them all, as PyTorch does unless told otherwise), then unset (each worker takes cores // workers),
and prints both wall times and their ratio. Run it on an otherwise idle machine: it measures contention, so any
other busy process changes the answer.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["tests/test_embed.py", "tests/test_detect.py", "tests/test_baselines.py", "tests/test_attacks.py",
           "tests/test_quality.py", "tests/test_segment_finder.py"]


def run_suite(threads: int | None, workers: int) -> float:
    """Wall seconds of the modules on ``workers`` workers; ``threads`` per worker, or None for conftest's share."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(name, None)
        if threads is not None:
            env[name] = str(threads)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", str(workers), *MODULES], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"the tests failed (threads={threads}):\n{proc.stdout[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    every_core = run_suite(cores, args.workers)
    shared = run_suite(None, args.workers)
    result = {"cores": cores, "workers": args.workers, "modules": MODULES,
              "seconds_a_thread_per_core_each": round(every_core, 1), "seconds_a_share_each": round(shared, 1),
              "ratio": round(every_core / shared, 2), "load_average_after": list(os.getloadavg()),
              "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"{args.workers} workers on {cores} cores: {every_core:.0f} s with {cores} threads each, "
          f"{shared:.0f} s with their share ({result['ratio']:.2f}x faster)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
