"""Package exports that never drift from what the package's files say.

Two ways, both PEP 562 (a module's ``__getattr__``):

- :func:`top_level_exports` serves a package whose ``__init__.py`` imports its
  names itself (``chainmark``): the import lines are the only list. Names whose
  module is heavy sit under ``if TYPE_CHECKING:``, where editors read them, and
  are imported on first use; ``__all__`` is read from the same lines.
- :func:`lazy_exports` serves a package that lists its modules (the auditor,
  serving, the book's lab): the first time a name is looked up, each module's
  ``__all__`` is read from its source (parsed, not imported), and only the module
  that defines the name is imported; ``tools/write_stubs.py`` writes the editors'
  stubs from the same lists.

So ``import chainmark`` and the auditor's install pay for torch only when a
name that needs it is touched.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["exported_names", "lazy_exports", "top_level_exports"]


def exported_names(package_dir: Path, modules: Sequence[str]) -> dict[str, str]:
    """Every name in the ``__all__`` of each module, mapped to its module; a name in two modules is an error.

    A module may sit in a subpackage (``"auditor.rates"``)."""
    found: dict[str, str] = {}
    for module in modules:
        tree = ast.parse((package_dir / f"{module.replace('.', '/')}.py").read_text("utf-8"))
        names = next((ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)), None)
        if names is None:
            raise ImportError(f"{package_dir.name}/{module}.py declares no __all__")
        for name in names:
            if name in found and found[name] != module:
                raise ImportError(f"{name!r} is exported by both {found[name]} and {module}")
            found[name] = module
    return found


def lazy_exports(package: str, package_file: str, modules: Sequence[str], subpackages: Sequence[str] = (),
                 only: Sequence[str] | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` exporting the ``__all__`` of ``modules`` (and ``subpackages``).

    ``only`` keeps the package's own names to that list (each must be in one module's ``__all__``); the
    modules' other names stay reachable through their module (``package.module.name``)."""
    here = Path(package_file).resolve().parent
    table: dict[str, str] = {}

    def names() -> dict[str, str]:
        if not table:
            found = exported_names(here, modules)
            if only is not None:
                missing = sorted(set(only) - set(found))
                if missing:
                    raise ImportError(f"{package} lists names no module exports: {', '.join(missing)}")
                found = {name: found[name] for name in only}
            table.update(found)
        return table

    def __getattr__(name: str) -> Any:
        if name == "__all__":  # read on demand: ``from package import *`` and tools that list the API
            return sorted(names())
        module = names().get(name)  # a function named like its module (detect, entropy) wins over the module
        if module is None:
            if name in subpackages or (name in modules and "." not in name):
                return importlib.import_module(f"{package}.{name}")
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(importlib.import_module(package), name, value)  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(names()) | set(subpackages) | {m for m in modules if "." not in m})

    return __getattr__, __dir__


def _reexports(init_file: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The names a package's ``__init__.py`` re-exports, ``from .module import name as name``, each mapped to its
    module: (those imported at its top, those imported under ``if TYPE_CHECKING:``). The redundant ``as`` is how
    a typed package tells type checkers that a name is re-exported; an import without it is the package's own."""
    tree = ast.parse(init_file.read_text("utf-8"))
    eager: dict[str, str] = {}
    deferred: dict[str, str] = {}

    def collect(body: list[ast.stmt], into: dict[str, str]) -> None:
        for node in body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                into.update({a.name: node.module for a in node.names if a.asname == a.name})

    collect(tree.body, eager)
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            collect(node.body, deferred)
    both = sorted(set(eager) & set(deferred))
    if both:
        raise ImportError(f"{init_file} imports {', '.join(both)} both at its top and under TYPE_CHECKING")
    return eager, deferred


def top_level_exports(package: str, package_file: str, modules: Sequence[str]
                      ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` when its ``__init__.py`` imports its names itself.

    The names are its ``from .module import name as name`` lines; those under ``if TYPE_CHECKING:`` (a module
    that imports torch) are imported on first use. ``__all__`` is those names, read on demand; ``modules`` (the
    method's modules and the subpackages, ``package.module``) are imported on first use and listed by ``dir``.

    >>> import chainmark
    >>> "detect" in chainmark.__all__ and "generate" in chainmark.__all__
    True
    """
    init_file = Path(package_file).resolve()
    table: dict[str, str] = {}

    def names() -> dict[str, str]:
        if not table:
            eager, deferred = _reexports(init_file)
            table.update(eager | deferred)
        return table

    def __getattr__(name: str) -> Any:
        if name == "__all__":  # read on demand: ``from package import *`` and tools that list the API
            return sorted(names())
        module = names().get(name)
        if module is not None:
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
        elif name in modules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(importlib.import_module(package), name, value)  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(names()) | set(modules))

    return __getattr__, __dir__
