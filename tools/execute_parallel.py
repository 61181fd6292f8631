"""Execute the book's chapters in parallel workers into Jupyter Book's execution cache, before the site is built.

``jupyter-book build`` executes one chapter after another. On a 2-core machine a chapter leaves a core
idle much of the time (kernel start, imports, plotting, single-threaded NumPy), so
``tools/build_book.py`` first executes the chapters that are not in the cache in ``jobs`` worker
processes, each chapter in a fresh kernel exactly as MyST-NB's cache mode would (same notebook, working
folder, timeout and error handling), and stores each executed notebook in ``_build/.jupyter_cache``;
the site build then finds every chapter there ("Using cached notebook").

Chapters that share a run folder (section 4.1 reads chapter 4's texts, 5.1 and 5.2 chapter 5's, 7.2
chapter 7's, 9.1 chapter 9's: generate once, read many) must run one after the other, so a worker takes
a whole *group*, the chapters with the same leading number, in the table of contents' order. Groups go to the worker that
is least loaded, longest first, by the chapters' recorded times (``book/data/chapter_timings.json``).

With ``$CHAINMARK_WARM_KERNELS=1`` (off by default) a worker keeps one kernel for its whole queue: before each
chapter but the first, the kernel's namespace is emptied and what a chapter may change in the process
(working folder, environment, import path, Matplotlib's settings, warning filters) is put back as the
first chapter found it, and ``chainmark`` and ``cmlab`` are imported afresh (their caches and the claims
checked start empty), so a chapter runs as in a fresh kernel without paying again for the
kernel's start and the imports of torch, transformers, pandas and Matplotlib (15–20 s a chapter here).
Readers, the foreign-model and participant runs, and ``tools/run_notebook.py`` still use a fresh kernel
per chapter.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

#: What the build log says of each chapter executed here (the pattern MyST-NB's own lines follow,
#: which tools/build_book.py and tools/measure_ci.py read).
EXECUTED_LINE = "{path}: Executed notebook in {seconds:.2f} seconds (parallel worker {worker})"
FAILED_LINE = "{path}: Executing notebook failed: {error}"
JOBS_ENV = "CHAINMARK_BUILD_JOBS"
WARM_ENV = "CHAINMARK_WARM_KERNELS"

#: Run in a worker's kernel before every chapter: the first time it notes the process's state, later times
#: it empties the namespace and restores that state (what a fresh kernel would give the chapter).
_FRESH_START = r"""
import sys as _sys, types as _types
_state = _sys.modules.get("_chainmark_fresh_start")
if _state is None:
    import copy, os, warnings
    import matplotlib
    import matplotlib.pyplot
    _state = _sys.modules["_chainmark_fresh_start"] = _types.ModuleType("_chainmark_fresh_start")
    _state.cwd, _state.env, _state.path = os.getcwd(), dict(os.environ), list(_sys.path)
    _state.rc, _state.filters = copy.deepcopy(dict(matplotlib.rcParams)), list(warnings.filters)
else:
    get_ipython().run_line_magic("reset", "-f")
    import os, sys, warnings
    import matplotlib
    import matplotlib.pyplot as plt
    _state = sys.modules["_chainmark_fresh_start"]
    plt.close("all")
    matplotlib.rcParams.update(_state.rc)
    warnings.filters[:] = _state.filters
    os.chdir(_state.cwd)
    os.environ.clear()
    os.environ.update(_state.env)
    sys.path[:] = _state.path
    if "ipywidgets" in sys.modules:  # a widget's callbacks would keep the last chapter's model and texts alive
        sys.modules["ipywidgets"].Widget.close_all()
    getattr(warnings, "_filters_mutated", lambda: None)()  # a warning shown before is shown again
    once = getattr(sys.modules.get("transformers.utils.logging"), "warning_once", None)
    if once is not None and hasattr(once, "cache_clear"):  # transformers' warn-once memory
        once.cache_clear()
    for name in [n for n in sys.modules if n.split(".")[0] in ("chainmark", "cmlab")]:
        del sys.modules[name]  # the book's packages are imported afresh: their caches and claims start empty
