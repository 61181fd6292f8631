"""Execute the chapters under fresh random keys and count, per chapter and key, the claims that held.

    .venv/bin/python tools/claims_robustness.py [--keys 5] [--chapters book/05_detection.ipynb ...]
        [--work _build/claims_robustness] [--out book/data/claims_robustness.json]

A sentence about a chapter's live run must hold whatever key a reader has
(DESIGN.md: "A claim about a live run holds under any key, or it belongs to
the reference tier"). This tool makes ``--keys`` fresh keys from the
operating system's CSPRNG, executes every chapter once per key in soft claim
mode (``CHAINMARK_CLAIMS=soft``, so a failed claim is recorded and the chapter
goes on), and writes, per chapter and key, whether the chapter ran to its
end, how many live and reference claims it checked and held, and the
sentences that did not hold. The teaching page shows the result.

Resumable: the keys (files of mode 0600, never printed) and one JSON line per
finished (key, chapter) run live in ``--work``; run the command again after an
interruption and it goes on with the runs still missing. ``--fresh`` starts
over with new keys. The summary file holds key fingerprints only.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chainmark.keys import key_fingerprint, read_key_file, write_key_file  # noqa: E402


def toc_chapters() -> list[str]:
    """The notebooks of _toc.yml, in order."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [f"{e['file']}.ipynb" for e in toc.get("chapters", []) if (ROOT / f"{e['file']}.ipynb").exists()]


def execute(chapter: str, key_file: Path, log: Path, runs: Path, timeout: int) -> dict:
    """Run one chapter under one key in soft mode; return how it ended and the claims it logged."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    log.unlink(missing_ok=True)
    env = {"CHAINMARK_KEY_FILE": str(key_file), "CHAINMARK_CLAIMS": "soft", "CHAINMARK_CLAIMS_LOG": str(log),
           "CHAINMARK_CHAPTER": chapter, "CHAINMARK_RUNS": str(runs), "HF_HUB_OFFLINE": "1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    os.environ.pop("CHAINMARK_KEY", None)
    path = ROOT / chapter
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start, error = time.perf_counter(), None
    try:
        client.execute()
    except CellExecutionError as exc:
        error = str(exc).strip().splitlines()[-1][:500] if str(exc).strip() else type(exc).__name__
    except Exception as exc:  # a timeout or a dead kernel: recorded, the next run goes on
        error = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    claims = [json.loads(line) for line in log.read_text("utf-8").splitlines()] if log.exists() else []
    return {"completed": error is None, "error": error, "seconds": round(time.perf_counter() - start, 1),
            "live_checked": sum(c["tier"] == "live" for c in claims),
            "live_held": sum(c["tier"] == "live" and c["held"] for c in claims),
            "reference_checked": sum(c["tier"] == "reference" for c in claims),
            "reference_held": sum(c["tier"] == "reference" and c["held"] for c in claims),
            "failed": [{"says": c["says"], "tier": c["tier"], "shows": c["shows"]} for c in claims if not c["held"]]}


def keys_in(work: Path, n: int, fresh: bool) -> list[Path]:
    """``n`` key files in ``work``: the ones already there (resuming), then new ones."""
    work.mkdir(parents=True, exist_ok=True)
    if fresh:
        for old in work.glob("key-*.key"):
            old.unlink()
        (work / "runs.jsonl").unlink(missing_ok=True)
    paths = [work / f"key-{i}.key" for i in range(n)]
    for p in paths:
        if not p.exists():
            write_key_file(p)
    return paths


def summarise(rows: list[dict], chapters: list[str], n_keys: int) -> dict:
    """Per chapter: each key's outcome, and the live claims that failed under any key."""
    out = {}
    for chapter in chapters:
        runs = [r for r in rows if r["chapter"] == chapter]
        failed_any = sorted({f["says"] for r in runs for f in r["failed"] if f["tier"] == "live"})
        out[chapter] = {"keys": len(runs), "completed": sum(r["completed"] for r in runs),
                        "live_claims": max((r["live_checked"] for r in runs), default=0),
                        "reference_claims": max((r["reference_checked"] for r in runs), default=0),
                        "live_failed_under_some_key": failed_any,
                        "runs": [{k: r[k] for k in ("key_fingerprint", "completed", "error", "seconds", "live_checked",
                                                    "live_held", "reference_checked", "reference_held", "failed")}
                                 for r in runs]}
    return {"what": "the chapters executed under fresh random keys in soft claim mode (tools/claims_robustness.py)",
            "measured": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "keys": n_keys, "chapters": out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--chapters", nargs="*", default=None)
    parser.add_argument("--work", type=Path, default=ROOT / "_build" / "claims_robustness")
    parser.add_argument("--out", type=Path, default=ROOT / "book" / "data" / "claims_robustness.json")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument("--fresh", action="store_true", help="new keys, forget the finished runs")
    args = parser.parse_args()
    if args.keys < 1:
        parser.error("--keys must be at least 1")
    chapters = args.chapters or toc_chapters()
    key_files = keys_in(args.work, args.keys, args.fresh)
    done_file = args.work / "runs.jsonl"
    rows = [json.loads(line) for line in done_file.read_text("utf-8").splitlines()] if done_file.exists() else []
    for key_file in key_files:
        fingerprint = key_fingerprint(read_key_file(key_file))
        for chapter in chapters:
            if any(r["key_fingerprint"] == fingerprint and r["chapter"] == chapter for r in rows):
                continue
            result = execute(chapter, key_file, args.work / "claims.jsonl", args.work / "runs" / fingerprint,
                             args.timeout)
            row = {"key_fingerprint": fingerprint, "chapter": chapter, **result}
            rows.append(row)
            with done_file.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            print(f"{fingerprint} {chapter}: {'ran to its end' if result['completed'] else 'STOPPED: ' + str(result['error'])}; "
                  f"live {result['live_held']}/{result['live_checked']}, reference "
                  f"{result['reference_held']}/{result['reference_checked']} ({result['seconds']:.0f} s)", flush=True)
            for f in result["failed"]:
                print(f"    differed ({f['tier']}): {f['says']} -- {f['shows']}", flush=True)
    fingerprints = [key_fingerprint(read_key_file(k)) for k in key_files]
    summary = summarise([r for r in rows if r["key_fingerprint"] in fingerprints], chapters, len(key_files))
    if args.chapters is None:  # only a run over the whole book replaces the published file
        args.out.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {args.out}")
    bad = {c: v["live_failed_under_some_key"] for c, v in summary["chapters"].items() if v["live_failed_under_some_key"]}
    stopped = [c for c, v in summary["chapters"].items() if v["completed"] < v["keys"]]
    print(f"{len(chapters)} chapters x {len(key_files)} keys: {len(stopped)} chapters stopped under some key, "
          f"{sum(map(len, bad.values()))} live claims failed under some key")
    return 1 if bad or stopped else 0


if __name__ == "__main__":
    sys.exit(main())
