"""Every name a module of ``chainmark`` or the book's lab ``cmlab`` exports is used outside it, and not by tests alone.

An exported name that nothing outside its module uses becomes private or goes. "Used" means reached as code (an
imported name or an attribute, not prose, docstrings or strings) by another module of either package, by tests/,
tools/ or benchmarks/, by a chapter's code cell, or named by an entry point in a pyproject.toml. A name that only
tests reach is not public API either: it becomes private (the tests may still reach it there) or goes.
"""
from __future__ import annotations

import ast
import json
import re
import textwrap
from pathlib import Path

from test_architecture import ROOT, _cell_code, _dotted, _modules

#: Where the packages' users live, beside the packages themselves.
USERS = ("tests", "tools", "benchmarks")
#: Exported names unused today, each with why it may stay for now. This list only ever gets shorter.
UNUSED_EXPORTS_ALLOWED: dict[str, set[str]] = {}
#: Exported names only tests reach as code, each with the user the checker cannot see.
TEST_ONLY_ALLOWED: dict[str, dict[str, str]] = {
    "cmlab.teaching.workshop": {
        "participant_edition": "the participant edition's settings cell calls it; tools/participant_edition.py "
                               "writes that cell as text, which the checker does not read as code",
    },
    "cmlab.teaching.edition": {
        "notebook_edition": "the notebook edition's settings cell calls it; tools/notebook_edition.py writes that "
                            "cell as text",
        "show_paragraph": "every paragraph with numbers in the notebook edition calls it; tools/notebook_edition.py "
                          "writes those cells as text",
    },
}


def _names_reached(tree: ast.AST) -> set[str]:
    """The names code reaches in other modules: the names it imports, and every attribute it reads or sets.
    A bare name does not count: in a module that imports nothing under it, it is a local that shares the name."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found |= {alias.name for alias in node.names}
    return found


def _literal(tree: ast.Module, target: str) -> list[str] | None:
    """The literal list or tuple a module assigns to ``target`` at its top, or None (absent or computed)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == target for t in node.targets):
            try:
                return list(ast.literal_eval(node.value))
            except ValueError:
                return None
    return None


def _annotation_names(node: ast.expr | None) -> set[str]:
    """The names an annotation mentions, string annotations included."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _annotation_names(ast.parse(node.value, mode="eval").body)
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | \
        {name for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
         for name in _annotation_names(n)}


def _met_in_signatures(tree: ast.Module, exported: set[str]) -> set[str]:
    """Names the module's public functions (exported ones) and the public methods (``__init__`` and ``__call__``
    too) of its exported classes take or return in their annotations, and that its exported constants hold (their
    annotation, ``CHAPTER_WORK: Mapping[str, Work]``); a class's own methods do not count for it."""
    def signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
        a = fn.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
        return set().union(_annotation_names(fn.returns), *(_annotation_names(p.annotation) for p in params))

    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in exported:
            found |= signature(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in exported:
            found |= _annotation_names(node.annotation)
        elif isinstance(node, ast.ClassDef) and node.name in exported:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        (not item.name.startswith("_") or item.name in ("__init__", "__call__")):
                    found |= signature(item) - {node.name}
    return found


def _types(tree: ast.Module) -> set[str]:
    """The types a module defines at its top: its classes and its type aliases (a CamelCase name assigned there,
    ``Comparison = Callable[...]``; an ALL_CAPS name is a constant)."""
    aliases = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
               if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()}
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef)} | aliases


def _unused_exports(modules: dict[str, str], users: list[str], top_level: dict[str, set[str]],
                    entry_points: set[str]) -> dict[str, list[str]]:
    """Each module's exported names that no other module, no user's code and no entry point (``module:name``)
    reaches, by module. Exempt: (a) a class or type alias the module's own public functions or methods take or
    return, or its public constants hold (a result type: its user meets it without naming it), (b) a name its
    package's ``__init__`` lifts to the top (``top_level``: package -> names, chainmark's ``__all__``)."""
    trees = {name: ast.parse(source) for name, source in modules.items()}
    reached = {name: _names_reached(tree) for name, tree in trees.items()}
    by_users = set().union(*(_names_reached(ast.parse(source)) for source in users))
    unused = {}
    for name, tree in trees.items():
        exported = _literal(tree, "__all__")
        if not exported:
            continue
        elsewhere = by_users.union(*(r for other, r in reached.items() if other != name))
        lifted = set().union(*(names for package, names in top_level.items() if name.startswith(package + ".")))
        met = _met_in_signatures(tree, set(exported)) & _types(tree)
        names = [n for n in exported if n not in elsewhere and n not in lifted and n not in met
                 and f"{name}:{n}" not in entry_points]
        if names:
            unused[name] = names
    return unused


