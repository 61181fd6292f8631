"""Measure how long each chapter takes to execute, for the teaching page's schedule.

    .venv/bin/python tools/measure_chapters.py --from-build   # after `make book`
    .venv/bin/python tools/measure_chapters.py --run          # executes every chapter itself

``--from-build`` reads ``_build/timings.json``, which ``tools/build_book.py``
writes from MyST-NB's "Executed notebook in N seconds" lines, so the numbers
are those of the real build. ``--run`` executes each notebook of ``_toc.yml``
in a fresh kernel with nbclient, one after the other, and times it. Either
way the result goes to ``book/data/chapter_timings.json`` with the machine,
the scale, the device, the load average and the command, and is committed:
``book/teaching.md`` builds its schedule from that file.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "data" / "chapter_timings.json"


def toc_notebooks() -> list[str]:
    """Notebooks listed in _toc.yml, in order, as 'book/NAME.ipynb'."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found: list[str] = []

    def walk(entries):
        for entry in entries or []:
            if "file" in entry and (ROOT / f"{entry['file']}.ipynb").exists():
                found.append(f"{entry['file']}.ipynb")
            walk(entry.get("sections"))

    walk(toc.get("chapters"))
    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    return found


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
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu, "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def run_all(notebooks: list[str], timeout: int) -> dict[str, float]:
    import nbformat
    from nbclient import NotebookClient

    out = {}
    for rel in notebooks:
        path = ROOT / rel
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        out[rel] = round(time.perf_counter() - start, 1)
        print(f"{rel}: {out[rel]:.1f} s", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-build", action="store_true", help="read _build/timings.json")
    source.add_argument("--run", action="store_true", help="execute every chapter and time it")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell (--run)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    from chainmark.settings import get_settings

    settings = get_settings()
    notebooks = toc_notebooks()
    before = machine()
    if args.from_build:
        build = json.loads((ROOT / "_build" / "timings.json").read_text())
        timings = {k: v for k, v in build["notebooks"].items() if k.endswith(".ipynb")}
        command = "make book; python tools/measure_chapters.py --from-build"
        extra = {"total_build_seconds": build.get("total_build_seconds")}
    else:
        timings = run_all(notebooks, args.timeout)
        command = "python tools/measure_chapters.py --run"
        extra = {}
    record = {
        "measured": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "scale": settings.scale,
        "device": settings.device,
        "model": settings.model,
        "machine": before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": {nb: timings[nb] for nb in notebooks if nb in timings},
        "not_measured": [nb for nb in notebooks if nb not in timings],
        **extra,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}: {len(record['seconds'])} chapters timed, "
          f"{len(record['not_measured'])} not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
