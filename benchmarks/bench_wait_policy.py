"""Benchmark: a two-thread PyTorch process beside one busy thread on a 2-core machine, with OpenMP's default
(spinning) wait policy against ``OMP_WAIT_POLICY=PASSIVE`` (tests/conftest.py sets it on pytest-xdist workers).

    .venv/bin/python benchmarks/bench_wait_policy.py [--json benchmarks/results/bench_wait_policy.json]

The two-thread process is the suite's costliest test of its kind: ``cmlab reference verify`` regenerates one
committed batch with the thread count it was recorded with (two), while the other test worker keeps a core busy.
A thread spinning at a barrier holds a core the other process needs; a passive one sleeps. Both runs happen in
this run, one after the other, each beside the same busy thread; run it on an otherwise idle machine.
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
VERIFY = [sys.executable, "-m", "cmlab", "reference", "verify", "--samples", "1", "--max-tokens", "2048",
          "--seed", "bench-wait-policy"]
BUSY = ("import time, torch\ntorch.set_num_threads(1)\na = torch.randn(1500, 1500)\n"
        "while True:\n    a @ a\n")


def verify_seconds(policy: str | None) -> float:
    """Wall seconds of one verification beside a busy single-thread process, under ``policy`` (None: default)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    busy = subprocess.Popen([sys.executable, "-c", BUSY], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        env.pop("OMP_WAIT_POLICY", None)
        if policy:
            env["OMP_WAIT_POLICY"] = policy
        start = time.perf_counter()
        proc = subprocess.run(VERIFY, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    finally:
        busy.kill()
        busy.wait()
    if proc.returncode != 0 or "verified 1 stored batches" not in proc.stdout:
        sys.exit(f"the verification failed (policy={policy}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args()
    spinning = verify_seconds(None)
    passive = verify_seconds("PASSIVE")
    result = {"cores": os.cpu_count(), "spinning_seconds": round(spinning, 1), "passive_seconds": round(passive, 1),
              "ratio": round(spinning / passive, 2), "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"reference verify beside a busy thread: {spinning:.0f} s spinning, {passive:.0f} s passive "
          f"({result['ratio']:.2f}x faster)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