def _users_code(root: Path, folders: tuple[str, ...] = USERS) -> list[str]:
    """The code outside the packages: that of ``folders`` (tests, tools, benchmarks), every chapter's code cells,
    and the code cells of the book's MyST pages (``book/teaching.md``)."""
    code = [p.read_text("utf-8") for folder in folders for p in sorted((root / folder).rglob("*.py"))]
    for nb in sorted((root / "book").glob("*.ipynb")):
        code += [_cell_code(c) for c in json.loads(nb.read_text("utf-8"))["cells"] if c["cell_type"] == "code"]
    for page in sorted((root / "book").glob("*.md")):
        for cell in re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", page.read_text("utf-8"), flags=re.M | re.S):
            lines = cell.splitlines(keepends=True)
            while lines and lines[0].startswith(":"):  # the cell's options (:tags: [...])
                lines.pop(0)
            code.append(_cell_code({"source": lines}))
    return code


def _entry_points(root: Path) -> set[str]:
    """``module:name`` of every script and entry point the two pyproject.toml files declare."""
    import tomllib

    found = set()
    for path in (root / "pyproject.toml", root / "book" / "pyproject.toml"):
        project = tomllib.loads(path.read_text("utf-8"))["project"]
        groups = [project.get("scripts", {}), *project.get("entry-points", {}).values()]
        found |= {target.split("[")[0].strip() for group in groups for target in group.values()}
    return found


def _top_level() -> dict[str, set[str]]:
    """The names each package lifts to its top: ``chainmark``'s, read from its ``__init__``'s import lines."""
    import chainmark

    return {"chainmark": set(chainmark.__all__)}


def test_every_exported_name_is_used_outside_its_module():
    """Each name in a module's ``__all__``, in ``chainmark`` and in the lab, is used as code outside its
    module (see :func:`_unused_exports` for what counts and the two exemptions); else it is private or gone."""
    sources = {_dotted(p): p.read_text("utf-8") for p in _modules()}
    top_level = _top_level()
    unused = _unused_exports(sources, _users_code(ROOT), top_level, _entry_points(ROOT))
    assert "chainmark" in top_level and "detect" in top_level["chainmark"]  # the top level is read
    unexcused = {module: sorted(set(names) - UNUSED_EXPORTS_ALLOWED.get(module, set()))
                 for module, names in unused.items()}
    unexcused = {module: names for module, names in unexcused.items() if names}
    assert unexcused == {}, "exported but used nowhere outside their module (make them private, or remove them):\n" \
        + "\n".join(f"  {module}: {', '.join(names)}" for module, names in sorted(unexcused.items()))
    stale = {module: sorted(names - set(unused.get(module, ()))) for module, names in UNUSED_EXPORTS_ALLOWED.items()}
    assert {module: names for module, names in stale.items() if names} == {}, "allowed but now used or gone"


