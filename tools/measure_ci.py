"""Measure what CI measures: `make test` in a fresh clone with an empty home, and where its time goes.

    python3 tools/measure_ci.py                       # clone HEAD into a temporary folder, run `make test`
    python3 tools/measure_ci.py --out FILE --keep     # write elsewhere, keep the clone for a look afterwards
    python3 tools/measure_ci.py --target check        # the five-minute loop, `make check`, the same way

CI runs ``.ci/run`` (the README's ``make test``) on a fresh clone and gives it 90 minutes; this book
holds itself to a budget well inside that (``BUDGET_MINUTES``), so that one more chapter never
turns a submission into a gamble. The script clones the committed HEAD (uncommitted edits are not
measured), runs ``make test`` there with ``HOME`` pointing at an empty folder (no pip, Hugging Face
or chainmark caches) and records, from that one run:

- the wall time of each phase, as ``make test`` itself reports it in its last line (install, book,
  browser, tests; see ``tests/conftest.py``);
- the seconds each chapter executed (the build's ``_build/timings.json``);
- the seconds each test module took and the 30 slowest tests (pytest's JUnit XML);
- the machine, its load average before and after, the commit;
- where the machine's CPU time went during the run (``/proc/stat``): the share the run itself used, the
  share other processes on this machine took, and the share the hypervisor withheld ("steal"). The same
  commit measured here once took twice as long as in a later run on the idle machine; a record whose
  ``other_share`` or ``steal_share`` is not near zero measured a shared machine, not the book. The run's
  own share counts the processes its tree waited for (``RUSAGE_CHILDREN``): one it left orphaned, and the
  kernel's interrupt time, count as other; in a container ``/proc/stat`` is the whole host's.

The record goes to ``benchmarks/results/ci_time.json`` (committed: the README's figures come from
it); ``--target check`` measures ``make check`` instead (install and the tests that build no book, against
its own budget, ``CHECK_BUDGET_MINUTES``) into ``benchmarks/results/check_time.json``. The exit status
is 1 when the command failed or ran over its budget. Run it on an otherwise idle machine: two heavy
processes on two cores each run about twice as slowly.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ci_time.json"
CHECK_OUT = ROOT / "benchmarks" / "results" / "check_time.json"
sys.path.insert(0, str(ROOT / "tools"))
from measure_chapters import machine as _machine  # noqa: E402  (the same machine description)

#: What `make test` in a fresh clone may take on the 2-core reference machine, book included.
BUDGET_MINUTES = 35
#: What `make check`, the five-minute loop, may take there, install included.
CHECK_BUDGET_MINUTES = 5


def test_times(junit: Path, slowest: int = 30) -> tuple[dict[str, float], list[dict]]:
    """Seconds per test module and the slowest tests, from pytest's JUnit XML."""
    modules: dict[str, float] = defaultdict(float)
    tests = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        seconds = float(case.get("time", 0.0))
        module = case.get("classname", "").split(".")[-1] or "?"
        modules[module] += seconds
        tests.append({"test": f"{module}::{case.get('name')}", "seconds": round(seconds, 1)})
    tests.sort(key=lambda t: -t["seconds"])
    return ({m: round(s, 1) for m, s in sorted(modules.items(), key=lambda kv: -kv[1])}, tests[:slowest])


