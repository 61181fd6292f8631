"""The book's structure: table of contents, stripped notebooks, failing builds fail."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from book_pipeline import toc_entries, toc_notebooks

ROOT = Path(__file__).resolve().parents[1]


def toc_files() -> list[str]:
    """Every page of the table of contents, root first, without suffix (tools/book_pipeline.py reads it)."""
    return [entry.file for entry in toc_entries()]


def resolve(entry: str) -> Path:
    for suffix in ("", ".ipynb", ".md"):
        path = ROOT / f"{entry}{suffix}"
        if path.is_file():
            return path
    raise FileNotFoundError(entry)


def test_every_toc_entry_exists():
    files = toc_files()
    assert files[0] == "book/intro" and "book/00_first_run" in files
    for entry in files:
        resolve(entry)


def test_every_notebook_is_listed_in_the_toc():
    listed = {resolve(e) for e in toc_files()}
    for nb in (ROOT / "book").glob("*.ipynb"):
        assert nb in listed, f"{nb} is not in _toc.yml"


def test_notebooks_are_committed_without_outputs():
    for path in (ROOT / "book").glob("*.ipynb"):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs"), f"{path.name} has outputs"
                assert cell.get("execution_count") is None, f"{path.name} has execution counts"


def test_colab_headers_are_in_sync_with_config():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "notebooks.py"), "check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_colab_install_cell_never_touches_torch():
    for path in (ROOT / "book").glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        install = nb.cells[1].source
        assert "google.colab" in install, path.name
        pip_lines = [ln for ln in install.splitlines() if "pip install" in ln]
        assert pip_lines and not any("torch" in ln for ln in pip_lines), path.name


def test_colab_opens_and_installs_the_books_release_never_main():
    """Badge and Jupyter Book's launch buttons open the release's notebook edition (the tag v<pyproject
    version>-notebooks, which the pages workflow writes), and the install cell installs the release tag, so a
    chapter opened in Colab reads as the site does and installs the package it was written with."""
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    import chainmark

    assert chainmark.__version__ == version
    tag = f"v{version}"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["branch"] == f"{tag}-notebooks"
    url = config["repository"]["url"]
    for path in (ROOT / "book").glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        assert f"blob/{tag}-notebooks/book/{path.name})" in nb.cells[0].source, path.name
        assert f"git+{url}@{tag}\"" in nb.cells[1].source, path.name
        assert "@main" not in nb.cells[1].source and "blob/main" not in nb.cells[0].source, path.name


def test_every_chapter_has_the_same_settings_cell_right_after_the_install():
    import notebooks

    for path in (ROOT / "book").glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        assert nb.cells[2].cell_type == "code" and nb.cells[2].source == notebooks.SETTINGS_SOURCE, path.name
    # the cell as written runs: every value None gives the defaults of this environment
    namespace: dict = {}
    exec(compile(notebooks.SETTINGS_SOURCE, "settings-cell", "exec"), namespace)


def test_config_executes_and_fails_on_errors():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["execute"]["execute_notebooks"] == "cache"  # warm rebuilds; build_book.py drops stale outputs
    assert config["sphinx"]["config"]["nb_execution_raise_on_error"] is True
    assert config["only_build_toc_files"] is True
    assert config["repository"]["url"].startswith("https://github.com/")
    assert "colab_url" in config["launch_buttons"]


def _mini_book(tmp_path: Path, cell_source: str, other: str | None = None) -> Path:
    """A book of one chapter (two with ``other``, a second chapter's code cell) on this repository's config."""
    book = tmp_path / "book"
    book.mkdir(parents=True)
    shutil.copy(ROOT / "_config.yml", book / "_config.yml")
    (book / "tools").mkdir()  # the config's local Sphinx extension (no launch button on Markdown pages)
    shutil.copy(ROOT / "tools" / "sphinx_launch.py", book / "tools" / "sphinx_launch.py")
    toc = "format: jb-book\nroot: intro\nchapters:\n  - file: chapter\n"
    (book / "_toc.yml").write_text(toc + ("  - file: other\n" if other is not None else ""))
    (book / "intro.md").write_text("# Mini book\n\nA page.\n")
    for name, source in (("chapter", cell_source), ("other", other)):
        if source is None:
            continue
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(f"# {name.title()}"), nbformat.v4.new_code_cell(source)]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, book / f"{name}.ipynb")
    return book


def _build(book: Path, **env: str) -> subprocess.CompletedProcess:
    """tools/build_book.py on ``book``; chapters in two workers unless ``env`` says otherwise (both paths tested)."""
    env = {"CHAINMARK_BUILD_JOBS": "2", **env}
    return subprocess.run([sys.executable, str(ROOT / "tools" / "build_book.py"), str(book)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, **env})


@pytest.mark.slow
def test_a_failing_cell_fails_the_build(tmp_path):
    ok = _build(_mini_book(tmp_path / "ok", "print('fine')"))
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    for jobs in ("2", "1"):  # chapters in parallel workers, and one by one through jupyter-book itself
        bad = _build(_mini_book(tmp_path / f"bad{jobs}", "raise RuntimeError('this cell fails on purpose')"),
                     CHAINMARK_BUILD_JOBS=jobs)
        assert bad.returncode != 0
        assert "FAILED" in bad.stderr


@pytest.mark.slow
def test_a_rebuild_reuses_outputs_until_the_package_changes(tmp_path):
    """Warm rebuilds: nothing changed, nothing executes; one chapter edited, only that chapter executes;
    a package file changed, every chapter executes."""
    book = _mini_book(tmp_path / "warm", "print('fine')", other="print('other')")
    first = _build(book)
    assert first.returncode == 0 and "(2 chapters executed, 0 from the cache" in first.stdout, first.stdout[-1500:]
    again = _build(book)
    assert again.returncode == 0 and "(0 chapters executed, 2 from the cache" in again.stdout, again.stdout[-1500:]
    # the executed copy of a chapter taken from the cache carries its outputs (the tests read them)
    copy = nbformat.read(book / "_build" / "jupyter_execute" / "chapter.ipynb", as_version=4)
    assert "fine" in "".join(o.get("text", "") for o in copy.cells[1].outputs), copy.cells[1]
    other = nbformat.read(book / "other.ipynb", as_version=4)
    other.cells[1].source = "print('edited')"
    nbformat.write(other, book / "other.ipynb")
    edited = _build(book)
    assert edited.returncode == 0 and "(1 chapters executed, 1 from the cache" in edited.stdout, edited.stdout[-1500:]
    (book / "chainmark").mkdir()
    (book / "chainmark" / "module.py").write_text("VALUE = 2\n")
    changed = _build(book)
    assert "every chapter executes again" in changed.stdout
    assert changed.returncode == 0 and "(2 chapters executed" in changed.stdout, changed.stdout[-1500:]


def test_parallel_execution_keeps_each_group_in_one_worker_in_order_and_balances_the_load(monkeypatch):
    """Chapters that share a run folder (4 and 4.1; 5, 5.1 and 5.2; 7 and 7.2; 9 and 9.1) run in one worker, in
    the table's order; the groups are spread so that no worker carries much more than the longest group."""
    import execute_parallel as ep

    notebooks = toc_notebooks()
    recorded = json.loads((ROOT / "book" / "data" / "chapter_timings.json").read_text())["chapters"]
    seconds = {nb: float(v["seconds"]) for nb, v in recorded.items()}
    queues = ep.plan_queues(notebooks, 2, seconds)
    assert sorted(nb for q in queues for nb in q) == sorted(notebooks) and len(queues) == 2
    where = {nb: i for i, q in enumerate(queues) for nb in q}
    for first, reader in (("04_embedding", "04b_cost"), ("05_detection", "05a_false_positives"),
                          ("05_detection", "05b_lr_detector"), ("07_robustness", "07b_attacks"),
                          ("09_audit", "09a_recalibration")):
        assert where[f"book/{first}.ipynb"] == where[f"book/{reader}.ipynb"]
        q = queues[where[f"book/{first}.ipynb"]]
        assert q.index(f"book/{first}.ipynb") < q.index(f"book/{reader}.ipynb")
    for q in queues:  # a group's chapters in the table's order
        for g in {ep.chapter_group(nb) for nb in q}:
            members = [nb for nb in q if ep.chapter_group(nb) == g]
            assert members == sorted(members, key=notebooks.index)
    loads = [sum(seconds.get(nb, 0) for nb in q) for q in queues]
    groups = {}
    for nb in notebooks:
        groups[ep.chapter_group(nb)] = groups.get(ep.chapter_group(nb), 0) + seconds.get(nb, 0)
    assert max(loads) - min(loads) <= max(groups.values())  # greedy, longest first: within one group
    assert sorted(ep.plan_queues(notebooks, 1, seconds)[0]) == sorted(notebooks)
    assert ep.chapter_group("book/05b_lr_detector.ipynb") == "05" == ep.chapter_group("book/05_detection.ipynb")
    monkeypatch.setenv("CHAINMARK_BUILD_JOBS", "3")
    assert ep.default_jobs() == 3
    monkeypatch.setenv("CHAINMARK_BUILD_JOBS", "two")
    with pytest.raises(ValueError, match="whole number"):
        ep.default_jobs()
    monkeypatch.delenv("CHAINMARK_BUILD_JOBS")
    monkeypatch.setenv("CHAINMARK_MODEL", "Qwen/Qwen2.5-1.5B-Instruct")
    assert ep.default_jobs() == 1  # a reader's own model: one copy of it in memory


@pytest.mark.slow
def test_a_warm_worker_gives_each_chapter_a_fresh_start(tmp_path, monkeypatch):
    """One kernel runs a worker's queue, but a chapter does not see what the one before it left: names, the
    working folder, environment variables, Matplotlib settings, or the book's packages' state (claims checked,
    caches); a failing chapter stops the queue with its error, and ``CHAINMARK_WARM_KERNELS`` is checked."""
    import execute_parallel as ep

    first = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "print(sorted(k for k in ('copy', 'os', '_state', 'matplotlib') if k in globals()))\n"
        "import os, matplotlib, cmlab.teaching.claims as c\n"
        "leftover = 1\nos.environ['CHAINMARK_LEFTOVER'] = '1'\nmatplotlib.rcParams['lines.linewidth'] = 9\n"
        "c._outcomes.append('a claim of the first chapter')\nos.chdir('..')")])
    second = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, sys, pathlib, matplotlib, cmlab.teaching.claims as c\n"
        "print(sorted(k for k in globals() if k == 'leftover'), os.environ.get('CHAINMARK_LEFTOVER'),\n"
        "      matplotlib.rcParams['lines.linewidth'], len(c._outcomes), pathlib.Path.cwd().name, os.getpid())")])
    failing = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise ValueError('this chapter fails')")])
    book = tmp_path / "book"
    book.mkdir()
    for name, nb in (("01_a", first), ("02_b", second), ("03_c", failing), ("04_d", second)):
        nbformat.write(nb, book / f"{name}.ipynb")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "book") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    results = ep._execute_queue([str(book / f"{n}.ipynb") for n in ("01_a", "02_b", "01_a", "02_b", "03_c", "04_d")],
                                120, None, 1, warm=True)
    assert [r["ok"] for r in results] == [True, True, True, True, False]  # stopped at the failure
    assert "ValueError" in results[-1]["error"] and "this chapter fails" in results[-1]["error"]
    first_run = nbformat.reads(results[0]["notebook"], as_version=4).cells[0].outputs[0]["text"]
    assert first_run.strip() == "[]", first_run  # the first chapter finds none of the fresh start's own names
    printed = [nbformat.reads(r["notebook"], as_version=4).cells[0].outputs[0]["text"].split() for r in results[1:4:2]]
    for words in printed:  # no leftover name or variable, the line width not 9, no claims, the chapter's folder
        assert words[:2] == ["[]", "None"] and words[2] != "9" and words[3:5] == ["0", "book"], words
    assert printed[0][5] == printed[1][5]  # one kernel process for the queue
    assert [nbformat.reads(r["notebook"], as_version=4).cells[0].execution_count for r in results[:4]] == [1] * 4
    # the site build finds each executed chapter in jupyter-cache: same hash as the chapter as written (a cell's
    # execution timestamps would change it, and every chapter would execute a second time)
    from jupyter_cache import get_cache

    cache = get_cache(str(tmp_path / "cache"))
    hashed = [cache.create_hashed_notebook(nb)[1] for nb in
              (nbformat.read(book / "01_a.ipynb", as_version=4), nbformat.reads(results[0]["notebook"], as_version=4))]
    assert hashed[0] == hashed[1]
    monkeypatch.setenv("CHAINMARK_WARM_KERNELS", "yes")
    with pytest.raises(ValueError, match="CHAINMARK_WARM_KERNELS"):
        ep.warm_kernels()
    monkeypatch.setenv("CHAINMARK_WARM_KERNELS", "0")
    assert ep.warm_kernels() is False
    monkeypatch.delenv("CHAINMARK_WARM_KERNELS")
    assert ep.warm_kernels() is False  # opt-in: a new client on a kept kernel once waited on it, idle, in a build
    monkeypatch.setenv("CHAINMARK_WARM_KERNELS", "1")
    assert ep.warm_kernels() is True


