"""How much of a chapter's code assembles prose, measured on the committed notebook.

A chapter's sentences belong in Markdown cells that people wrote; its numbers in
outputs (tables, captions, ``glue``). Code that pastes prose together from
f-strings (``display(Markdown(f"..."))``, long sentence templates, sentences in
``print``) is counted here, line by line, over *every* code cell (a Colab reader
reads hidden cells too), against all code lines.

    .venv/bin/python tests/chapter_lint.py book/01_partition.ipynb [...]

prints, per chapter, the prose-building lines, the code lines, the share, and
where the prose-building lines are (cell index: first line).
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import nbformat

#: The most prose-building code a chapter may hold, as a share of its code lines.
MAX_PROSE_SHARE = 0.05
#: A string literal with at least this many words of literal text is a sentence.
SENTENCE_WORDS = 8
#: Calls whose string arguments are labels, not prose (plots, widgets, errors).
LABEL_CALLS = {
    "set_title", "set_xlabel", "set_ylabel", "suptitle", "text", "annotate", "legend", "set",
    "figtext", "set_caption", "IntSlider", "FloatSlider", "Dropdown", "SelectionSlider", "ToggleButtons",
    "ValueError", "TypeError", "RuntimeError", "AssertionError", "Checkbox", "Label", "chat_prompt",
    "claim",  # a claim names the sentence of the prose it checks, like an assert message
}
MAGIC = re.compile(r"^\s*[%!]")


def _name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _literal_words(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = " ".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    else:
        return 0
    return len(re.findall(r"[A-Za-z]{2,}", re.sub(r"<[^>]+>|\$[^$]*\$", " ", text)))


def prose_lines(source: str) -> set[int]:
    """Line numbers (1-based, within the cell) of code that builds prose."""
    code = "\n".join("" if MAGIC.match(line) else line for line in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    skip: set[int] = set()  # ids of nodes inside label calls, asserts and docstrings
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in LABEL_CALLS:
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.keyword) and node.arg in {"label", "title", "description", "xlabel", "ylabel"}:
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.Assert) and node.msg is not None:
            skip.update(id(n) for n in ast.walk(node.msg))
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node) is not None:
            skip.update(id(n) for n in ast.walk(node.body[0]))
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) == "Markdown":
            lines.update(range(node.lineno, node.end_lineno + 1))
        elif id(node) not in skip and _literal_words(node) >= SENTENCE_WORDS:
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def measure(path: Path) -> dict:
    """Prose-building lines, code lines and where the prose is, for one notebook."""
    nb = nbformat.read(path, as_version=4)
    total, prose, where = 0, 0, []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        lines = [line for line in cell.source.splitlines() if line.strip()]
        total += len(lines)
        found = prose_lines(cell.source)
        found = {n for n in found if cell.source.splitlines()[n - 1].strip()}
        if found:
            prose += len(found)
            first = cell.source.splitlines()[min(found) - 1].strip()
            where.append((index, len(found), first[:90]))
    return {"prose": prose, "code": total, "share": prose / total if total else 0.0, "where": where}


def main(paths: list[str]) -> int:
    worst = 0.0
    for p in paths:
        m = measure(Path(p))
        worst = max(worst, m["share"])
        print(f"{p}: {m['prose']} prose-building lines of {m['code']} code lines = {m['share']:.1%}"
              f" (limit {MAX_PROSE_SHARE:.0%})")
        for index, n, first in m["where"]:
            print(f"   cell {index:3d}: {n:3d} lines  {first}")
    return 0 if worst <= MAX_PROSE_SHARE else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or sorted(str(p) for p in Path("book").glob("*.ipynb"))))
