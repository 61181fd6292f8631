"""The README's workshop install, run as written in a fresh virtual environment (no make), ending with a
`cmlab doctor` that finds the laptop ready and a JupyterLab that starts."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def workshop_commands() -> list[str]:
    """The bash block under the README's workshop heading, one command per line, comments dropped."""
    text = (ROOT / "README.md").read_text("utf-8")
    section = text.split("## A workshop laptop", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_block_is_what_the_test_runs():
    commands = workshop_commands()
    assert commands[0].startswith("git clone") and commands[1] == "python -m venv .venv"
    assert any("torch==2.13.0" in c and "whl/cpu" in c for c in commands)
    assert any("jupyterlab" in c for c in commands) and "cmlab doctor" in commands
    assert all("make" not in shlex.split(c)[0] for c in commands)
    # the laptop clones the release's notebook edition, the tag the pages workflow writes (tools/notebooks.py)
    import notebooks

    assert f"git clone --branch {notebooks.edition_tag()} " in commands[0]


@pytest.mark.slow
def test_the_workshop_install_works_in_a_fresh_environment(tmp_path):
    venv = tmp_path / "venv"
    commands = workshop_commands()
    # in CI the repository is already cloned (we are in it) and activation is the PATH below; `jupyter lab`
    # would start a server, so its start-up is checked with --version instead
    run = [c for c in commands if not c.startswith(("git clone", "source "))]
    run = [c.replace("python -m venv .venv", f"{shlex.quote(sys.executable)} -m venv {shlex.quote(str(venv))}")
           .replace("jupyter lab book/", "jupyter lab --version") for c in run]
    env = {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "PIP_RETRIES": "1", "PIP_TIMEOUT": "20",
           # pip's byte-compilation of every installed module (torch's thousands) takes a large share of the
           # install and checks nothing the README promises; Python compiles what `cmlab doctor` imports.
           # (PIP_COMPILE=0, not PIP_NO_COMPILE=1: pip reads the latter as compile=True.)
           "PIP_COMPILE": "0"}
    env.pop("PYTHONPATH", None)
    outputs = {}
    for command in run:
        proc = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=1500)
        outputs[command] = proc.stdout
        assert proc.returncode == 0 or command.startswith("cmlab doctor"), (command, proc.stderr[-3000:])
    doctor = subprocess.run([str(venv / "bin" / "cmlab"), "doctor", "--json"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    report = json.loads(doctor.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert doctor.returncode == 0 and report["ready"], report
    assert checks["notebook front end"]["status"] == "ok" and "jupyterlab" in checks["notebook front end"]["found"]
    assert checks["package torch"]["found"].startswith("2.13.0") and checks["detection"]["status"] == "ok"
    assert re.match(r"\d+\.\d+", outputs["jupyter lab --version"].strip())
