"""Capture what the package computes from stored data, to compare before and after a refactor.

A change that moves code (a restructuring, a unified type) must not change a
single score. This script writes, into one folder, every committed reference
experiment re-read and re-scored (the frames, the per-test scores, the
explorer grid) and the outputs of the auditor's command line on fixed inputs
(``detect`` in each test, ``calibrate``, ``recalibrate``, ``regime``, ``key
audit``, ``audit``). Run it on the old commit and on the new one, then
compare the folders::

    python tools/rescore_snapshot.py capture /tmp/before      # on the old commit
    python tools/rescore_snapshot.py capture /tmp/after       # on the new one
    python tools/rescore_snapshot.py compare /tmp/before /tmp/after

``compare`` exits 1 and names the files that differ unless every file is
byte-identical. No model is loaded: the reference's tokenizer is the
embedded model's, shipped with the package.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

#: Where the reference reader lives, newest layout first (the script runs on both sides of a move).
_REFERENCE_MODULES = ("chainmark.harness.reference", "chainmark.harness.reference")
_KEY_HEX = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
_TEXTS = {
    "plain.txt": "The committee met on Tuesday to discuss the budget for the coming year. Several members "
                 "raised concerns about the cost of the new library, while others argued that it would "
                 "serve the town for decades.",
    "short.txt": "Hello there.",
    "repeat.txt": "one two three one two three one two three one two three one two three one two three",
}


def _reference():
    for name in _REFERENCE_MODULES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise SystemExit("no chainmark reference module found")


def _frame_text(frame) -> str:
    frame = frame.reindex(sorted(frame.columns), axis=1)
    return frame.to_csv(index=False, float_format="%.17g")


def _cli(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "CHAINMARK_KEY_FILE": "", "CHAINMARK_KEY": ""}
    out = subprocess.run([sys.executable, "-m", "chainmark.cli", *args], cwd=cwd, capture_output=True,
                         text=True, env=env)
    text = f"$ chainmark {' '.join(args)}\nexit {out.returncode}\n--- stdout\n{out.stdout}--- stderr\n{out.stderr}"
    return _untimed(text)


def _untimed(text: str) -> str:
    """The text with wall-clock times blanked: they differ between any two runs."""
    text = re.sub(r'("[a-z_]*seconds"): [0-9.e+-]+', r'\1: "<time>"', text)
    return re.sub(r"\b[0-9]+(\.[0-9]+)? ?(s|ms|seconds)\b", "<time>", text)


def capture(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ref = _reference()
    for name in ref.EXPERIMENTS:
        (out / f"frame_{name}.csv").write_text(_frame_text(ref.load_frame(name)), "utf-8")
        print("frame", name, flush=True)
    rows = ref.scores_by_test()
    (out / "scores_by_test.json").write_text(json.dumps(rows, sort_keys=True, indent=1, default=str), "utf-8")
    grid = ref.explorer_grid()
    (out / "explorer_grid.json").write_text(json.dumps(grid, sort_keys=True, indent=1, default=str), "utf-8")
    print("scores and grid", flush=True)

    work = out / "_work"
    work.mkdir(exist_ok=True)
    (work / "k.key").write_bytes(bytes.fromhex(_KEY_HEX))
    for name, text in _TEXTS.items():
        (work / name).write_text(text, "utf-8")
    (work / "null.jsonl").write_text("".join(json.dumps({"z": round((i * 0.37) % 3 - 1.5, 6)}) + "\n"
                                             for i in range(400)), "utf-8")
    corpus = [{"id": f"d{i}", "text": f"{_TEXTS['plain.txt']} Item {i} of the list, noted in passing."}
              for i in range(12)]
    (work / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus), "utf-8")
    texts = sorted(_TEXTS)
    commands = {
        "detect_exact": ["detect", "--key-file", "k.key", "--json", *texts],
        "detect_z": ["detect", "--key-file", "k.key", "--test", "z", *texts],
        "detect_distinct": ["detect", "--key-file", "k.key", "--test", "distinct", "--S", "7", "--json", *texts],
        "detect_soft": ["detect", "--key-file", "k.key", "--topology", "soft_cycle", "--test", "z", "--json", *texts],
        "calibrate": ["calibrate", "--n", "200", "--rho", "0.5", "--alpha", "0.001"],
        "recalibrate": ["recalibrate", "--null", "null.jsonl", "--alpha", "0.01", "--json"],
        "regime": ["regime", "--key-file", "k.key", "--S", "5", "--alpha", "0.01", "--n-min", "50", "--out", "regime.json"],
        "key_audit": ["key", "audit", "--key-file", "k.key", "--S", "5", "--corpus", "corpus.jsonl", "--json"],
        "audit": ["audit", "corpus.jsonl", "--key-file", "k.key", "--out", "audit.jsonl", "--json"],
    }
    for label, args in commands.items():
        text = _cli(args, work)
        for made in ("regime.json", "audit.jsonl"):
            if (work / made).is_file():
                text += f"--- {made}\n" + _untimed((work / made).read_text("utf-8"))
                (work / made).unlink()
        (out / f"cli_{label}.txt").write_text(text, "utf-8")
        print("cli", label, flush=True)


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.glob("*.*")} | {p.name for p in after.glob("*.*")})
    differ = [n for n in names if not (before / n).is_file() or not (after / n).is_file()
              or (before / n).read_bytes() != (after / n).read_bytes()]
    for n in names:
        print(("DIFFERS  " if n in differ else "same     ") + n)
    print(f"{len(names) - len(differ)} of {len(names)} files byte-identical")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("capture")
    c.add_argument("folder", type=Path)
    d = sub.add_parser("compare")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "capture":
        capture(args.folder)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    raise SystemExit(main())
