"""Execute the chapters under fresh random keys and count, per chapter and key, the claims that held.

    .venv/bin/python tools/claims_robustness.py [--keys 5] [--chapters book/05_detection.ipynb ...]
        [--work _build/claims_robustness] [--out book/data/claims_robustness.json]

``--chapters X Y --merge`` runs only those chapters and replaces their entries
in the published file (each entry says when it was measured; the others keep
theirs): what to run after changing the claims of a few chapters.

A sentence about a chapter's live run must hold whatever key a reader has
(the house rule: a claim about a live run holds under any key, or it belongs
to the reference tier, which reads the committed reference run). This tool makes ``--keys`` fresh keys from the
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
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chainmark.auditor.keyfiles import read_key_file, teaching_key, write_key_file
from chainmark.keys import key_fingerprint  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from book_pipeline import toc_notebooks  # noqa: E402  (the tools' one reader of _toc.yml)


def execute(chapter: str, key_file: Path, log: Path, runs: Path, timeout: int, threads: int | None = None,
            keep_notebook: bool = False) -> dict:
    """Run one chapter under one key in soft mode; return how it ended and the claims it logged.

    The kernel gets its settings through its own environment (never this
    process's), so several chapters can run at once; ``threads`` caps the
    kernel's CPU threads. ``keep_notebook`` adds the executed notebook (with
    its outputs) under ``"notebook"``. A cell that runs past ``timeout`` (a
    notebook client has been seen waiting on an idle kernel, now and then,
    under parallel execution) runs the chapter once more from the top on a
    fresh kernel; ``"stalled_once"`` says so.
    """
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    from book_pipeline import notebook_client

    log.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "CHAINMARK_KEY"}
    env.update({"CHAINMARK_KEY_FILE": str(key_file), "CHAINMARK_CLAIMS": "soft", "CHAINMARK_CLAIMS_LOG": str(log),
                "CHAINMARK_CHAPTER": chapter, "CHAINMARK_RUNS": str(runs), "CHAINMARK_HEADLESS": "1", "HF_HUB_OFFLINE": "1"})
    if threads:
        env.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    path = ROOT / chapter
    start, error, stalled = time.perf_counter(), None, False
    for attempt in range(2):  # a cell that times out: once more from the top on a fresh kernel
        nb = nbformat.read(path, as_version=4)
        client = notebook_client(nb, path.parent, timeout)
        log.unlink(missing_ok=True)
        try:
            client.execute(env=env)
            error = None
        except CellTimeoutError as exc:  # a cell past the timeout
            error = f"{type(exc).__name__}: {exc}"[:500]
            if attempt == 0:
                stalled = True
                print(f"claims_robustness: {chapter} stalled ({error[:120]}): once more on a fresh kernel",
                      file=sys.stderr, flush=True)
                continue
        except CellExecutionError as exc:
            error = str(exc).strip().splitlines()[-1][:500] if str(exc).strip() else type(exc).__name__
        except Exception as exc:  # a dead kernel: recorded, the next run goes on
            error = f"{type(exc).__name__}: {exc}"[:500]
        break
    claims = [json.loads(line) for line in log.read_text("utf-8").splitlines()] if log.exists() else []
    return {"completed": error is None, "error": error, "seconds": round(time.perf_counter() - start, 1),
            "stalled_once": stalled,
            "live_checked": sum(c["tier"] == "live" for c in claims),
            "live_held": sum(c["tier"] == "live" and c["held"] for c in claims),
            "reference_checked": sum(c["tier"] == "reference" for c in claims),
            "reference_held": sum(c["tier"] == "reference" and c["held"] for c in claims),
            "failed": [{"says": c["says"], "tier": c["tier"], "shows": c["shows"]} for c in claims if not c["held"]],
            **({"notebook": nb} if keep_notebook else {})}


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


def merged(published: dict, summary: dict) -> dict:
    """``published`` with the chapters of ``summary`` replaced, each entry stamped with when it was measured,
    in the table of contents' order; a chapter no longer in the book is dropped."""
    if summary["keys"] < published["keys"]:
        raise ValueError(f"a merge needs at least the published {published['keys']} keys, got {summary['keys']}")
    chapters = {**published["chapters"]}
    for name, entry in chapters.items():
        entry.setdefault("measured", published["measured"])
    for name, entry in summary["chapters"].items():
        chapters[name] = {**entry, "measured": summary["measured"]}
    order = toc_notebooks()
    return {**published, "measured": max(e["measured"] for e in chapters.values()),
            "chapters": {name: chapters[name] for name in order if name in chapters}}


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


def run_task(task: tuple[str, Path, str, Path, int, int | None]) -> dict:
    """One chapter under one key: the row the summary is made of."""
    chapter, key_file, fingerprint, work, timeout, threads = task
    tag = f"{fingerprint}-{Path(chapter).stem}"
    # one runs folder per key, as a build has one: a section reads what its chapter generated under the same key
    result = execute(chapter, key_file, work / f"claims-{tag}.jsonl", work / "runs" / fingerprint, timeout,
                     threads=threads)
    return {"key_fingerprint": fingerprint, "chapter": chapter, **result}


