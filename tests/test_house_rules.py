"""The house rules live in the house: CONTRIBUTING.md holds them, the README points to it, and nothing the
repository holds (code, tests, tools, pages, configuration) cites a document outside it: no Markdown file the
repository does not hold, no path above its root, no issue number of a tracker a newcomer cannot read. The rules
themselves are CONTRIBUTING.md's; this module only checks that they stay in the house."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The files whose text is the project's own writing (records of runs, under benchmarks/results and the lab's
#: data, are measurements and keep the labels they were measured under).
TEXT_SUFFIXES = (".py", ".pyi", ".sh", ".md", ".toml", ".yml", ".yaml", ".cfg", ".ipynb", ".txt")
RECORDS = ("benchmarks/results/", "book/cmlab/data/")
_MARKDOWN_FILE = re.compile(r"(?<![\w/.-])((?:\.\./|[\w-]+/)*[\w.-]+\.md)\b")
_OUTSIDE = re.compile(r"\.\./(?:shared|\.library)\b")  # a Markdown file outside is caught by its name
_ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|\bthe issue's\b")


def outside_references(files: dict[str, str], tracked_names: set[str]) -> list[str]:
    """``path: what`` for each citation of something outside the repository in ``files`` (path -> text)."""
    found = []
    for path, text in sorted(files.items()):
        for match in _MARKDOWN_FILE.finditer(text):
            name = match.group(1)
            if name.startswith("../") or name.rsplit("/", 1)[-1] not in tracked_names:
                found.append(f"{path}: {name} (no such Markdown file here)")
        found += [f"{path}: {m.group(0)} (outside the repository)" for m in _OUTSIDE.finditer(text)]
        found += [f"{path}: {m.group(0)!r} (an issue tracker's number, which a newcomer cannot read)"
                  for m in _ISSUE.finditer(text)]
    return found


def _tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return listed.split()


def test_the_repository_cites_nothing_outside_itself():
    tracked = _tracked()
    names = {p.rsplit("/", 1)[-1] for p in tracked}
    files = {p: (ROOT / p).read_text("utf-8") for p in tracked
             if (p.endswith(TEXT_SUFFIXES) or p.rsplit("/", 1)[-1] == "Makefile") and not p.startswith(RECORDS)
             and (ROOT / p).is_file() and p != "tests/test_house_rules.py"}  # this file plants examples
    assert len(files) > 100 and "tests/test_architecture.py" in files
    assert outside_references(files, names) == []


def test_the_check_finds_each_kind_of_outside_reference():
    planted = {"a.py": "see PLANNING.md and ../shared/paper for why",
               "b.md": "as [the notes](notes/ROADMAP.md) say; fixed in issue 12",
               "c.py": "the issue's example", "d.md": "the [README](README.md) is here"}
    found = outside_references(planted, {"README.md", "a.py", "b.md", "c.py", "d.md"})
    assert any("PLANNING.md" in f for f in found) and any("../shared" in f for f in found)
    assert any("ROADMAP.md" in f for f in found) and any("issue 12" in f for f in found)
    assert any("the issue's" in f for f in found) and not any(f.startswith("d.md") for f in found)


def test_the_rules_are_written_down_and_the_readme_points_to_them():
    rules = (ROOT / "CONTRIBUTING.md").read_text("utf-8")
    assert "CONTRIBUTING.md" in (ROOT / "README.md").read_text("utf-8")
    # every test module the rules cite exists, so the page cannot drift from what enforces it
    cited = set(re.findall(r"tests/(test_\w+\.py)", rules))
    assert cited, "CONTRIBUTING.md names no test that enforces its rules"
    assert sorted(name for name in cited if not (ROOT / "tests" / name).exists()) == []
    for test in re.findall(r"tests/(test_\w+\.py)::(test_\w+)", rules):
        assert re.search(rf"^def {test[1]}\(", (ROOT / "tests" / test[0]).read_text("utf-8"), re.M), test


# --------------------------------------------------------------------------- one pipeline, its tools named

_CLIENT = re.compile(r"\bNotebookClient\(")
_TOC_READ = re.compile(r"""_toc\.yml["']\)\s*\.read_text\(|open\([^)\n]*_toc\.yml""")


def pipeline_duplicates(files: dict[str, str], home: str = "tools/book_pipeline.py") -> list[str]:
    """``path: what`` for each notebook client made, or table of contents read, outside ``home`` in ``files``."""
    found = []
    for path, text in sorted(files.items()):
        if path == home:
            continue
        found += [f"{path}: makes its own NotebookClient" for _ in _CLIENT.finditer(text)]
        found += [f"{path}: reads _toc.yml itself" for _ in _TOC_READ.finditer(text)]
    return found


def test_one_notebook_executor_and_one_reader_of_the_table_of_contents():
    """The build, the editions, claims robustness, the timings and the tests execute notebooks through
    tools/book_pipeline.py's notebook_client and walk the book through its toc_entries, and nothing else does."""
    files = {path: (ROOT / path).read_text("utf-8") for path in _tracked()
             if path.endswith((".py", ".md", ".ipynb")) and path != "tests/test_house_rules.py"}
    home = files["tools/book_pipeline.py"]
    assert len(_CLIENT.findall(home)) == 1 and len(_TOC_READ.findall(home)) == 1
    assert pipeline_duplicates(files) == []


def test_the_pipeline_check_finds_a_second_executor_and_a_second_toc_reader():
    planted = {"tools/book_pipeline.py": 'NotebookClient(nb)\n(root / "_toc.yml").read_text("utf-8")',
               "tools/x.py": "client = NotebookClient(nb, timeout=5)",
               "tests/y.py": 'toc = yaml.safe_load((ROOT / "_toc.yml").read_text())',
               "tests/z.py": 'with open(ROOT / "_toc.yml") as fh: pass\n(tmp / "_toc.yml").write_text("root: x")'}
    assert pipeline_duplicates(planted) == ["tests/y.py: reads _toc.yml itself", "tests/z.py: reads _toc.yml itself",
                                            "tools/x.py: makes its own NotebookClient"]


def test_the_tools_readme_names_every_tool_and_nothing_else():
    """tools/README.md has a row for each file of tools/ (what it does, who runs it) and none for a file that is
    not there."""
    rows = set(re.findall(r"^\| `([^`]+)` \|", (ROOT / "tools" / "README.md").read_text("utf-8"), re.M))
    present = {path.removeprefix("tools/") for path in _tracked() if path.startswith("tools/")}
    assert rows == present, {"no row": sorted(present - rows), "no file": sorted(rows - present)}