get_ipython().run_line_magic("reset", "-f")  # the names this cell made, so that no chapter finds them
__import__("gc").collect()
get_ipython().execution_count = 0  # IPython counts this cell: the chapter's first cell is then In [1], as when fresh
"""


def default_jobs() -> int:
    """Workers for this build: ``$CHAINMARK_BUILD_JOBS``, else 2 with the embedded model on a CPU, else 1.

    Measured on the book's 2-core machine, in a fresh clone of commit 53983e6, idle: the cold build took
    1,332 s with two workers of one thread each and 1,775 s one chapter at a time (0.75 times as long).
    A chapter runs slower beside another, yet the machine does more work per second: one chapter alone
    leaves a core idle during its kernel's start, imports, plotting and single-threaded NumPy. One
    worker on a GPU or with a model of the reader's own: two kernels would each hold a copy of it.
    """
    value = os.environ.get(JOBS_ENV, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{JOBS_ENV} must be a whole number of workers (1 or more), not {value!r}")
        return int(value)
    if os.environ.get("CHAINMARK_MODEL", "").strip():
        return 1
    try:
        import torch

        if torch.cuda.is_available():
            return 1
    except ImportError:  # pragma: no cover - the book's install has torch
        pass
    return max(1, min(2, os.cpu_count() or 1))


def chapter_group(path: str | os.PathLike) -> str:
    """The group a chapter runs in: its leading number (``05`` for 05_detection and 05b_lr_detector)."""
    name = Path(path).name
    match = re.match(r"(\d+)", name)
    return match.group(1) if match else name


def plan_queues(notebooks: list[str], jobs: int, seconds: dict[str, float]) -> list[list[str]]:
    """Split ``notebooks`` (in table-of-contents order) into ``jobs`` queues of whole groups, balanced by time.

    A chapter with no recorded time counts as the median of the others. Each queue runs its longest
    groups first (so that the workers finish close together) and a group's chapters in the table of
    contents' order, so a chapter runs after the ones it reads from.
    """
    groups: dict[str, list[str]] = {}
    for nb in notebooks:
        groups.setdefault(chapter_group(nb), []).append(nb)
    known = sorted(seconds.values())
    typical = known[len(known) // 2] if known else 60.0
    cost = {g: sum(seconds.get(nb, typical) for nb in members) for g, members in groups.items()}
    queues: list[list[str]] = [[] for _ in range(max(1, jobs))]
    loads = [0.0] * len(queues)
    for g in sorted(groups, key=lambda g: -cost[g]):
        i = loads.index(min(loads))
        queues[i].extend(groups[g])
        loads[i] += cost[g]
    return [q for q in queues if q]


def warm_kernels() -> bool:
    """Whether a worker keeps one kernel for its queue: only with ``$CHAINMARK_WARM_KERNELS=1`` (off by default).

    In a fresh-clone build a worker's new notebook client on its kept kernel once waited with the kernel idle and
    the chapter not started (the seventh chapter of the queue, 06_calibration, after 5.2), where a build's cell
    would only time out after half an hour. A fresh kernel per chapter did so once too (see
    :data:`CELL_LIMIT_SECONDS`, which bounds the wait and runs the chapter again)."""
    value = os.environ.get(WARM_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{WARM_ENV} must be 0 (a fresh kernel per chapter) or 1 (one kernel per worker), not {value!r}")
    return value == "1"


#: The longest a cell may run in the parallel build before the chapter counts as stalled. Three times the longest
#: whole chapter on the 2-core machine (08_head_to_head, 277 s in a fresh clone): in fresh-clone builds a worker's
#: notebook client twice waited on its kernel with the kernel idle and a cell's reply never read (06_calibration,
#: once on a kept kernel, once on a fresh one; py-spy: the kernel in its event loop, torch and pandas loaded, the
#: client in nbclient's execute), which the book's 30-minute cell timeout only ended by failing the build.
CELL_LIMIT_SECONDS = 900


def _stalled(error: BaseException | None) -> bool:
    """Whether a chapter's run ended on a cell that timed out (run it again on a fresh kernel, once)."""
    from nbclient.exceptions import CellTimeoutError

    return isinstance(error, CellTimeoutError)


def _run_notebook(nb: Any, cwd: str, timeout: int, km: Any) -> tuple[Any, BaseException | None, str]:
    """Execute ``nb`` in place on the kernel ``km`` manages (started here if it is not), as MyST-NB would.

    Returns the kernel manager, the error (None when every cell ran) and its traceback."""
    import traceback

    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    from book_pipeline import notebook_client

    execution = nb.metadata.get("execution", {})  # a notebook's own timeout or allow_errors win, as in MyST-NB
    # record_timing=False, as jupyter-cache's own executor: timestamps in a cell's metadata would change the
    # notebook's hash, and the site build would miss the cache and execute every chapter again
    client = notebook_client(nb, cwd, int(execution.get("timeout", timeout)), km=km, record_timing=False,
                             allow_errors=bool(execution.get("allow_errors", False)))
    if km is None:
        client.km = km = client.create_kernel_manager()  # created here but owned by the caller: kept alive
        client.owns_km = False
    try:
        client.execute()
        return km, None, ""
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
        return km, err, traceback.format_exc()
    finally:
        if client.kc is not None:
            client.kc.stop_channels()


def _shutdown(km: Any) -> None:
    from nbclient.util import run_sync

    if km is not None and km.has_kernel:
        run_sync(km.shutdown_kernel)(now=True)


