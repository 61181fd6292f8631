"""Execute one or more chapter notebooks without building the site (for authors).

    .venv/bin/python tools/run_notebook.py book/04_embedding.ipynb [--save out.ipynb]

Prints each cell's wall time and stops at the first failing cell with its
traceback; ``--save`` writes the executed notebook (never into book/).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import CellExecutionError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_book import NO_PROGRESS_BARS  # noqa: E402
from book_pipeline import notebook_client  # noqa: E402


def run(path: Path, save: Path | None, timeout: int) -> int:
    nb = nbformat.read(path, as_version=4)
    client = notebook_client(nb, path.parent, timeout)
    start = time.perf_counter()
    status = 0
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            t0 = time.perf_counter()
            try:
                client.execute_cell(cell, index)
            except CellExecutionError as exc:
                print(f"{path}: cell {index} FAILED\n{exc}", file=sys.stderr)
                status = 1
                break
            print(f"{path.name} cell {index:3d}: {time.perf_counter() - t0:7.1f} s", flush=True)
    print(f"{path}: {'ok' if status == 0 else 'FAILED'} in {time.perf_counter() - start:.1f} s")
    if save is not None:
        if save.resolve().parent == (Path(__file__).resolve().parents[1] / "book"):
            raise SystemExit("--save must not write into book/ (notebooks are committed without outputs)")
        nbformat.write(nb, save)
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--save", type=Path, default=None)
    parser.add_argument("--timeout", type=int, default=1800)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for var, value in NO_PROGRESS_BARS.items():  # as the book's build executes a chapter (no empty bar widgets)
        os.environ.setdefault(var, value)
    return max(run(p, args.save if len(args.notebooks) == 1 else None, args.timeout) for p in args.notebooks)


if __name__ == "__main__":
    sys.exit(main())
