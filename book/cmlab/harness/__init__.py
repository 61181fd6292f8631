"""The experiment harness: settings, model loading, prompts and corpora, the runner and its
records, run folders, the explorers' grids, the mixed documents, the stealing experiment, serving through vLLM
and the committed reference run.
"""
from __future__ import annotations

from chainmark.exports import lazy_exports

#: The modules whose ``__all__`` this package exports, each imported on first use of one of its names.
MODULES = ("settings", "models", "prompts", "corpora", "adapters", "options", "runner", "runs", "grids", "mixed", "stealing",
           "context_keyed", "serving")
__getattr__, __dir__ = lazy_exports(__name__, __file__, MODULES, ("reference",))