def cpu_times() -> dict[str, float]:
    """The machine's CPU seconds so far, all cores summed, from ``/proc/stat`` (Linux): busy, idle, steal."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields] + [0] * (8 - len(fields))
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    hz = os.sysconf("SC_CLK_TCK")
    return {"busy": (user + nice + system + irq + softirq) / hz, "idle": (idle + iowait) / hz, "steal": steal / hz}


def cpu_account(before: dict[str, float], after: dict[str, float], own_seconds: float) -> dict[str, float]:
    """Where the machine's CPU time went between two :func:`cpu_times`: the run's own share (``own_seconds``,
    the CPU time of its process tree), other processes' share, idle and steal, each a share of all cores' time."""
    spent = {k: after[k] - before[k] for k in before}
    total = sum(spent.values()) or 1.0
    other = max(spent["busy"] - own_seconds, 0.0)
    return {"run_share": round(own_seconds / total, 3), "other_share": round(other / total, 3),
            "idle_share": round(spent["idle"] / total, 3), "steal_share": round(spent["steal"] / total, 3)}


def phases(clock_file: Path) -> dict[str, float]:
    """The phase times `make test` wrote (tests/conftest.py writes them beside its last line)."""
    return json.loads(clock_file.read_text()) if clock_file.exists() else {}


def _children_cpu() -> float:
    """CPU seconds (user and system) of this process's finished children: the run's whole process tree."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=("test", "check"), default="test",
                        help="make test, as CI runs it (.ci/run), or make check, the five-minute loop")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"the record (default: {OUT.relative_to(ROOT)}, or {CHECK_OUT.relative_to(ROOT)} "
                             "for make check)")
    parser.add_argument("--keep", action="store_true", help="keep the clone and its empty home")
    parser.add_argument("--label", default="", help="a word for the record, e.g. 'before' or 'after'")
    args = parser.parse_args(argv)
    check = args.target == "check"
    budget = CHECK_BUDGET_MINUTES if check else BUDGET_MINUTES
    out = args.out or (CHECK_OUT if check else OUT)
    command = ["make", "check"] if check else ["bash", ".ci/run"]

    work = Path(tempfile.mkdtemp(prefix="measure_ci."))
    clone, home = work / "p", work / "home"
    home.mkdir()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    junit = work / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "CHAINMARK_"))}
    env.update(HOME=str(home), PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                                   if ".venv" not in p),
               PYTEST_ADDOPTS=f"--junitxml={junit} --durations=30",
               CHAINMARK_MEASURING_CI="1")  # the record's own test waits for the record
    load_before = [round(x, 2) for x in os.getloadavg()]
    cpu_before, own_before = cpu_times(), _children_cpu()
    print(f"measure_ci: `make {args.target}` in {clone} (HOME={home}); log in {work / 'make_test.log'}", flush=True)
    start = time.perf_counter()
    with open(work / "make_test.log", "w") as log:
        status = subprocess.run(command, cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - start
    cpu = cpu_account(cpu_before, cpu_times(), _children_cpu() - own_before)
    tail = (work / "make_test.log").read_text().splitlines()[-3:]

    record = {
        "label": args.label,
        "commit": commit,
        "measured": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": ("python3 tools/measure_ci.py --target check  (make check, fresh clone, empty HOME)" if check
                    else "python3 tools/measure_ci.py  (bash .ci/run = make test, fresh clone, empty HOME)"),
        "machine": _machine(),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cpu": cpu,
        "exit_status": status,
        "wall_seconds": round(wall, 1),
        "budget_seconds": budget * 60,
        "within_budget": status == 0 and wall <= budget * 60,
        "phases": phases(clone / "_build" / f"make_{args.target}_clock.json"),
        "last_lines": tail,
    }
    timings = clone / "_build" / "timings.json"
    if timings.exists():
        record["chapters"] = json.loads(timings.read_text())["notebooks"]
    if junit.exists():
        record["test_modules"], record["slowest_tests"] = test_times(junit)

    records = []
    if out.exists():
        previous = json.loads(out.read_text())
        records = previous.get("runs", [])
    records.append(record)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"budget_minutes": budget, "runs": records}, indent=2) + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    verdict = "within" if record["within_budget"] else "OVER"
    print(f"measure_ci: exit {status}, {wall / 60:.1f} min, {verdict} the {budget}-minute budget; "
          f"recorded in {out}")
    print(f"  the machine's CPU time: {cpu['run_share']:.0%} this run, {cpu['other_share']:.0%} other processes, "
          f"{cpu['idle_share']:.0%} idle, {cpu['steal_share']:.0%} withheld by the host")
    for line in tail:
        print("  " + line)
    return 0 if record["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
