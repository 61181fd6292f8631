"""The package's structure, checked: layers, a model-free core, no import cycles, modules a reader can hold.

The contracts themselves live in ``pyproject.toml`` (``[tool.importlinter]``),
where import-linter reads them; these tests run it and check the rest.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "chainmark"
#: The model-free core: what ``pip install chainmark`` (no extras) must be able to import and run.
CORE = ("stream", "detect", "calibrate", "regime", "verdict", "keyaudit", "repetition", "keys", "gates", "topology", "partition", "tokenizer", "jsonio",
        "checks", "limits", "cli", "audit", "audit_input")
MAX_LINES = 600
REASON = "Longer than 600 lines because"


def test_import_linter_contracts_hold():
    """Layers (interfaces > orchestration > model-based > core), the core free of torch,
    transformers and plotting, and no cycles between modules (see pyproject.toml)."""
    out = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                          "lint_imports_command()"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "3 kept, 0 broken" in out.stdout


def _package_imports() -> dict[str, set[str]]:
    """Every module's imports of sibling modules, at any depth of the file (function-local ones too)."""
    names = {p.stem for p in PACKAGE.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                targets = [node.module] if node.module else [a.name for a in node.names]
                deps |= {t.split(".")[0] for t in targets if t and t.split(".")[0] in names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("chainmark."):
                deps.add(node.module.split(".")[1])
        deps.discard(path.stem)
        deps.discard("__init__")
        graph[path.stem] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_modules():
    graph = _package_imports()
    assert graph["records"] and "methods" in graph["records"]  # the scan sees imports
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_longer_than_600_lines_without_a_reason():
    long = {}
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text("utf-8")
        n = text.count("\n")
        doc = ast.get_docstring(ast.parse(text)) or ""
        if n > MAX_LINES and REASON not in doc:
            long[path.name] = n
    assert long == {}, f"modules over {MAX_LINES} lines without '{REASON} ...' in their docstring: {long}"


# A child interpreter in which torch, transformers and the plotting libraries cannot be imported:
# what the model-free install sees.
BLOCKED = ("torch", "transformers", "accelerate", "gguf", "safetensors", "matplotlib", "seaborn",
           "ipywidgets", "IPython", "pandas", "statsmodels", "tqdm", "filelock", "rapidfuzz")
_BLOCK = textwrap.dedent(f"""
    import sys

    class _NotInstalled:
        # a finder that answers for the blocked packages as if they were absent
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: the model-free install)")
            return None

    sys.meta_path.insert(0, _NotInstalled())
""")


def _core_python(code: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", _BLOCK + textwrap.dedent(code), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_core_imports_without_torch_transformers_or_plotting():
    mods = ", ".join(f"chainmark.{m}" for m in CORE)
    code = (f"import {mods}\n"
            "try:\n    import torch\nexcept ModuleNotFoundError:\n    print('ok')\n")  # the block holds
    out = _core_python(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_the_auditors_cli_runs_without_torch_and_agrees_with_the_full_install(tmp_path):
    """keygen, detect, calibrate and regime in an interpreter where torch & co cannot be imported;
    detect's verdict is the one the full install's Python API gives on the same text."""
    key = tmp_path / "k.key"
    text = tmp_path / "t.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 12, "utf-8")
    cli = "from chainmark.cli import main\nraise SystemExit(main(sys.argv[1:]))"
    assert _core_python(cli, "keygen", "--out", str(key)).returncode == 0
    out = _core_python(cli, "detect", "--key-file", str(key), "--S", "5", "--json", str(text))
    assert out.returncode in (0, 1), out.stderr[-3000:]
    row = json.loads(out.stdout.splitlines()[0])
    from chainmark.detect import detect_text
    from chainmark.keys import load_key
    from chainmark.models import load_tokenizer
    full = detect_text(text.read_text("utf-8"), load_tokenizer(), load_key(key), S=5, test="exact")  # the default
    assert row["z"] == pytest.approx(full.z) and row["n_tokens"] == full.n_tokens
    assert bool(row["is_watermarked"]) == bool(full.is_watermarked)
    for args in (["calibrate", "--n", "200", "--rho", "0.5", "--alpha", "0.01"],
                 ["regime", "--key-file", str(key), "--S", "5", "--alpha", "0.01", "--out", str(tmp_path / "r.json")]):
        res = _core_python(cli, *args)
        assert res.returncode == 0, (args, res.stderr[-3000:])
    assert json.loads((tmp_path / "r.json").read_text("utf-8"))["S"] == 5


@pytest.mark.slow
def test_pip_install_without_extras_is_the_auditors_install(tmp_path):
    """``pip install .`` in a fresh virtual environment: no torch, transformers or matplotlib, and
    ``chainmark detect`` there gives the full install's verdict on the same text and key."""
    import shutil

    source = tmp_path / "source"  # a copy: building in the working tree would leave build/ there
    shutil.copytree(PACKAGE, source / "chainmark", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
           "-c", str(ROOT / "constraints.txt"), str(source)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True)
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"numpy", "scipy", "tokenizers", "chainmark"} <= installed
    assert not installed & {"torch", "transformers", "matplotlib", "seaborn", "accelerate", "gguf", "pandas"}
    key, text = tmp_path / "k.key", tmp_path / "t.txt"
    text.write_text("The committee met on Tuesday to review the budget and the new library. " * 8, "utf-8")
    core_cli = str(venv / "bin" / "chainmark")
    assert subprocess.run([core_cli, "keygen", "--out", str(key)], capture_output=True).returncode == 0
    args = ["detect", "--key-file", str(key), "--S", "5", "--json", str(text)]
    core = subprocess.run([core_cli, *args], capture_output=True, text=True, cwd=tmp_path)
    full = subprocess.run([sys.executable, "-m", "chainmark.cli", *args], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert core.returncode == full.returncode == 0, core.stderr[-2000:] + full.stderr[-2000:]
    assert json.loads(core.stdout.splitlines()[0]) == json.loads(full.stdout.splitlines()[0])