def _execute_queue(queue: list[str], timeout: int, threads: int | None, worker: int,
                   warm: bool = True) -> list[dict[str, Any]]:
    """Execute each notebook of ``queue``, in one kernel when ``warm`` (reset between chapters, see
    :data:`_FRESH_START`) or each in a fresh one; stop at the first failure. Runs in a worker process."""
    import nbformat

    if threads:  # each kernel inherits this: one CPU thread per chapter when two share two cores
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        os.environ.setdefault("MKL_NUM_THREADS", str(threads))
    results, km = [], None
    try:
        for path in queue:
            nb = nbformat.read(path, as_version=4)
            cwd = str(Path(path).parent)
            start = time.perf_counter()
            if not warm:
                _shutdown(km)
                km = None
            error, trace = None, ""
            if warm:  # the first time, note the fresh kernel's state; later, empty the kernel and restore it
                fresh_start = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(_FRESH_START)])
                km, error, trace = _run_notebook(fresh_start, cwd, 300, km)
            if error is None:
                km, error, trace = _run_notebook(nb, cwd, min(timeout, CELL_LIMIT_SECONDS), km)
            if _stalled(error):  # once more, on a fresh kernel, from the chapter as written
                print(f"execute_parallel: worker {worker}: {Path(path).name} stalled ({type(error).__name__}): "
                      "once more on a fresh kernel", flush=True)
                _shutdown(km)
                nb = nbformat.read(path, as_version=4)
                km, error, trace = _run_notebook(nb, cwd, min(timeout, CELL_LIMIT_SECONDS), None)
            seconds = time.perf_counter() - start
            ok = error is None
            results.append({"path": path, "seconds": seconds, "worker": worker, "ok": ok,
                            "notebook": nbformat.writes(nb) if ok else None,
                            "error": None if ok else f"{type(error).__name__}\n{trace}"})
            print(f"execute_parallel: worker {worker}: {Path(path).name} "
                  + (f"done in {seconds:.0f} s" if ok else f"FAILED ({type(error).__name__})"), flush=True)
            if not ok:
                break
    finally:
        _shutdown(km)
    return results


def execute_into_cache(book_dir: Path, notebooks: list[str], jobs: int, timeout: int, log: Any = None) -> int:
    """Execute the uncached ``notebooks`` (paths relative to ``book_dir``) in ``jobs`` workers into the cache.

    Returns 0 when every chapter executed (or was cached already), 1 on the first failure, whose
    traceback is written to ``log`` (and stdout) with the words the build looks for.
    """
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(str(book_dir / "_build" / ".jupyter_cache"))
    todo = []
    for rel in notebooks:
        path = str(book_dir / rel)
        try:
            cache.match_cache_notebook(nbformat.read(path, as_version=4))
        except KeyError:
            todo.append(path)
    if not todo:
        return 0
    recorded = book_dir / "book" / "data" / "chapter_timings.json"
    seconds = {}
    if recorded.exists():
        seconds = {str(book_dir / k): float(v["seconds"])
                   for k, v in json.loads(recorded.read_text("utf-8")).get("chapters", {}).items()}
    queues = plan_queues(todo, jobs, seconds)
    threads = max(1, (os.cpu_count() or 1) // len(queues)) if len(queues) > 1 else None

    def say(line: str) -> None:
        print(line, flush=True)
        if log is not None:
            log.write(line + "\n")
            log.flush()

    say(f"execute_parallel: {len(todo)} chapters in {len(queues)} workers: "
        + " | ".join(", ".join(Path(p).stem for p in q) for q in queues))
    start = time.perf_counter()
    status = 0
    with ProcessPoolExecutor(max_workers=len(queues)) as pool:
        warm = warm_kernels()
        futures = [pool.submit(_execute_queue, q, timeout, threads, i + 1, warm) for i, q in enumerate(queues)]
        for future in futures:
            for r in future.result():
                if r["ok"]:
                    cache.cache_notebook_bundle(
                        CacheBundleIn(nbformat.reads(r["notebook"], as_version=4), r["path"],
                                      data={"execution_seconds": r["seconds"]}),
                        check_validity=False, overwrite=True)
                    say(EXECUTED_LINE.format(path=r["path"], seconds=r["seconds"], worker=r["worker"]))
                else:
                    say(FAILED_LINE.format(path=r["path"], error=r["error"]))
                    status = 1
    say(f"execute_parallel: done in {time.perf_counter() - start:.0f} s")
    return status


if __name__ == "__main__":  # execute the given chapters into ./_build/.jupyter_cache
    root = Path.cwd()
    sys.exit(execute_into_cache(root, sys.argv[1:], default_jobs(), 1800))
