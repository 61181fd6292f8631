"""Every name a module of ``chainmark`` or the book's lab ``cmlab`` exports is used outside it.

An exported name that nothing outside its module uses becomes private or goes. "Used" means reached as code (an
imported name or an attribute, not prose, docstrings or strings) by another module of either package, by tests/,
tools/ or benchmarks/, by a chapter's code cell, or named by an entry point in a pyproject.toml.
"""
from __future__ import annotations

import ast
import json
import re
import textwrap
from pathlib import Path

from test_architecture import PACKAGE, ROOT, _cell_code, _dotted, _modules

#: Where the packages' users live, beside the packages themselves.
USERS = ("tests", "tools", "benchmarks")
#: Exported names unused today, each with why it may stay for now. This list only ever gets shorter.
UNUSED_EXPORTS_ALLOWED: dict[str, set[str]] = {}


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
    package's ``__init__`` lifts to the top (``top_level``: package -> names, chainmark's ``TOP_LEVEL``)."""
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


def _users_code(root: Path) -> list[str]:
    """The code outside the packages: tests, tools, benchmarks, every chapter's code cells, and the code cells of
    the book's MyST pages (``book/teaching.md``)."""
    code = [p.read_text("utf-8") for folder in USERS for p in sorted((root / folder).rglob("*.py"))]
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


def test_every_exported_name_is_used_outside_its_module():
    """Each name in a module's ``__all__``, in ``chainmark`` and in the lab, is used as code outside its
    module (see :func:`_unused_exports` for what counts and the two exemptions); else it is private or gone."""
    sources = {_dotted(p): p.read_text("utf-8") for p in _modules()}
    top_level = {name: set(_literal(ast.parse(source), "TOP_LEVEL") or ()) for name, source in sources.items()
                 if (PACKAGE / Path(*name.split(".")[1:]) / "__init__.py").is_file() and name.startswith("chainmark")}
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
