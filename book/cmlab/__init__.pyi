"""Static names of ``cmlab`` for editors and type checkers; the runtime loads them lazily.

Written by ``tools/write_stubs.py`` from the modules' ``__all__``: do not edit."""
from __future__ import annotations

from . import comparison as comparison
from . import harness as harness
from . import stats as stats
from . import teaching as teaching

__version__: str
SUBPACKAGES: tuple[str, ...]
__all__ = ["comparison", "harness", "stats", "teaching"]
