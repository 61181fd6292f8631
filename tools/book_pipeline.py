"""The book's pipeline in one place: the table of contents, read once, and the one notebook executor.

Every tool that walks the book (the build, the participant edition, claims robustness, the chapter timings,
the tests) reads ``_toc.yml`` through :func:`toc_entries`, and every tool that executes a notebook (the
build's parallel workers, claims robustness and the foreign-model runs, the chapter timings, the authors'
``run_notebook.py``) builds its client with :func:`notebook_client`, so that a chapter runs the same way,
in the same working folder, wherever it runs.

    >>> [e.file for e in toc_entries()][:2]
    ['book/intro', 'book/00_first_run']
    >>> toc_notebooks()[0]
    'book/00_first_run.ipynb'
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["TocEntry", "notebook_client", "toc_entries", "toc_notebooks"]


@dataclass(frozen=True)
class TocEntry:
    """One page of the table of contents, in reading order.

    ``file`` is the path without its suffix (``book/04_embedding``); ``part`` the caption of the part it sits
    in (None for the root page); ``depth`` 0 for the root page, 1 for a chapter, 2 for a section of a chapter;
    ``numbered`` whether its part is numbered (the site numbers its chapters, figures and exercises)."""

    file: str
    part: str | None
    depth: int
    numbered: bool = False

    @property
    def is_section(self) -> bool:
        return self.depth >= 2

    def notebook(self, root: Path = ROOT) -> Path | None:
        """The page's notebook, or None for a page written in Markdown."""
        path = root / f"{self.file}.ipynb"
        return path if path.exists() else None


def toc_entries(root: Path = ROOT) -> list[TocEntry]:
    """Every page of ``root/_toc.yml`` in reading order: the root page, then each part's chapters, each followed
    by its sections. The package's one reader of the table of contents."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text("utf-8"))
    if not isinstance(toc, dict) or "root" not in toc:
        raise ValueError(f"{root / '_toc.yml'} has no root page: is it a Jupyter Book table of contents?")
    found = [TocEntry(toc["root"], None, 0)]

    def walk(entries: Any, part: str | None, depth: int, numbered: bool = False) -> None:
        for entry in entries or []:
            if entry.get("file"):
                found.append(TocEntry(entry["file"], part, depth, numbered))
            walk(entry.get("sections"), part, depth + 1, numbered)

    walk(toc.get("chapters"), None, 1)
    for part in toc.get("parts", []):
        walk(part.get("chapters"), part.get("caption"), 1, bool(part.get("numbered")))
    return found


def toc_notebooks(root: Path = ROOT) -> list[str]:
    """The notebooks of the table of contents (chapters and their sections), in order, as ``book/NAME.ipynb``."""
    return [f"{e.file}.ipynb" for e in toc_entries(root) if e.notebook(root) is not None]


def notebook_client(nb: Any, cwd: str | Path, timeout: int, *, km: Any = None, allow_errors: bool = False,
                    record_timing: bool = True) -> Any:
    """The one way the book's tools execute a notebook: an nbclient ``NotebookClient`` for ``nb`` whose kernel
    starts in ``cwd`` (the chapter's folder, as Jupyter Book runs it), with ``timeout`` seconds per cell.

    ``km`` reuses a kernel manager (the build's warm workers); ``allow_errors`` keeps going past a failing cell
    (a notebook's own ``execution.allow_errors``); ``record_timing=False`` keeps timestamps out of the cells'
    metadata (the build's cache hashes the executed notebook). Call ``.execute(env=...)`` on it, or
    ``.setup_kernel()`` and ``.execute_cell(...)`` to go cell by cell."""
    from nbclient import NotebookClient

    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        raise ValueError(f"timeout must be a positive number of seconds per cell, got {timeout!r}")
    return NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                          record_timing=record_timing, resources={"metadata": {"path": str(cwd)}})