def task_units(tasks: list[tuple]) -> list[list[tuple]]:
    """The tasks (chapter, key file, fingerprint, ...) as units a worker process runs in order: one key's chapters of
    one group (tools/execute_parallel.py's ``chapter_group``), in the given order. Two chapters of a group under one
    key share a runs folder, and 4.1 reads what chapter 4 stores: run side by side, the second found the first's
    folder locked (RunFolderBusy)."""
    from execute_parallel import chapter_group

    units: dict[tuple[str, str], list[tuple]] = {}
    for task in tasks:
        units.setdefault((task[2], chapter_group(task[0])), []).append(task)
    return list(units.values())


def run_unit(unit: list[tuple]) -> list[dict]:
    """A worker process's job: the unit's chapters one after the other (a kernel each)."""
    return [run_task(task) for task in unit]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--chapters", nargs="*", default=None)
    parser.add_argument("--work", type=Path, default=ROOT / "_build" / "claims_robustness")
    parser.add_argument("--out", type=Path, default=ROOT / "book" / "data" / "claims_robustness.json")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument("--fresh", action="store_true", help="new keys, forget the finished runs")
    parser.add_argument("--teaching", action="store_true",
                        help="also run every chapter under the public teaching key (soft mode: every claim that "
                             "would stop the strict build is listed in one pass)")
    parser.add_argument("--merge", action="store_true",
                        help="with --chapters: replace those chapters' entries in the published file, keep the others")
    parser.add_argument("--jobs", type=int, default=1, help="chapters run at once (each in its own kernel)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per kernel (default: torch's own)")
    args = parser.parse_args()
    if args.keys < 1 or args.jobs < 1:
        parser.error("--keys and --jobs must be at least 1")
    if args.merge and not args.chapters:
        parser.error("--merge needs --chapters (a run over the whole book replaces the file anyway)")
    chapters = args.chapters or toc_notebooks()
    key_files = keys_in(args.work, args.keys, args.fresh)
    fresh_fingerprints = [key_fingerprint(read_key_file(k)) for k in key_files]
    if args.teaching:
        teaching_file = args.work / "teaching.key"
        if not teaching_file.exists():
            write_key_file(teaching_file, teaching_key())
        key_files = [teaching_file, *key_files]
    done_file = args.work / "runs.jsonl"
    rows = [json.loads(line) for line in done_file.read_text("utf-8").splitlines()] if done_file.exists() else []
    todo = []  # chapter-major; task_units then keeps one key's chapters of a group in one worker, in order
    for chapter in chapters:
        for key_file in key_files:
            fingerprint = key_fingerprint(read_key_file(key_file))
            if not any(r["key_fingerprint"] == fingerprint and r["chapter"] == chapter for r in rows):
                todo.append((chapter, key_file, fingerprint))

    # worker processes, not threads: two notebook clients in threads of one process can wait forever on a
    # kernel that has finished (seen on chapter 6 with the foreign model: the kernel idle, the client waiting
    # 15 minutes); each process has its own client, its own ZeroMQ context and its own event loop
    tasks = [(chapter, key_file, fingerprint, args.work, args.timeout, args.threads) for chapter, key_file, fingerprint in todo]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for row in (row for unit_rows in pool.map(run_unit, task_units(tasks)) for row in unit_rows):
            rows.append(row)
            with done_file.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            print(f"{row['key_fingerprint']} {row['chapter']}: "
                  f"{'ran to its end' if row['completed'] else 'STOPPED: ' + str(row['error'])}; "
                  f"live {row['live_held']}/{row['live_checked']}, reference "
                  f"{row['reference_held']}/{row['reference_checked']} ({row['seconds']:.0f} s)", flush=True)
            for f in row["failed"]:
                print(f"    differed ({f['tier']}): {f['says']} -- {f['shows']}", flush=True)
    summary = summarise([r for r in rows if r["key_fingerprint"] in fresh_fingerprints], chapters, len(fresh_fingerprints))
    if args.teaching:
        teaching_rows = [r for r in rows if r["key_fingerprint"] == key_fingerprint(teaching_key())]
        failed = [(r["chapter"], f["says"]) for r in teaching_rows for f in r["failed"]]
        stopped = [(r["chapter"], r["error"]) for r in teaching_rows if not r["completed"]]
        print(f"teaching key: {len(failed)} claims failed, {len(stopped)} chapters stopped", *failed, *stopped, sep="\n  ")
    if args.chapters is None:  # only a run over the whole book replaces the published file
        args.out.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {args.out}")
    elif args.merge:
        args.out.write_text(json.dumps(merged(json.loads(args.out.read_text("utf-8")), summary), indent=1,
                                       ensure_ascii=False) + "\n")
        print(f"merged {len(summary['chapters'])} chapters into {args.out}")
    bad = {c: v["live_failed_under_some_key"] for c, v in summary["chapters"].items() if v["live_failed_under_some_key"]}
    stopped = [c for c, v in summary["chapters"].items() if v["completed"] < v["keys"]]
    print(f"{len(chapters)} chapters x {len(fresh_fingerprints)} fresh keys: {len(stopped)} chapters stopped under some key, "
          f"{sum(map(len, bad.values()))} live claims failed under some key")
    return 1 if bad or stopped else 0


if __name__ == "__main__":
    sys.exit(main())