def test_the_build_benchmark_counts_the_decoding_the_chapters_forecast(tmp_path):
    """benchmarks/bench_build.py's floor: the new tokens of each forecast's decoding steps, scoring left out."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_build

    from cmlab.teaching.forecast import Expectation, Step

    steps = [Step("pilot for the gate", 6, 48), Step("with and without the watermark", 32, 96),
             Step("teacher-forced scoring passes", 40, 96, "score")]
    shown = Expectation(steps, [1.0, 2.0, 3.0], 10**9, None, "RAM", 8, 0.1, 0.01, "cpu", "float32", "m")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("expect_generation(...)", outputs=[nbformat.v4.new_output(
        "execute_result", data={"text/plain": str(shown)}, execution_count=1)]), nbformat.v4.new_code_cell("1")]
    nbformat.write(nb, tmp_path / "05_detection.ipynb")
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "01_partition.ipynb")
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "teaching.ipynb")  # teaching.md's executed copy: no chapter
    assert bench_build.forecast_tokens(tmp_path) == {"book/05_detection.ipynb": 6 * 48 + 32 * 96,
                                                      "book/01_partition.ipynb": 0}


def test_the_execution_fingerprint_follows_the_key_and_the_device(monkeypatch):
    """Outputs made under one key (or device, or claims mode) are never reused under another."""
    try:
        import build_book
    finally:
        sys.path.remove(str(ROOT / "tools"))
    for var in ("CHAINMARK_KEY", "CHAINMARK_KEY_FILE", "ATEN_CPU_CAPABILITY", "CHAINMARK_CLAIMS"):
        monkeypatch.delenv(var, raising=False)
    teaching = build_book.execution_fingerprint(ROOT)
    assert build_book.execution_fingerprint(ROOT) == teaching
    monkeypatch.setenv("CHAINMARK_KEY", bytes(range(32)).hex())
    own_key = build_book.execution_fingerprint(ROOT)
    monkeypatch.delenv("CHAINMARK_KEY")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    other_kernels = build_book.execution_fingerprint(ROOT)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    monkeypatch.setenv("CHAINMARK_CLAIMS", "soft")
    soft = build_book.execution_fingerprint(ROOT)
    assert len({teaching, own_key, other_kernels, soft}) == 4


def _python_blocks(markdown: str) -> list[str]:
    import re

    return re.findall(r"```python\n(.*?)```", markdown, re.S)


@pytest.mark.parametrize("page", ["book/intro.md", "book/teaching.md"])
def test_code_shown_in_pages_compiles_and_its_imports_exist(page):
    """Code blocks on the Markdown pages are not executed by the build, so check them here:
    they parse, every name they import exists, and every name they use is defined or imported."""
    import ast
    import builtins
    import importlib

    for block in _python_blocks((ROOT / page).read_text(encoding="utf-8")):
        tree = ast.parse(block)
        defined = set(dir(builtins))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{page}: {node.module} has no {alias.name}"
                    defined.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)
                    defined.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert not used - defined, f"{page}: a code block uses undefined names {sorted(used - defined)}"


def test_every_chapter_has_a_measured_run_time():
    """The teaching page schedules workshops from book/data/chapter_timings.json, so every
    notebook in the table of contents needs a measured entry (tools/measure_chapters.py)."""
    timings = json.loads((ROOT / "book" / "data" / "chapter_timings.json").read_text())
    notebooks = [resolve(e).relative_to(ROOT).as_posix() for e in toc_files()
                 if resolve(e).suffix == ".ipynb"]
    missing = [nb for nb in notebooks if nb not in timings["chapters"]]
    assert not missing, f"no measured run time for {missing}: run tools/measure_chapters.py"
    for nb in notebooks:
        entry = timings["chapters"][nb]
        seconds = entry["seconds"] if isinstance(entry, dict) else entry
        assert 0 < float(seconds) < 3600, (nb, entry)


def test_the_claims_robustness_record_covers_every_chapter_and_no_live_claim_failed():
    """book/data/claims_robustness.json (tools/claims_robustness.py): every chapter of the table of contents ran
    to its end under at least five fresh keys, and no live claim the book keeps failed under any of them."""
    record = json.loads((ROOT / "book" / "data" / "claims_robustness.json").read_text())
    chapters = {f"{e}.ipynb" for e in toc_files() if (ROOT / f"{e}.ipynb").exists()}
    assert record["keys"] >= 5 and set(record["chapters"]) == chapters
    for name, chapter in record["chapters"].items():
        assert chapter["keys"] == record["keys"] and chapter["completed"] == chapter["keys"], (name, chapter["runs"])
        assert not chapter["live_failed_under_some_key"], (name, chapter["live_failed_under_some_key"])
        assert len({r["key_fingerprint"] for r in chapter["runs"]}) == record["keys"], name


def test_claims_robustness_runs_one_keys_chapters_of_a_group_in_order_in_one_worker():
    """Chapters of one group share a runs folder under a key (4.1 reads chapter 4's texts): side by side, the second
    found the first's folder locked, so each (key, group) is one worker's unit, in the book's order."""
    import claims_robustness

    chapters = ["book/04_embedding.ipynb", "book/04b_cost.ipynb", "book/05_detection.ipynb"]
    tasks = [(c, f"{k}.key", k, "work", 60, 1) for c in chapters for k in ("a", "b")]  # chapter-major, as main's
    units = claims_robustness.task_units(tasks)
    assert [[(t[0][5:7], t[2]) for t in unit] for unit in units] == [
        [("04", "a"), ("04", "a")], [("04", "b"), ("04", "b")], [("05", "a")], [("05", "b")]]
    assert [t[0] for t in units[0]] == chapters[:2]
    assert sorted(t for unit in units for t in unit) == sorted(tasks)


def test_every_solution_start_has_its_solution_end():
    """sphinx-exercise's gated solutions: in every chapter's markdown, ``{solution-start}`` and ``{solution-end}``
    alternate, one end after each start (the build stops on a start left open; a chapter's own run does not see
    it, so this catches it before the build)."""
    import re

    for nb in sorted((ROOT / "book").glob("*.ipynb")):
        text = "\n".join("".join(c["source"]) for c in json.loads(nb.read_text("utf-8"))["cells"]
                         if c["cell_type"] == "markdown")
        order = re.findall(r"\{solution-(start|end)\}", text)
        assert order == ["start", "end"] * (len(order) // 2), (nb.name, order)


def _stalling_notebooks(marker: Path) -> tuple:
    """Two notebooks for the stall tests: one whose cell sleeps past any short timeout only in its first kernel
    (``marker`` remembers that kernel's pid) and prints whether it ran in another; one that always sleeps."""
    once = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, pathlib, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n    marker.write_text(str(os.getpid()))\n    time.sleep(60)\n"
        "print('ran', marker.read_text() != str(os.getpid()))")])
    always = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(60)")])
    return once, always


