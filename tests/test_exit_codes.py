"""Exit codes a script can trust: lost output is an error (2), never a 0 and never an 'internal error' (3)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = f"{shlex.quote(sys.executable)} -m chainmark.cli"


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CHAINMARK_KEY", None)
    env.pop("CHAINMARK_KEY_FILE", None)
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", ["calibrate --n 200 --rho 0.5 --alpha 0.01",
                                     "detect --key-file k.key --S 5 t.txt"])
def test_closed_standard_output_is_an_error(tmp_path, command):
    (tmp_path / "t.txt").write_text("Some text to score. " * 5, "utf-8")
    assert shell(f"{CLI} keygen --out k.key", tmp_path).returncode == 0
    done = shell(f"{CLI} {command} >&-", tmp_path)
    assert done.returncode == 2 and "standard output is closed" in done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_an_error_and_keygen_writes_no_key_it_cannot_name(tmp_path):
    (tmp_path / "t.txt").write_text("Some text to score. " * 5, "utf-8")
    assert shell(f"{CLI} keygen --out k.key", tmp_path).returncode == 0
    done = shell(f"{CLI} detect --key-file k.key --S 5 t.txt > /dev/full", tmp_path)
    assert done.returncode == 2 and "No space left" in done.stderr and "internal error" not in done.stderr
    done = shell(f"{CLI} keygen --out lost.key > /dev/full", tmp_path)
    assert done.returncode == 2 and not (tmp_path / "lost.key").exists()
