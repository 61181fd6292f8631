"""Shared fixtures: the repository root and, for slow tests, the embedded model and a browser."""
from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Where the test run keeps Python's compiled bytecode when the environment forbids writing it beside the sources.
PYCACHE = ROOT / "_build" / "pycache"


def share_compiled_bytecode(environ=os.environ) -> bool:
    """Under ``PYTHONDONTWRITEBYTECODE`` (set on some machines, the 2-core development machine among them) no
    process keeps the bytecode it compiles, and the install compiles none (PIP_COMPILE=0): every kernel and
    command-line subprocess of the suite compiled torch, transformers, pandas and matplotlib again, about 9 s
    each (a chapter's imports 15 s, 6 s from compiled bytecode). The suite then keeps it in ``_build/pycache``
    (``PYTHONPYCACHEPREFIX``: nothing is written beside the sources or into the environment), shared by this
    process and every process it starts. The code that runs is the same; returns whether it changed anything."""
    if not environ.get("PYTHONDONTWRITEBYTECODE") or environ.get("PYTHONPYCACHEPREFIX"):
        return False
    environ.pop("PYTHONDONTWRITEBYTECODE")
    environ["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    sys.dont_write_bytecode, sys.pycache_prefix = False, str(PYCACHE)  # this process's own later imports
    return True


share_compiled_bytecode()


def share_the_cores(environ=os.environ, cores: int | None = None) -> int | None:
    """On a pytest-xdist worker, give PyTorch (and every process the worker starts) its share of the cores.

    PyTorch takes a thread per core in every process; two workers on two cores then run four busy threads,
    which spin against each other and run slower together than one process alone (six model-heavy modules on
    two workers: 504 s with two threads each, 134 s with one; benchmarks/bench_test_threads.py). Each worker gets
    cores // workers threads (at least one) through ``OMP_NUM_THREADS``, which its kernels and command-line
    subprocesses inherit; a thread count already set by the caller is kept. Their OpenMP threads wait passively
    (``OMP_WAIT_POLICY=PASSIVE``, unless set): a process that must run with more threads, such as the reference
    verification with its recorded two, would otherwise spin at its barriers against the other worker's thread
    (benchmarks/bench_wait_policy.py). Returns the count set, or None."""
    workers = environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers or environ.get("OMP_NUM_THREADS"):
        return None
    cores = cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) or 1
    threads = max(1, cores // max(1, int(workers)))
    environ["OMP_NUM_THREADS"] = environ["MKL_NUM_THREADS"] = str(threads)
    environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "torch" in sys.modules and environ is os.environ:  # imported already (a plugin): set it there too
        sys.modules["torch"].set_num_threads(threads)
    return threads


share_the_cores()

#: ``make test`` and ``make check`` stamp the end of each phase before pytest starts (see the Makefile): for each,
#: its clock file, the phases it always stamps in order (later stamps, such as vLLM's environment, follow them),
#: and its budget in minutes for a fresh clone on the 2-core reference machine (tools/measure_ci.py).
BUDGET_MINUTES = 35
CHECK_BUDGET_MINUTES = 5
MAKE_TARGETS = {
    "test": (ROOT / "_build" / ".make_test_clock", ("install", "book", "browser"), BUDGET_MINUTES),
    "check": (ROOT / "_build" / ".make_check_clock", ("install",), CHECK_BUDGET_MINUTES),
}
#: What ``make check`` leaves out (pytest's ``-m`` expression; ``make test`` runs everything).
CHECK_MARKS = "not slow and not built"
_SESSION_START = time.time()


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s" if seconds >= 60 else f"{seconds:.0f} s"


def make_phases(clock: Path, session_start: float, now: float,
                required: tuple[str, ...] = ("install", "book", "browser")) -> dict[str, float] | None:
    """Seconds per phase of this ``make test`` or ``make check`` (the ``required`` phases, then any later stamp
    such as vLLM's environment, then the tests and the total), or None when the clock is missing or belongs to
    another run (pytest started on its own, or long after the build)."""
    try:
        pairs = [line.split() for line in clock.read_text().split("\n") if line.strip()]
        times = {name: float(value) for name, value in pairs}
    except (OSError, ValueError):
        return None
    order = ["start", *required]
    order += [name for name, _ in pairs if name not in order]
    if any(name not in times for name in order) or not 0 <= session_start - times[order[-1]] < 120:
        return None
    phases = {later: times[later] - times[earlier] for earlier, later in zip(order, order[1:])}
    phases.update(tests=now - session_start, total=now - times["start"])
    return {name: round(seconds, 1) for name, seconds in phases.items()}


#: Seconds spent per unit of work (worker_scope: a module or a shared group), summed over its tests' setup, call and
#: teardown as the reports reach this process; printed at the end and kept in _build/test_unit_seconds.json so that a
#: slow test phase says where its time went.
_UNIT_SECONDS: dict[str, float] = {}


def unit_seconds_table(seconds: dict[str, float], top: int = 15) -> list[str]:
    """The ``top`` costliest units of work, slowest first, as lines ``  12 min 03 s  tests/test_x.py``."""
    ranked = sorted(seconds.items(), key=lambda item: -item[1])[:top]
    return [f"{_minutes(value):>12}  {unit}" for unit, value in ranked]


def pytest_runtest_logreport(report):
    if report.duration:
        unit = worker_scope(report.nodeid)
        _UNIT_SECONDS[unit] = _UNIT_SECONDS.get(unit, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, "workerinput"):
        return
    expression = config.getoption("markexpr", "")
    if expression and _DESELECTED.exists():
        try:
            counts = json.loads(_DESELECTED.read_text())
        except (OSError, ValueError):
            counts = {}
        for line in left_out_lines(counts, expression):
            terminalreporter.write_line(line)
    if not _UNIT_SECONDS:
        return
    terminalreporter.write_sep("-", "the costliest test modules (setup, call and teardown, on their worker)")
    for line in unit_seconds_table(_UNIT_SECONDS):
        terminalreporter.write_line(line)
    try:
        (ROOT / "_build").mkdir(exist_ok=True)
        (ROOT / "_build" / "test_unit_seconds.json").write_text(
            json.dumps({unit: round(value, 1) for unit, value in sorted(_UNIT_SECONDS.items())}, indent=1) + "\n")
    except OSError:
        pass


def pytest_unconfigure(config):
    """The last line of ``make test`` or ``make check``: the wall time of its phases and tests, against its budget."""
    if hasattr(config, "workerinput"):
        return
    now = time.time()
    for target, (clock, required, budget) in MAKE_TARGETS.items():
        phases = make_phases(clock, _SESSION_START, now, required)
        if phases is None:
            continue
        (ROOT / "_build" / f"make_{target}_clock.json").write_text(json.dumps(phases, indent=2) + "\n")
        names = {"vllm": "vLLM's environment"}
        steps = " · ".join(f"{names.get(name, name)} {_minutes(seconds)}" for name, seconds in phases.items()
                           if name != "total")
        verdict = "within" if phases["total"] <= budget * 60 else "OVER"
        print(f"make {target}: {steps} · total {_minutes(phases['total'])} "
              f"({verdict} the {budget}-minute budget for a fresh clone)")


#: Where the first worker (or the only process) lists the tests a ``-m`` expression left out, for the summary.
_DESELECTED = ROOT / "_build" / ".deselected.json"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist starts the workers, which write the new list
def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        _DESELECTED.unlink(missing_ok=True)


def pytest_deselected(items):
    """Count what the ``-m`` expression left out, per module (``make check`` says what it did not run)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    if worker != "gw0" or not items:
        return
    counts: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        counts[module] = counts.get(module, 0) + 1
    try:
        _DESELECTED.parent.mkdir(exist_ok=True)
        _DESELECTED.write_text(json.dumps(counts))
    except OSError:
        pass


def left_out_lines(counts: dict[str, int], expression: str) -> list[str]:
    """What a marker expression left out, most first: one line, then the modules (``test_site 40, ...``)."""
    if not counts:
        return []
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [f"-m {expression!r} left out {sum(counts.values())} tests (make test runs them):",
            "  " + ", ".join(f"{module} {n}" for module, n in ranked)]


#: ``make test`` runs the suite on a worker per core (pytest-xdist): each test module's tests run in one worker, in
#: order, so its fixtures are built once; modules named here share one worker with each other because they read a
#: session fixture too costly to build twice (every chapter executed on the foreign model).
SHARED_WORKER = {"test_foreign_model": "foreign-model", "test_participant_edition": "foreign-model"}


def worker_scope(nodeid: str) -> str:
    """The unit of work a test belongs to: its module, or the group its module shares (above)."""
    module = nodeid.split("::", 1)[0]
    return SHARED_WORKER.get(module.rsplit("/", 1)[-1].removesuffix(".py"), module)


#: The fresh-clone runs' record, whose latest run says how long each test module took (tools/measure_ci.py).
_CI_RECORD = ROOT / "benchmarks" / "results" / "ci_time.json"


def _scope_costs(record: Path = _CI_RECORD) -> dict[str, float]:
    """Seconds each unit of work (a module, or the group it shares) took in the latest recorded fresh-clone run;
    empty when there is no record (then the collection order stands)."""
    try:
        runs = json.loads(record.read_text("utf-8"))["runs"]
        modules = next(run["test_modules"] for run in reversed(runs) if run.get("test_modules"))
    except (OSError, ValueError, KeyError, StopIteration):
        return {}
    costs: dict[str, float] = {}
    for module, seconds in modules.items():
        scope = SHARED_WORKER.get(module, module)
        costs[scope] = costs.get(scope, 0.0) + float(seconds)
    return costs


def longest_first(nodeids: list[str], costs: dict[str, float]) -> list[int]:
    """The order (indices into ``nodeids``) that hands the workers the costliest units of work first, a unit's
    tests kept together in their own order: a long module started last would leave the other workers idle while
    it runs (longest-processing-time-first scheduling). A unit with no recorded cost keeps its place after those
    with one."""
    scopes = [worker_scope(n) for n in nodeids]
    units = {}
    for i, scope in enumerate(scopes):
        units.setdefault(scope, []).append(i)
    short = {scope: scope.rsplit("/", 1)[-1].removesuffix(".py") for scope in units}
    ranked = sorted(units, key=lambda scope: -costs.get(short[scope], -1.0))
    return [i for scope in ranked for i in units[scope]]


def pytest_collection_modifyitems(config, items):
    """Collect the costliest modules first (:func:`longest_first`): the workers take them in that order. (In one
    process the order changes nothing but which module runs first.)"""
    order = longest_first([item.nodeid for item in items], _scope_costs())
    items[:] = [items[i] for i in order]


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: without it installed, pytest runs in one process
def pytest_xdist_make_scheduler(config, log):
    """Schedule whole modules (and the groups above) on the workers. pytest-xdist's own ``--dist loadgroup``
    marks a group in the test's node id, which pytest 9 no longer lets it change: its groups came apart."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # its own order (most tests first) would undo longest_first's

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_scope(nodeid)

    return ModuleScheduling(config, log)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def model_and_tokenizer():
    from cmlab.harness.models import load_model

    return load_model()


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium under Playwright, launched once for the session (a fresh temporary
    profile; no browser download). Skips when no Chromium is installed."""
    from browser_support import chromium_path, launch

    binary = chromium_path()
    if binary is None:
        pytest.skip("Chromium is not installed: `apt-get install -y chromium` (make test does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright is not installed: `pip install -c constraints.txt -e '.[test]'` (make install does)")
    with sync_playwright() as playwright:
        browser = launch(playwright, binary)
        yield browser
        browser.close()


# --- another model: tests/foreign_model.py, every chapter executed on it ------------------------------------

@pytest.fixture(scope="session")
def foreign(tmp_path_factory):
    """A small model that is not the embedded one (tests/foreign_model.py), built once per test session."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import foreign_model

    folder = foreign_model.build(tmp_path_factory.mktemp("foreign-model"))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    assert len(tok) != 49_152 and not tok.chat_template
    return folder


def execute_on_foreign_model(jobs: dict[str, str], foreign: Path, work: Path) -> dict[str, dict]:
    """Execute notebooks (name -> path) on the foreign model, each in its own kernel under a fresh key, in soft
    claim mode at the smoke scale, two at a time; name -> ``claims_robustness.execute``'s result.

    On this tiny model most of a chapter's time is its kernel's start, imports and small computations on one
    core, so two kernels of one CPU thread each finish the set in a little over half the time of one after
    the other; each chapter still runs alone in its kernel, as a reader's would. The two workers
    are processes (spawned, as tools/execute_parallel.py's are): notebook clients driven from two threads of
    one process once waited on an idle kernel until the timeout (processes stall too, now and then: a cell
    past 300 s runs its chapter once more on a fresh kernel)."""
    env = {"CHAINMARK_MODEL": str(foreign), "CHAINMARK_SCALE": "smoke"}  # the kernels take their settings from it
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {name: pool.submit(_execute_one, path, work / Path(name).stem, env) for name, path in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


def _execute_one(notebook: str, folder: Path, env: dict[str, str]) -> dict:
    """One notebook in its own kernel (a worker process of :func:`execute_on_foreign_model`)."""
    import claims_robustness

    from chainmark.auditor.keyfiles import write_key_file

    os.environ.update(env)
    os.environ.pop("CHAINMARK_EDITION", None)
    folder.mkdir(parents=True, exist_ok=True)
    key_file = folder / "teaching-or-not.key"
    write_key_file(key_file)
    # a cell of a chapter on the tiny model takes seconds: 300 s is a stalled client, and the chapter runs again
    return claims_robustness.execute(notebook, key_file, folder / "claims.jsonl", folder / "runs",
                                     timeout=300, threads=1, keep_notebook=True)


@pytest.fixture(scope="session")
def foreign_runs(foreign, tmp_path_factory) -> dict[str, dict]:
    """Every chapter executed on the foreign model, each under a fresh key in its own kernel, two at a time
    (:func:`execute_on_foreign_model`; tests/test_foreign_model.py checks them, tests/test_participant_edition.py
    reads their Build it checks)."""
    import claims_robustness

    work = tmp_path_factory.mktemp("foreign-runs")
    return execute_on_foreign_model({c: c for c in claims_robustness.toc_notebooks()}, foreign, work)
