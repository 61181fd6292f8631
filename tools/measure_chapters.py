"""Measure how long each chapter takes to execute, for the teaching page's schedule.

    .venv/bin/python tools/measure_chapters.py --from-build             # after `make book`
    .venv/bin/python tools/measure_chapters.py --from-build _build.log  # any build log
    .venv/bin/python tools/measure_chapters.py --run [book/X.ipynb ...] # executes chapters itself

``--run`` executes in an empty temporary runs folder unless ``CHAINMARK_RUNS`` names one (the
measurements of 2026-11-30 used an empty one): a chapter reads back only what the chapter before it in
its group stored in the same pass. ``--from-build`` reads ``_build/timings.json`` (written by
``tools/build_book.py``) or a build log, i.e. MyST-NB's "Executed notebook in
N seconds" lines, so the numbers are those of a real build. ``--run``
executes notebooks (default: every notebook of ``_toc.yml``) one after the
other, each in a fresh kernel with nbclient, and times them. New
measurements are merged into ``book/data/chapter_timings.json`` (one entry
per chapter, each with its date, method and load average; ``--fresh``
starts over), together with the machine, scale and device. The file is
committed: ``book/teaching.md`` builds its schedule from it.

On a machine shared with other busy processes, set ``OMP_NUM_THREADS=1``
for ``--run``: PyTorch's worker threads otherwise spin against the other
processes and a chapter can run ten times slower than on an idle machine.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from book_pipeline import notebook_client, toc_notebooks  # noqa: E402  (the tools' one toc reader and executor)


ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "data" / "chapter_timings.json"
EXECUTED = re.compile(r"^(\S+\.ipynb): Executed notebook in ([\d.]+) seconds", re.M)


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        gpu = None
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu, "python": platform.python_version()}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _relative(path: str) -> str:
    p = Path(path)
    if p.is_absolute():
        try:
            return p.relative_to(ROOT).as_posix()
        except ValueError:
            return "book/" + p.name
    return p.as_posix()


def from_build(source: Path) -> dict[str, float]:
    """Seconds per notebook from build_book's timings.json or from a build log."""
    text = source.read_text()
    if source.suffix == ".json":
        data = json.loads(text)
        if int(data.get("jobs", 1)) > 1:  # chapters that shared the CPU with another: not a reader's times
            raise SystemExit(f"{source} comes from a build that executed {data['jobs']} chapters at a time; "
                             "a chapter's time for a reader is measured alone: build with CHAINMARK_BUILD_JOBS=1, "
                             "or use --run")
        return {_relative(k): float(v) for k, v in data["notebooks"].items()}
    if "(parallel worker" in text:
        raise SystemExit(f"{source} comes from a build that executed chapters in parallel workers; build with "
                         "CHAINMARK_BUILD_JOBS=1, or use --run")
    return {_relative(m.group(1)): float(m.group(2)) for m in EXECUTED.finditer(text)}


def run_one(rel: str, timeout: int) -> float | None:
    """Execute one notebook in a fresh kernel; its wall time, or None if a cell failed."""
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    path = ROOT / rel
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    try:
        notebook_client(nb, path.parent, timeout).execute()
    except (CellExecutionError, CellTimeoutError) as exc:
        print(f"{rel}: FAILED, not recorded ({type(exc).__name__})", flush=True)
        return None
    seconds = round(time.perf_counter() - start, 1)
    print(f"{rel}: {seconds:.1f} s", flush=True)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-build", nargs="?", const=str(ROOT / "_build" / "timings.json"), metavar="FILE",
                        help="_build/timings.json (default) or a build log")
    source.add_argument("--run", nargs="*", metavar="NOTEBOOK", help="execute these (default: all) and time them")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell (--run)")
    parser.add_argument("--fresh", action="store_true", help="drop earlier measurements")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    from cmlab.harness.settings import get_settings

    settings = get_settings()
    record = {"chapters": {}}
    if args.out.exists() and not args.fresh:
        record = json.loads(args.out.read_text())

    def save(timings: dict[str, float], how: str, stamp: float, load: list[float] | None) -> None:
        when = dt.datetime.fromtimestamp(stamp, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        for nb, seconds in timings.items():
            record["chapters"][nb] = {
                "seconds": round(seconds, 1), "measured": when, "how": how, "load_average": load,
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS") if args.run is not None else None}
        record.update({
            "machine": machine(), "scale": settings.scale, "device": settings.device, "model": settings.model,
            "commands": ["make book && python tools/measure_chapters.py --from-build",
                         "python tools/measure_chapters.py --run [book/X.ipynb ...]"],
        })
        record["chapters"] = dict(sorted(record["chapters"].items()))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")

    measured = 0
    if args.from_build is not None:
        # a build's numbers date from when its log was written; its load was not recorded
        source = Path(args.from_build)
        timings = from_build(source)
        save(timings, f"build ({source.name})", source.stat().st_mtime, None)
        measured = len(timings)
    else:
        # in the book's order from an empty runs folder, as a reader's first pass: a chapter of a group reads what
        # the one before it stored (cmlab.teaching.colab._READ_BACK), never records of an earlier pass
        if not os.environ.get("CHAINMARK_RUNS"):
            import tempfile

            os.environ["CHAINMARK_RUNS"] = tempfile.mkdtemp(prefix="measure_chapters_runs.")
        print(f"runs folder for this pass: {os.environ['CHAINMARK_RUNS']}", flush=True)
        for rel in args.run or toc_notebooks():  # saved one by one, so an interrupted run keeps its results
            load_before = _load()
            seconds = run_one(rel, args.timeout)
            if seconds is not None:
                save({rel: seconds}, "tools/measure_chapters.py --run", time.time(),
                     [max(a, b) for a, b in zip(load_before, _load())])
                measured += 1
    missing = [nb for nb in toc_notebooks() if nb not in record["chapters"]]
    print(f"wrote {args.out}: {measured} chapters measured now; not measured yet: {missing or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
