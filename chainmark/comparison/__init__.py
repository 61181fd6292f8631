"""What the book compares ChainMark against: KGW and SWEET, the attacks, the likelihood-ratio
detector, text quality and the false-positive-rate recipes.
"""
from __future__ import annotations

from .._exports import lazy_exports

#: The modules whose ``__all__`` this package exports, each imported on first use of one of its names.
MODULES = ("attacks", "adversary", "rewrites", "baselines", "fpr_recipes", "lrdetect", "quality",)
__getattr__, __dir__ = lazy_exports(__name__, __file__, MODULES)
