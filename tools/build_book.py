"""Build the book and fail loudly if any notebook cell raised.

    python tools/build_book.py [BOOK_DIR]

Runs ``jupyter-book build --all`` (every chapter whose outputs are not
cached executes; ``_config.yml`` sets ``nb_execution_raise_on_error``), keeps the full log in ``BOOK_DIR/_build.log``,
and exits non-zero if the build failed or the log reports a cell error. Also
writes ``_build/timings.json``: wall time per executed notebook, read from the
execution reports, for the teaching page.

Warm rebuilds. ``_config.yml`` executes through Jupyter Book's cache
(``execute_notebooks: cache``): a chapter whose code cells have not changed
since the last successful build is not executed again, its outputs come from
``_build/.jupyter_cache``. The cache only knows the notebooks, so this script
keeps a fingerprint of everything else a chapter's outputs depend on (the
package's code and data, including the reference run, pyproject.toml,
constraints.txt, _config.yml, ``CHAINMARK_MODEL``, ``CHAINMARK_SCALE``, the
claims mode, the fingerprint of the key the chapters use and the device) and
empties the cache when it changes: then every chapter executes again. A fresh
clone has no cache, so CI always executes every chapter.

Two chapters at a time. Before the site build, the chapters the cache lacks execute in two worker
processes (``tools/execute_parallel.py``; chapters that share a run folder stay in one worker, in
order) straight into the cache, so the site build only renders them: on a 2-core machine one chapter
alone leaves a core idle much of the time (measured in ``execute_parallel.default_jobs``). Each chapter
gets a fresh kernel; ``CHAINMARK_WARM_KERNELS=1`` keeps one kernel a worker and gives every chapter a fresh
start in it, which saves the kernel's start and the heavy imports (about 8 s a chapter here), but a new
client on a kept kernel once waited on it, idle, in a build (``execute_parallel.warm_kernels``).
``CHAINMARK_BUILD_JOBS=1`` executes one chapter at a time through ``jupyter-book`` (the default on a
GPU or with a model of your own, whose copies would not fit twice); the per-chapter times of a
parallel build are those of chapters sharing the machine (``timings.json`` says ``jobs``).

Claims. The build runs strict (``CHAINMARK_CLAIMS=strict`` unless set): a
sentence of the book that its run does not bear out fails the build, so the
site never prints one. Set ``CHAINMARK_CLAIMS=soft`` to build with your own
key or model and see the notes instead.

The participant edition. After the site, the script writes the workshop's participant notebooks
(``tools/participant_edition.py``: the notebook edition below with Build it skeletons and no solutions,
its paragraphs with the build's numbers) into one zip inside the site,
``_build/html/chainmark-participant-edition.zip``, which the Teaching page links; a chapter whose
Build it lacks its tags fails the build here.

The notebook edition. Then it writes the chapters as Colab, JupyterLab and GitHub render them
(``tools/notebook_edition.py``: the sentences with this run's numbers, links in place of MyST, the
site's hidden cells collapsed) from the executed chapters into ``_build/edition`` and one zip inside the
site, ``_build/html/chainmark-notebook-edition.zip``; markup it has no rule for fails the build here.

Chapters that keep resumable run records (8 and 8b) write them to
``_build/runs``, emptied at the start of every build: a build shows what this
code produced now, never records left by an earlier version in ``runs/``
(which stays the readers' own folder for interrupted long runs). Set
``CHAINMARK_RUNS`` to override.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: What a chapter's outputs depend on besides its own cells (globs relative to the book's root).
FINGERPRINT_INPUTS = ("chainmark/**/*", "book/cmlab/**/*", "pyproject.toml", "book/pyproject.toml",
                      "constraints.txt", "_config.yml")
FINGERPRINT_ENV = ("CHAINMARK_MODEL", "CHAINMARK_SCALE", "CHAINMARK_CLAIMS")
FINGERPRINT_FILE = ".execution_fingerprint"
PARTICIPANT_ZIP = "chainmark-participant-edition.zip"  # inside _build/html, linked from the Teaching page

#: The environment that keeps progress bars (tqdm's, the Hub's, transformers') out of an executed chapter:
#: tqdm reads ``TQDM_DISABLE`` when a kernel imports it, so every bar a chapter or a library draws is off.
NO_PROGRESS_BARS = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                    # no reader moves a slider during a build: chapter 6 shows its live widget only without this
                    "CHAINMARK_HEADLESS": "1"}

ERROR_MARKERS = ("Executing notebook failed", "CellExecutionError", "Notebook exception",
                 "An error occurred while executing the following cell")


def execution_fingerprint(book_dir: Path) -> str:
    """SHA-256 over the package's files, the build settings and the run-size variables."""
    digest = hashlib.sha256()
    for pattern in FINGERPRINT_INPUTS:
        for path in sorted(book_dir.glob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(path.relative_to(book_dir).as_posix().encode() + b"\0" + path.read_bytes())
    for var in FINGERPRINT_ENV:
        digest.update(f"{var}={os.environ.get(var, '')}".encode())
    digest.update(f"key={run_key_fingerprint()};device={run_device()}".encode())
    return digest.hexdigest()


def run_key_fingerprint() -> str:
    """The fingerprint of the key the chapters will use (the reader's own, or the public teaching key)."""
    from chainmark.auditor.keyfiles import book_key
    from chainmark.keys import key_fingerprint

    return key_fingerprint(book_key())


def run_device() -> str:
    """The device the chapters will run on: ``cuda`` with its name, or ``cpu`` with the ATen kernels asked for."""
    try:
        import torch

        if torch.cuda.is_available():
            return "cuda:" + torch.cuda.get_device_name(0)
    except ImportError:  # pragma: no cover - the book's install has torch
        pass
    return "cpu:" + os.environ.get("ATEN_CPU_CAPABILITY", "")


def drop_stale_cache(build_dir: Path, fingerprint: str) -> bool:
    """Empty the execution cache unless it was filled under ``fingerprint``; True if it was emptied."""
    cache, stamp = build_dir / ".jupyter_cache", build_dir / FINGERPRINT_FILE
    if not cache.exists():
        return False
    if stamp.exists() and stamp.read_text().strip() == fingerprint:
        return False
    shutil.rmtree(cache)
    stamp.unlink(missing_ok=True)
    return True


def restore_cached_outputs(book_dir: Path, build_dir: Path) -> int:
    """Give every executed copy in ``_build/jupyter_execute`` the outputs its page was built with.

    MyST-NB writes a chapter it took from the execution cache to ``jupyter_execute`` without the
    cached outputs (the page itself has them); the tests that read the executed copies (solutions
    ran, no bare output, every cited number glued) need them. Returns how many copies were restored.
    """
    import nbformat
    from jupyter_cache import get_cache

    cache_dir = build_dir / ".jupyter_cache"
    if not cache_dir.exists():
        return 0
    cache = get_cache(str(cache_dir))
    restored = 0
    for copy in sorted((build_dir / "jupyter_execute").rglob("*.ipynb")):
        source = book_dir / copy.relative_to(build_dir / "jupyter_execute")
        if not source.exists():  # a page written in MyST Markdown: executed in every build, its copy complete
            continue
        executed = nbformat.read(copy, as_version=4)
        if any(c.get("outputs") or c.get("execution_count") for c in executed.cells if c.cell_type == "code"):
            continue
        try:
            _, merged = cache.merge_match_into_notebook(nbformat.read(source, as_version=4))
        except KeyError:  # not in the cache: nothing to restore
            continue
        nbformat.write(merged, copy)
        restored += 1
    return restored


def execute_chapters(book_dir: Path, env: dict[str, str], log: Any) -> int:
    """Execute the chapters the cache lacks in parallel workers (tools/execute_parallel.py) before the site build.

    With one worker (``CHAINMARK_BUILD_JOBS=1``, a GPU, or a model of the reader's own) nothing happens here
    and ``jupyter-book`` executes the chapters one by one.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import execute_parallel
    from book_pipeline import toc_notebooks

    jobs = execute_parallel.default_jobs()
    if jobs < 2:
        return 0
    import yaml

    config = yaml.safe_load((book_dir / "_config.yml").read_text("utf-8"))
    timeout = int(config.get("execute", {}).get("timeout", 1800))
    saved = dict(os.environ)
    os.environ.update(env)  # the kernels inherit the build's environment (offline, no progress bars, claims, runs)
    try:
        return execute_parallel.execute_into_cache(
            book_dir, toc_notebooks(book_dir),
            jobs, timeout, log)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def build(book_dir: Path) -> int:
    os.environ.setdefault("CHAINMARK_CLAIMS", "strict")
    book_dir = book_dir.resolve()
    build_dir = book_dir / "_build"
    runs = build_dir / "runs"
    fingerprint = execution_fingerprint(book_dir)
    if drop_stale_cache(build_dir, fingerprint):
        print("build_book: the package, its data or the settings changed since the cached outputs were made: "
              "every chapter executes again")
    for stale in (build_dir / "html", build_dir / ".doctrees", build_dir / "jupyter_execute", runs):
        shutil.rmtree(stale, ignore_errors=True)
    jb = Path(sys.executable).with_name("jupyter-book")
    # progress bars are for a reader watching a live run; on the static site each is an empty widget
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", **NO_PROGRESS_BARS)
    env.setdefault("CHAINMARK_CLAIMS", "strict")
    env.setdefault("CHAINMARK_RUNS", str(runs))
    log_path = book_dir / "_build.log"
    start = time.perf_counter()
    with open(log_path, "w") as log:
        status = execute_chapters(book_dir, env, log)
        if status != 0:
            print(f"\nbuild_book: FAILED (a chapter raised while executing); log: {log_path}", file=sys.stderr)
            return status
        proc = subprocess.Popen([str(jb), "build", "--all", str(book_dir)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        status = proc.wait()
    elapsed = time.perf_counter() - start
    text = log_path.read_text()
    failed = [m for m in ERROR_MARKERS if m in text]
    if status == 0 and failed:
        status = 1
    if status != 0:
        print(f"\nbuild_book: FAILED ({', '.join(failed) or f'exit status {status}'}); log: {log_path}",
              file=sys.stderr)
        return status
    if not (build_dir / "html" / "index.html").exists():
        print("build_book: no _build/html/index.html was written", file=sys.stderr)
        return 1
    restored = restore_cached_outputs(book_dir, build_dir)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import participant_edition
    from book_pipeline import toc_notebooks
    try:
        participant_edition.write_edition(build_dir / "participant", [book_dir / nb for nb in toc_notebooks(book_dir)],
                                          zip_path=build_dir / "html" / PARTICIPANT_ZIP,
                                          executed=build_dir / "jupyter_execute", root=book_dir)
    except participant_edition.EditionError as exc:
        print(f"build_book: the participant edition: {exc}", file=sys.stderr)
        return 1
    import notebook_edition
    try:
        notebook_edition.write_edition(build_dir / "edition", build_dir / "jupyter_execute", root=book_dir,
                                       zip_path=build_dir / "html" / notebook_edition.EDITION_ZIP)
    except notebook_edition.EditionError as exc:
        print(f"build_book: the notebook edition: {exc}", file=sys.stderr)
        return 1
    timings = {Path(m.group(1)).relative_to(book_dir).as_posix(): float(m.group(2))
               for m in re.finditer(r"^(\S+\.ipynb): Executed notebook in ([\d.]+) seconds", text, re.M)}
    jobs = len(set(re.findall(r"\(parallel worker (\d+)\)$", text, re.M))) or 1
    (build_dir / "timings.json").write_text(json.dumps(
        {"total_build_seconds": round(elapsed, 1), "jobs": jobs, "notebooks": timings}, indent=2))
    (build_dir / FINGERPRINT_FILE).write_text(fingerprint + "\n")
    reused = len(re.findall(r"Using cached notebook", text)) - len(re.findall(r"\(parallel worker \d+\)$", text, re.M))
    print(f"build_book: ok in {elapsed:.0f} s ({len(timings)} chapters executed, {reused} from the cache, "
          f"{restored} executed copies restored from it); site in {build_dir / 'html'}")
    return 0


if __name__ == "__main__":
    sys.exit(build(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
