"""Lazy package exports read from the modules' ``__all__``, so a package's names never drift from its modules.

A package lists the modules it re-exports; the first time a name is looked
up, each module's ``__all__`` is read from its source (parsed, not
imported), and only the module that defines the name is imported (PEP 562).
So ``import chainmark`` and the auditor's install pay for torch only when a
name that needs it is touched. The book's lab builds its packages with it too,
and ``tools/write_stubs.py`` writes the editors' stubs from the same names.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["exported_names", "lazy_exports"]


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
