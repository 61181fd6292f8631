"""Write the ``__init__.pyi`` stubs that let editors and type checkers see the packages' lazy names.

The auditor, serving and the lab's packages load their names on first use (PEP 562,
``chainmark/exports.py``), so that importing them never pays for torch. (``chainmark``
itself imports its names in its ``__init__.py``, which editors read as it is.)
A runtime ``__getattr__`` is invisible to static tools; a stub beside each such
``__init__.py`` lists every name with the module that defines it, as
Scientific Python's SPEC 1 does with ``lazy_loader``. The stubs are generated
from the same ``__all__`` lists the runtime reads, so they cannot drift::

    python tools/write_stubs.py          # write the stubs
    python tools/write_stubs.py --check  # exit 1 if a stub is missing or stale (the test suite runs this)
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The packages whose names are loaded lazily: (import name, the attribute listing its modules, subpackages).
LAZY_PACKAGES = (
    ("chainmark.auditor", "MODULES", None),
    ("chainmark.serving", "MODULES", None),
    ("cmlab", None, "SUBPACKAGES"),
    ("cmlab.harness", "MODULES", ("reference",)),
    ("cmlab.harness.reference", "MODULES", None),
    ("cmlab.comparison", "MODULES", None),
    ("cmlab.teaching", "MODULES", None),
)


def _packed(items: list[str], width: int = 116) -> list[str]:
    """``items`` as indented lines of at most ``width`` characters, whole items to a line (a stub stays short)."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 1 + len(item) <= width:
            lines[-1] += " " + item
        else:
            lines.append("    " + item)
    return lines


def stub_text(package: str, modules_attr: str | None, subpackages: str | tuple[str, ...] | None) -> str:
    """The stub of one lazy package: its subpackages and modules, then every exported name from its module."""
    from chainmark.exports import exported_names

    pkg = importlib.import_module(package)
    here = Path(pkg.__file__).parent
    modules = tuple(getattr(pkg, modules_attr)) if modules_attr else ()
    subs = tuple(getattr(pkg, subpackages)) if isinstance(subpackages, str) else tuple(subpackages or ())
    names = exported_names(here, modules) if modules else {}
    lines = [f'"""Static names of ``{package}`` for editors and type checkers; the runtime loads them lazily.',
             "", 'Written by ``tools/write_stubs.py`` from the modules\' ``__all__``: do not edit."""',
             "from __future__ import annotations", ""]
    # a function named like a module wins over the module, as at run time
    for sub in sorted(set(subs) | {m for m in modules if m not in names and "." not in m}):
        lines.append(f"from . import {sub} as {sub}")
    by_module: dict[str, list[str]] = {}
    for name, module in names.items():
        by_module.setdefault(module, []).append(name)
    for module in sorted(by_module):
        lines += [f"from .{module} import (", *_packed([f"{name} as {name}," for name in sorted(by_module[module])]),
                  ")"]
    lines.append("")
    for const in ("__version__",):
        if hasattr(pkg, const):
            lines.append(f"{const}: str")
    for attr in (modules_attr, subpackages if isinstance(subpackages, str) else None):
        if attr:
            lines.append(f"{attr}: tuple[str, ...]")
    exported = sorted(names) or sorted(subs)  # as at run time: the names, or a bare package's subpackages
    lines.append("__all__ = [" + ", ".join(f'"{n}"' for n in exported) + "]")
    return "\n".join(lines) + "\n"


def stub_path(package: str) -> Path:
    return Path(importlib.import_module(package).__file__).with_suffix(".pyi")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale stubs instead of writing them")
    args = parser.parse_args(argv)
    stale = []
    for package, modules_attr, subpackages in LAZY_PACKAGES:
        path, text = stub_path(package), stub_text(package, modules_attr, subpackages)
        if path.is_file() and path.read_text("utf-8") == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text, "utf-8")
    verb = "stale (run python tools/write_stubs.py)" if args.check else "written"
    for path in stale:
        print(f"{verb}: {path.relative_to(ROOT)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