def test_the_export_checker_finds_an_unused_name(tmp_path):
    """A name exported and used nowhere else is caught; one a user imports, one reached as an attribute, a result
    type or type alias a public function returns, a top-level name and an entry point's target are not; prose does
    not count."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(textwrap.dedent('''\
        """The module; ``lonely`` is only named in prose."""
        __all__ = ["Check", "Result", "attribute", "imported", "lifted", "lonely", "main", "make", "make_check"]

        class Result: ...
        Check = Callable[[int], bool]
        def make() -> "Result": return Result()
        def make_check() -> Check: return bool
        def imported(): ...
        def attribute(): ...
        def lifted(): ...
        def lonely(): ...
        def main(): ...
        '''), "utf-8")
    (tmp_path / "user.py").write_text('from pkg.mod import imported\nimport pkg\npkg.mod.attribute()\n'
                                      'print("lonely", pkg.mod.make(), pkg.mod.make_check())  # lonely, in prose\n',
                                      "utf-8")
    modules = {"pkg.mod": (tmp_path / "pkg" / "mod.py").read_text("utf-8")}
    users = [(tmp_path / "user.py").read_text("utf-8")]
    assert _unused_exports(modules, users, {"pkg": {"lifted"}}, {"pkg.mod:main"}) == {"pkg.mod": ["lonely"]}
    assert _unused_exports(modules, [], {}, set()) == {"pkg.mod": ["attribute", "imported", "lifted", "lonely",
                                                                    "main", "make", "make_check"]}


def _raised_exceptions(tree: ast.Module) -> set[str]:
    """The exception classes a module defines and raises: the user meets them in an ``except`` without importing
    them from a test, so they are public however few callers name them."""
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)
               and any(isinstance(b, ast.Name) and b.id.endswith(("Error", "Exception")) for b in n.bases)}
    raised = {n.exc.func.id for n in ast.walk(tree) if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call)
              and isinstance(n.exc.func, ast.Name)}
    return classes & raised


def _test_only_exports(sources: dict[str, str], root: Path, top_level: dict[str, set[str]],
                       entry_points: set[str]) -> dict[str, list[str]]:
    """Each module's exported names that only tests reach: unused once tests/ is left out of the users, less the
    exceptions the module raises."""
    users = _users_code(root, tuple(folder for folder in USERS if folder != "tests"))
    unused = _unused_exports(sources, users, top_level, entry_points)
    found = {}
    for module, names in unused.items():
        raised = _raised_exceptions(ast.parse(sources[module]))
        names = [n for n in names if n not in raised]
        if names:
            found[module] = names
    return found


def test_no_exported_name_is_reached_only_by_tests():
    """A name in a module's ``__all__`` that nothing but tests reaches is private (``_name``) or gone: tests test
    the public behaviour, and a name the tests alone need is no part of the API (the exceptions a module raises
    excepted, and the few names of :data:`TEST_ONLY_ALLOWED`, whose users the checker cannot see)."""
    sources = {_dotted(p): p.read_text("utf-8") for p in _modules()}
    top_level = _top_level()
    found = _test_only_exports(sources, ROOT, top_level, _entry_points(ROOT))
    unexcused = {module: sorted(set(names) - set(TEST_ONLY_ALLOWED.get(module, {})))
                 for module, names in found.items()}
    unexcused = {module: names for module, names in unexcused.items() if names}
    assert unexcused == {}, "exported but reached only by tests (make them private, or remove them):\n" \
        + "\n".join(f"  {module}: {', '.join(names)}" for module, names in sorted(unexcused.items()))
    stale = {module: sorted(set(names) - set(found.get(module, ()))) for module, names in TEST_ONLY_ALLOWED.items()}
    assert {module: names for module, names in stale.items() if names} == {}, "allowed but now used or gone"


def test_the_test_only_checker_finds_a_name_only_tests_reach(tmp_path):
    """A name only a test imports is caught; one a tool imports, and an exception the module raises, are not."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tools").mkdir()
    (tmp_path / "book").mkdir()
    source = textwrap.dedent('''\
        __all__ = ["Broken", "for_tests", "for_tools"]
        class Broken(ValueError): ...
        def for_tests(): ...
        def for_tools(): raise Broken("no")
        ''')
    (tmp_path / "tests" / "test_mod.py").write_text("from pkg.mod import Broken, for_tests, for_tools\n", "utf-8")
    (tmp_path / "tools" / "tool.py").write_text("from pkg.mod import for_tools\n", "utf-8")
    assert _test_only_exports({"pkg.mod": source}, tmp_path, {}, set()) == {"pkg.mod": ["for_tests"]}
    (tmp_path / "tools" / "tool.py").write_text("from pkg.mod import for_tests, for_tools\n", "utf-8")
    assert _test_only_exports({"pkg.mod": source}, tmp_path, {}, set()) == {}
