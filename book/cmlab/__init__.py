"""The book's lab: everything the chapters run around the method, kept with the book and out of the wheel.

``import cmlab as lab`` gives three subpackages and a module, each loaded on first use:
``lab.harness`` (settings, models, prompts and corpora, the runner, run folders,
grids, the mixed documents and the committed reference run), ``lab.comparison``
(KGW, SWEET, the attacks, the likelihood-ratio detector, text quality),
``lab.teaching`` (claims, plots, widgets, the playground, forecasts, the
workshop's checks) and, beneath them all, ``lab.stats``, the experiments'
statistics (bootstrap intervals, split halves, thresholds with their
uncertainty). The method itself is :mod:`chainmark`; it never imports this.
"""
from __future__ import annotations

import importlib
from types import ModuleType

__version__ = "0.1.0"

SUBPACKAGES = ("harness", "comparison", "teaching", "stats")
__all__ = list(SUBPACKAGES)


def __getattr__(name: str) -> ModuleType:
    """``lab.harness`` and its siblings, imported on first use (PEP 562)."""
    if name in SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(SUBPACKAGES)
