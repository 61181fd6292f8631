"""What the book compares ChainMark against: KGW and SWEET, the attacks, the likelihood-ratio
detector, text quality, the false-positive-rate recipes, a peer anytime-valid e-process, a peer segment finder
the adversary who steals the key from its outputs, and the context-keyed variant that defends against it.
"""
from __future__ import annotations

from chainmark.exports import lazy_exports

#: The modules whose ``__all__`` this package exports, each imported on first use of one of its names.
MODULES = ("attacks", "adversary", "rewrites", "baselines", "fpr_recipes", "lrdetect", "quality", "anytime_peer",
           "segments_peer", "stealing", "model_check", "context_keyed", "transit")
__getattr__, __dir__ = lazy_exports(__name__, __file__, MODULES)