@pytest.mark.slow
def test_a_chapter_whose_cell_stalls_runs_once_more_on_a_fresh_kernel(tmp_path, capsys):
    """A cell that outlives the limit (the build's stalled client: a reply never read) ends that kernel, and the
    chapter runs again from the top on a fresh one; a chapter that stalls twice fails the build."""
    import execute_parallel as ep

    once, always = _stalling_notebooks(tmp_path / "stalled-once")
    for name, nb in (("01_once", once), ("02_always", always)):
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    results = ep._execute_queue([str(tmp_path / "01_once.ipynb"), str(tmp_path / "02_always.ipynb")], 4, None, 1,
                                warm=False)
    assert [r["ok"] for r in results] == [True, False]
    printed = nbformat.reads(results[0]["notebook"], as_version=4).cells[0].outputs[0]["text"]
    assert printed.split() == ["ran", "True"]  # the second run, in another kernel process
    assert "CellTimeoutError" in results[1]["error"]
    assert capsys.readouterr().out.count("once more on a fresh kernel") == 2
    assert ep._stalled(None) is False


@pytest.mark.slow
def test_a_claims_or_foreign_model_run_whose_cell_stalls_runs_once_more_on_a_fresh_kernel(tmp_path):
    """The same for the executor of claims robustness, the foreign-model runs and the participant edition
    (tools/claims_robustness.py's ``execute``): a cell past the timeout ends that kernel and the chapter runs once
    more from the top on a fresh one, recorded as ``stalled_once``; a chapter that stalls twice did not complete."""
    import claims_robustness

    from chainmark.auditor.keyfiles import write_key_file

    once, always = _stalling_notebooks(tmp_path / "stalled-once")
    key_file = tmp_path / "k.key"
    write_key_file(key_file)
    results = {}
    for name, nb in (("once", once), ("always", always)):
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
        results[name] = claims_robustness.execute(str(tmp_path / f"{name}.ipynb"), key_file, tmp_path / f"{name}.jsonl",
                                                  tmp_path / "runs", timeout=4, keep_notebook=True)
    assert results["once"]["completed"] and results["once"]["stalled_once"]
    assert results["once"]["notebook"].cells[0].outputs[0]["text"].split() == ["ran", "True"]
    assert not results["always"]["completed"] and "CellTimeoutError" in results["always"]["error"]


def test_the_one_hour_path_on_the_front_page_fits_in_an_hour():
    """The front page's one-hour path names its pages and says they hold under 10,000 words of prose (about fifty
    minutes at 200 words a minute): count them, so that a page that grows past it makes the sentence fail."""
    import re

    intro = (ROOT / "book" / "intro.md").read_text("utf-8")
    section = intro.split("### If you have one hour", 1)[1].split("\n## ", 1)[0]
    pages = re.findall(r"\{doc\}`([\w-]+)`", section)
    assert len(pages) == 4 and "under 10,000 words" in section, pages
    words = sum(len("".join(c["source"]).split()) for page in pages
                for c in json.loads((ROOT / "book" / f"{page}.ipynb").read_text("utf-8"))["cells"]
                if c["cell_type"] == "markdown")
    assert words < 10_000, words
